// training_run.hpp: the harness the equivalence tests share: train a deck on
// the first ranks of the world (the others sit out), record each step's loss
// and gradient norm and the final parameters, and compare two runs bit for
// bit. One definition instead of a RunResult / train_on / bit-difference
// helper per test file.
#pragma once

#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "pipetrain/runtime/trainer.hpp"
#include "bitwise.hpp"

namespace pt::test {

struct RunResult {
  std::vector<float> params;       // the whole model, on rank 0 of the run only
  std::vector<double> losses;      // (steps)
  std::vector<double> grad_norms;  // (steps) before clipping
};

// Calls body(comm) with a communicator of the first `ranks` ranks of the
// world; the other ranks skip it. Collective over MPI_COMM_WORLD.
template <class Body>
void on_first_ranks(int ranks, Body body) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, rank < ranks ? 0 : MPI_UNDEFINED, rank, &comm);
  if (comm == MPI_COMM_NULL) return;
  body(comm);
  MPI_Comm_free(&comm);
}

inline void record_step(RunResult& r, const StepRecord& rec) {
  r.losses.push_back(rec.loss);
  r.grad_norms.push_back(rec.grad_norm);
}

// Trains deck.training.steps steps with `trainer`, then gathers the parameters.
inline RunResult train_steps(Trainer& trainer, const Deck& deck) {
  RunResult r;
  for (int64_t s = 0; s < deck.training.steps; ++s) record_step(r, trainer.train_step(s));
  r.params = trainer.gather_parameters();
  return r;
}

// Trains `deck` on the first `ranks` ranks of the world (an empty result on the others).
inline RunResult train_on(const Deck& deck, int ranks) {
  RunResult r;
  on_first_ranks(ranks, [&](MPI_Comm comm) {
    Trainer trainer(deck, comm);
    r = train_steps(trainer, deck);
  });
  return r;
}

// The same deck on this process alone.
inline RunResult train_alone(const Deck& deck) {
  Trainer trainer(deck, MPI_COMM_SELF);
  return train_steps(trainer, deck);
}

// Every parameter and loss bit for bit, and with `norms` every gradient norm.
inline void expect_bitwise(const RunResult& got, const RunResult& want, const std::string& label,
                           bool norms = false) {
  ASSERT_EQ(got.params.size(), want.params.size()) << label;
  EXPECT_EQ(bitwise_differences(got.params, want.params), 0u) << label << ": parameters differ";
  ASSERT_EQ(got.losses.size(), want.losses.size()) << label;
  for (size_t s = 0; s < want.losses.size(); ++s)
    EXPECT_TRUE(same_bits(got.losses[s], want.losses[s]))
        << label << ": loss of step " << s << " " << got.losses[s] << " vs " << want.losses[s];
  if (!norms) return;
  ASSERT_EQ(got.grad_norms.size(), want.grad_norms.size()) << label;
  for (size_t s = 0; s < want.grad_norms.size(); ++s)
    EXPECT_TRUE(same_bits(got.grad_norms[s], want.grad_norms[s]))
        << label << ": gradient norm of step " << s << " " << got.grad_norms[s] << " vs "
        << want.grad_norms[s];
}

}  // namespace pt::test
