// test_fused_attention_run.cpp: training a GPT with model.attention =
// "fused" (the CPU backend's fused attention group) through the real
// pipeline, on every rank of the world:
//   - its losses stay within fp32 rounding of the reference attention's
//     (not bitwise: the fused kernels sum in another order);
//   - it is bitwise the same under every recompute policy and schedule, and
//     pipelined as on one process;
//   - each stage's peak stash is the schedule's in-flight micro-batches x
//     the analytic bytes of one micro-batch, with the row statistics
//     (H x T per block) in place of the probabilities (H x T x T): the
//     memory the fused path saves (docs/memory.md);
//   - a backend without the fused attention group is refused before the
//     first step, with one message naming the key and the backend.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "forwarding_backend.hpp"
#include "mpi_test_util.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/tensor/transformer_kernels.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "training_run.hpp"

namespace pt {
namespace {

using test::expect_bitwise;
using test::RunResult;
using test::train_alone;
using test::train_on;
using test::world_rank;
using test::world_size;

Deck gpt_deck(AttentionKind attention, const std::string& schedule, const std::string& policy) {
  Deck d;
  d.model.type = "gpt";
  d.model.gpt.vocab_size = 11;
  d.model.gpt.seq_len = 8;
  d.model.gpt.d_model = 12;
  d.model.gpt.heads = 3;
  d.model.gpt.blocks = 4;
  d.model.gpt.mlp_ratio = 2;
  d.model.gpt.attention = attention;
  d.data.type = DataKind::Markov;
  d.data.markov_order = 1;
  d.training.steps = 3;
  d.training.batch_size = 8;
  d.training.lr = 3e-3;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.recompute = policy;
  d.pipeline.timeout_s = 60;
  return d;
}

// The activation stash of the last of `deck`'s steps on every rank of the
// world: each stage's peak bytes (rank 0 only) and peak in-flight micro-batches.
struct StashPeaks {
  std::vector<double> bytes;   // per stage, activation bytes
  std::vector<int> in_flight;  // per stage
};

StashPeaks stash_peaks(const Deck& deck) {
  Trainer trainer(deck, MPI_COMM_WORLD);
  StepRecord rec;
  for (int64_t s = 0; s < deck.training.steps; ++s) rec = trainer.train_step(s);
  StashPeaks peaks;
  for (const auto& stage : rec.rank_peak_bytes)
    peaks.bytes.push_back(stage[static_cast<int>(MemCategory::Activations)]);
  peaks.in_flight = trainer.schedule_report().peak_in_flight;
  return peaks;
}

TEST(FusedAttentionRun, LossesStayWithinFp32RoundingOfTheReference) {
  const RunResult ref = train_on(gpt_deck(AttentionKind::Reference, "1f1b", "none"), world_size());
  const RunResult got = train_on(gpt_deck(AttentionKind::Fused, "1f1b", "none"), world_size());
  if (world_rank() != 0) return;
  ASSERT_EQ(got.losses.size(), ref.losses.size());
  for (size_t s = 0; s < ref.losses.size(); ++s) {
    const double rel = std::fabs(got.losses[s] - ref.losses[s]) / ref.losses[s];
    std::printf("  step %zu: fused %.9f reference %.9f relative difference %.2e\n", s,
                got.losses[s], ref.losses[s], rel);
    EXPECT_LE(rel, 1e-5) << "step " << s;
  }
  double worst = 0.0;
  for (size_t i = 0; i < ref.params.size(); ++i)
    worst = std::max(worst, static_cast<double>(std::fabs(got.params[i] - ref.params[i])));
  std::printf("  parameters after %zu steps: max |fused - reference| %.3e\n", ref.losses.size(), worst);
  EXPECT_LE(worst, 1e-5);
}

TEST(FusedAttentionRun, EveryPolicyAndScheduleGivesTheSameBitsAsOneProcess) {
  RunResult alone;
  if (world_rank() == 0) alone = train_alone(gpt_deck(AttentionKind::Fused, "gpipe", "none"));
  for (const char* schedule : {"gpipe", "1f1b"}) {
    for (const char* policy : {"none", "selective", "every:2", "full"}) {
      const RunResult got = train_on(gpt_deck(AttentionKind::Fused, schedule, policy), world_size());
      if (world_rank() == 0) expect_bitwise(got, alone, std::string(schedule) + " " + policy);
    }
  }
}

// Bytes one micro-batch keeps on stage s under policy none or selective
// (the same with fused attention): the layer inputs, each block's saved
// tensors with H*T row statistics, the head's, and the loss gradient.
double fused_stash(const Deck& d, int s, int stages) {
  const auto units = partition_units(d.model.gpt.blocks, stages, {});
  const double r = static_cast<double>(d.training.batch_size / d.pipeline.micro_batches);
  const double T = d.model.gpt.seq_len, C = d.model.gpt.d_model, H = d.model.gpt.heads, R = d.model.gpt.mlp_ratio;
  const bool first = s == 0, last = s == stages - 1;
  const double blocks = static_cast<double>(units[s]);
  double floats = blocks * (T * C + T * C * (7.0 + 2.0 * R) + 4.0 * T + H * T);
  if (first) floats += T;  // the i32 tokens, 4 bytes each like f32
  if (last) floats += T * C + (T * C + 2.0 * T) + T * d.model.gpt.vocab_size;  // head in, saved, dlogits
  return 4.0 * r * floats;
}

TEST(FusedAttentionRun, StashKeepsRowStatisticsInsteadOfProbabilities) {
  for (const char* policy : {"none", "selective"}) {
    const Deck deck = gpt_deck(AttentionKind::Fused, "1f1b", policy);
    const StashPeaks got = stash_peaks(deck);
    if (world_rank() != 0) continue;
    for (int s = 0; s < world_size(); ++s) {
      const double per_mb = fused_stash(deck, s, world_size());
      std::printf("  %-9s stage %d: peak stash %8.0f B = %d in flight x %6.0f B\n", policy, s,
                  got.bytes[s], got.in_flight[s], per_mb);
      EXPECT_EQ(got.bytes[s], got.in_flight[s] * per_mb) << policy << " stage " << s;
    }
  }
}

// The CPU backend with its transformer kernels but no fused attention (as
// the CUDA backend outside bf16 or below compute capability 8.0).
class NoFusedAttentionBackend final : public test::ForwardingBackend {
 public:
  const char* name() const override { return "no-fused"; }
  KernelGroup* kernel_group(const std::string& group) override {
    return group == TransformerKernels::kGroup ? cpu_backend().kernel_group(group) : nullptr;
  }
};

TEST(FusedAttentionRun, ABackendWithoutTheGroupIsRefusedBeforeTraining) {
  if (world_rank() != 0) return;
  NoFusedAttentionBackend be;
  ComputeSetup setup;
  setup.backend = &be;
  Trainer reference(gpt_deck(AttentionKind::Reference, "1f1b", "none"), MPI_COMM_SELF, setup);
  EXPECT_TRUE(std::isfinite(reference.train_step(0).loss));
  try {
    Trainer trainer(gpt_deck(AttentionKind::Fused, "1f1b", "none"), MPI_COMM_SELF, setup);
    ADD_FAILURE() << "a fused-attention trainer on a backend without the group";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "model.attention = \"fused\" needs the fused_attention kernels, which "
                           "backend \"no-fused\" does not provide");
  }
}

}  // namespace
}  // namespace pt
