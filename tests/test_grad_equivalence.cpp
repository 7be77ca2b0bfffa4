// test_grad_equivalence.cpp: pipelined training gives the single-process model.
//
// For P in {1, 2, 4} (those that fit in the MPI world), N in {1, 2, 4, 8} and
// schedule in {gpipe, 1f1b}, train several optimizer steps and compare every
// parameter and every step's loss on rank 0 with
//   (a) a single process running the same N micro-batches: BITWISE equal. The
//       per-layer arithmetic and the order in which micro-batch gradients are
//       accumulated (ascending micro-batch) are the same, so every bit is.
//   (b) a single process on the whole batch (N = 1): bitwise when N = 1, else
//       within rtol 1e-5, because the batch GEMM sums the rows in another order
//       than the sum of N micro-batch GEMMs.
// Both the MLP and a small GPT (Markov tokens) are checked.
// (b) uses SGD with momentum: Adam divides by sqrt(v), which turns rounding
// noise in near-zero gradients into full-size updates, so only (a) is run
// with AdamW.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstring>

#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "mpi_test_util.hpp"
#include "training_run.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::world_size;
using test::is_root;
using test::RunResult;
using test::expect_bitwise;
using test::train_alone;
using test::train_on;

Deck small_deck(int micro_batches, const std::string& schedule, const std::string& optimizer,
                const std::string& loss) {
  Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 24;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 8;
  d.model.activation = ActivationKind::Gelu;
  d.model.mlp.loss = kind_named<LossKind>(loss);
  d.data.samples = 256;
  d.training.steps = 4;
  d.training.batch_size = 16;
  d.training.optimizer = kind_named<OptimizerKind>(optimizer);
  d.training.lr = optimizer == "sgd" ? 0.05 : 1e-2;
  d.training.warmup_steps = 1;
  d.training.weight_decay = 0.01;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = micro_batches;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.timeout_s = 60;
  return d;
}

// A tiny GPT on Markov tokens: 4 blocks split over the stages.
Deck small_gpt_deck(int micro_batches, const std::string& schedule, const std::string& optimizer,
                    const std::string&) {
  Deck d = pt_test::tiny_gpt(small_deck(micro_batches, schedule, optimizer, "cross_entropy"), 4);
  d.training.lr = optimizer == "sgd" ? 0.1 : 3e-3;
  return d;
}

using DeckMaker = Deck (*)(int, const std::string&, const std::string&, const std::string&);

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    double scale = std::max({std::fabs(a[i]), std::fabs(b[i]), 1e-3f});
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]) / scale);
  }
  return worst;
}

struct Case {
  int stages;
  int micro_batches;
  std::string schedule;
};

std::vector<Case> cases_for_world() {
  std::vector<Case> cases;
  for (int p : {1, 2, 4})
    if (p <= world_size())
      for (int n : {1, 2, 4, 8})
        for (const char* sched : {"gpipe", "1f1b"}) cases.push_back({p, n, sched});
  return cases;
}

void check_against_single_process(const std::string& optimizer, const std::string& loss,
                                  DeckMaker make_deck = small_deck) {
  for (const Case& c : cases_for_world()) {
    const Deck deck = make_deck(c.micro_batches, c.schedule, optimizer, loss);
    RunResult piped = train_on(deck, c.stages);
    if (!is_root()) continue;
    const std::string label = deck.model.type + "/" + optimizer + "/" + loss + " P=" + std::to_string(c.stages) +
                              " N=" + std::to_string(c.micro_batches) + " " + c.schedule;
    expect_bitwise(piped, train_alone(deck), label + " vs P=1 same N");
    if (optimizer != "sgd") continue;
    RunResult full = train_alone(make_deck(1, "gpipe", optimizer, loss));
    if (c.micro_batches == 1) {
      expect_bitwise(piped, full, label + " vs full batch");
    } else {
      double rel = max_relative_difference(piped.params, full.params);
      std::printf("  %s: max relative parameter difference to full batch %.3e\n",
                  label.c_str(), rel);
      EXPECT_LE(rel, 1e-5) << label << " vs full batch";
    }
  }
}

TEST(GradientEquivalence, SgdMseMatchesSingleProcessAndFullBatch) {
  check_against_single_process("sgd", "mse");
}

TEST(GradientEquivalence, SgdCrossEntropyMatchesSingleProcessAndFullBatch) {
  check_against_single_process("sgd", "cross_entropy");
}

TEST(GradientEquivalence, AdamwMatchesSingleProcessBitwise) {
  check_against_single_process("adamw", "mse");
}

TEST(GradientEquivalence, GptSgdMatchesSingleProcessAndFullBatch) {
  check_against_single_process("sgd", "cross_entropy", small_gpt_deck);
}

TEST(GradientEquivalence, GptAdamwMatchesSingleProcessBitwise) {
  check_against_single_process("adamw", "cross_entropy", small_gpt_deck);
}

TEST(GradientEquivalence, TrainingReducesLoss) {
  Deck deck = small_deck(4, "1f1b", "adamw", "mse");
  deck.training.steps = 120;
  deck.training.lr = 1e-2;
  RunResult r = train_on(deck, std::min(world_size(), 4));
  if (is_root()) {
    std::printf("  loss %.4f -> %.4f over %zu steps\n", r.losses.front(), r.losses.back(), r.losses.size());
    EXPECT_LT(r.losses.back(), 0.5 * r.losses.front());
  }
}

}  // namespace
}  // namespace pt
