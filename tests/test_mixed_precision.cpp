// test_mixed_precision.cpp: the whole mixed-precision training logic on the
// CPU backend, which emulates the GPU's GEMM operand rounding exactly.
//
//  - bf16, tf32 and fp16 runs pipelined over the world are bitwise equal to
//    a single process running the same micro-batches (the rounding happens
//    inside each GEMM, so the stage count changes nothing);
//  - bf16 stays within the documented distance of fp32: the first loss (no
//    update yet) within 2^-6 relative, printed;
//  - fp16 with an initial loss scale that overflows: every rank skips the
//    same steps, a skipped step changes no parameter, the scale halves per
//    skip, and AdamW's update count is the number of steps not skipped.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <cstring>

#include "mpi_test_util.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "bitwise.hpp"

namespace pt {
namespace {

using test::is_root;

Deck deck_for(const std::string& precision) {
  Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 24;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 4;
  d.data.samples = 256;
  d.training.steps = 6;
  d.training.batch_size = 16;
  d.training.lr = 1e-2;
  d.training.blas_threads = 1;
  d.training.precision = kind_named<Precision>(precision);
  d.pipeline.micro_batches = 4;
  d.pipeline.timeout_s = 60;
  return d;
}

struct TrainingRun {
  std::vector<StepRecord> steps;
  std::vector<std::vector<float>> params_after;  // rank 0: after every step
  int64_t updates = 0;
};

TrainingRun train(const Deck& deck, MPI_Comm comm) {
  auto backend = make_cpu_backend(deck.training.precision);
  ComputeSetup setup;
  setup.backend = backend.get();
  Trainer trainer(deck, comm, setup);
  TrainingRun run;
  for (int64_t s = 0; s < deck.training.steps; ++s) {
    run.steps.push_back(trainer.train_step(s));
    run.params_after.push_back(trainer.gather_parameters());
  }
  run.updates = trainer.optimizer().updates();
  return run;
}

using test::same_bits;

TEST(MixedPrecision, PipelinedEqualsOneProcessBitwise) {
  for (const char* precision : {"tf32", "bf16", "fp16"}) {
    const Deck deck = deck_for(precision);
    const TrainingRun piped = train(deck, MPI_COMM_WORLD);
    if (!is_root()) continue;
    const TrainingRun alone = train(deck, MPI_COMM_SELF);
    for (size_t s = 0; s < piped.steps.size(); ++s)
      EXPECT_TRUE(same_bits(piped.steps[s].loss, alone.steps[s].loss)) << precision << " step " << s;
    EXPECT_EQ(piped.params_after.back(), alone.params_after.back()) << precision;
  }
}

TEST(MixedPrecision, Bf16StaysCloseToFp32) {
  const TrainingRun low = train(deck_for("bf16"), MPI_COMM_WORLD);
  const TrainingRun ref = train(deck_for("fp32"), MPI_COMM_WORLD);
  if (!is_root()) return;
  const double rel = std::fabs(low.steps[0].loss - ref.steps[0].loss) / ref.steps[0].loss;
  std::printf("bf16 vs fp32: first loss %.8f vs %.8f, relative difference %.2e (bound 2^-6)\n",
              low.steps[0].loss, ref.steps[0].loss, rel);
  EXPECT_LE(rel, std::ldexp(1.0, -6));
  EXPECT_GT(rel, 0.0) << "bf16 rounding changed nothing";
}

TEST(MixedPrecision, Fp16OverflowSkipsAndBacksOff) {
  Deck deck = deck_for("fp16");
  deck.training.loss_scale = 16777216.0;  // 2^24: the scaled gradients overflow fp16 at first
  deck.training.optimizer = OptimizerKind::AdamW;
  const TrainingRun run = train(deck, MPI_COMM_WORLD);
  int64_t skipped = 0;
  double scale = deck.training.loss_scale;
  for (size_t s = 0; s < run.steps.size(); ++s) {
    const StepRecord& r = run.steps[s];
    EXPECT_EQ(r.loss_scale, scale) << "step " << s;
    if (r.skipped) {
      ++skipped;
      scale *= 0.5;
      if (is_root() && s > 0) {
        EXPECT_EQ(run.params_after[s], run.params_after[s - 1]) << "step " << s;
      }
    } else {
      EXPECT_TRUE(std::isfinite(r.loss)) << "step " << s;
      EXPECT_TRUE(std::isfinite(r.grad_norm)) << "step " << s;
    }
  }
  EXPECT_GT(skipped, 0) << "no overflow: the test does not exercise the scaler";
  EXPECT_LT(skipped, deck.training.steps) << "never recovered from the overflow";
  EXPECT_EQ(run.updates, deck.training.steps - skipped);
}

}  // namespace
}  // namespace pt
