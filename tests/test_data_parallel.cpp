// test_data_parallel.cpp: data parallel x pipeline (docs/data-parallel.md).
//
// Each case trains on the first P x D ranks of the world as a process grid
// (ProcessGrid: D replicas of a P-rank pipeline) and compares losses and
// every parameter bit with other layouts:
//   - dp_reduction = "ordered": every P x D with the same micro-batch size
//     (D x micro_batches fixed) is bitwise the same, MLP and GPT, 1F1B, GPipe
//     and interleaved;
//   - dp_reduction = "replica": bitwise the same across P at one D, and
//     within a tolerance of "ordered";
//   - the replicas of a stage hold bitwise the same parameters after training;
//   - clipping (every case clips) and fp16 loss scaling act the same on the
//     whole grid: the same steps skipped, the same scales, bitwise results;
//   - the replicas split the global batch without overlap: a replica's share
//     is the slice a single pipeline gives the same global micro-batches;
//   - the trace has one REDUCTION event per bucket and step, starting after
//     the bucket's stage did its last backward of the step;
//   - the deck's grid checks give their specific messages.
// Runs at 1, 2 and 4 ranks; layouts that need more ranks are skipped there.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "mpi_test_util.hpp"
#include "training_run.hpp"
#include "error_of.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::is_root;
using test::world_rank;
using test::world_size;

Deck mlp_deck(const std::string& schedule, const std::string& reduction) {
  Deck d = pt_test::tiny_mlp(16);  // clipping uses the global norm of the reduced gradient
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.data_parallel.reduction = kind_named<DpReductionKind>(reduction);
  d.data_parallel.bucket_mb = 0.002;  // several buckets per stage
  return d;
}

Deck gpt_deck(const std::string& schedule, const std::string& reduction) {
  Deck d = pt_test::tiny_gpt(mlp_deck(schedule, reduction), 4);
  d.training.lr = 3e-3;
  return d;
}

struct Layout {
  int p, d;  // pipeline ranks x replicas
};

std::string name(const Layout& l) { return std::to_string(l.p) + "x" + std::to_string(l.d); }

struct GridRun {
  bool ran = false;
  std::vector<double> losses;                    // world rank 0
  std::vector<int> skipped;                      // world rank 0: fp16 steps skipped (1) per step
  std::vector<double> scales;                    // world rank 0: fp16 loss scale per step
  std::vector<float> params;                     // world rank 0 (replica 0)
  bool replicas_equal = true;                    // world rank 0: every replica's parameters
  std::vector<std::vector<TraceEvent>> events;   // world rank 0: replica 0's pipeline
  int buckets_per_step = 0;                      // world rank 0: over replica 0's pipeline
};

// Trains `deck` (micro_batches = global_mb / D) on the first P x D ranks.
GridRun train_grid(Deck deck, const Layout& l, int global_mb) {
  GridRun result;
  const int ranks = l.p * l.d;
  if (ranks > world_size()) return result;
  deck.data_parallel.replicas = l.d;
  deck.pipeline.micro_batches = global_mb / l.d;
  if (deck.pipeline.schedule == ScheduleKind::Interleaved) deck.pipeline.virtual_stages = 2;
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  result.ran = true;
  if (sub == MPI_COMM_NULL) return result;
  {
    ProcessGrid grid(sub, l.d);
    std::unique_ptr<Backend> backend;  // reduced precision: the CPU's exact emulation
    ComputeSetup setup;
    if (deck.training.precision != Precision::Fp32) {
      backend = make_cpu_backend(deck.training.precision);
      setup.backend = backend.get();
    }
    Trainer trainer(deck, grid, setup);
    for (int64_t s = 0; s < deck.training.steps; ++s) {
      const StepRecord rec = trainer.train_step(s);
      result.losses.push_back(rec.loss);
      result.skipped.push_back(rec.skipped ? 1 : 0);
      result.scales.push_back(rec.loss_scale);
    }
    std::vector<float> mine = trainer.gather_parameters();  // on each pipeline's rank 0
    // Replica 0's pipeline rank 0 (world rank 0) compares every replica's parameters.
    if (grid.pipeline_rank() == 0) {
      long long n = static_cast<long long>(mine.size());
      std::vector<float> all(static_cast<size_t>(n) * l.d);
      MPI_Comm firsts = MPI_COMM_NULL;
      MPI_Comm_split(grid.replicas(), 0, grid.replica(), &firsts);
      MPI_Gather(mine.data(), static_cast<int>(n), MPI_FLOAT, all.data(), static_cast<int>(n),
                 MPI_FLOAT, 0, firsts);
      MPI_Comm_free(&firsts);
      for (int r = 1; r < l.d && grid.replica() == 0; ++r)
        if (std::memcmp(all.data(), all.data() + r * n, static_cast<size_t>(n) * sizeof(float)) != 0)
          result.replicas_equal = false;
    } else {
      MPI_Comm firsts = MPI_COMM_NULL;
      MPI_Comm_split(grid.replicas(), MPI_UNDEFINED, grid.replica(), &firsts);
    }
    result.params = std::move(mine);
    if (deck.output.trace) result.events = trainer.gather_trace();
    int mine_buckets = static_cast<int>(trainer.reducer().buckets().size()), sum = 0;
    MPI_Reduce(&mine_buckets, &sum, 1, MPI_INT, MPI_SUM, 0, grid.pipeline());
    result.buckets_per_step = sum;
  }
  MPI_Comm_free(&sub);
  return result;
}

void expect_bitwise(const GridRun& ref, const GridRun& got, const std::string& what) {
  if (!is_root() || !got.ran) return;
  ASSERT_EQ(ref.params.size(), got.params.size()) << what;
  ASSERT_GT(got.params.size(), 0u) << what;
  EXPECT_EQ(test::bitwise_differences(ref.params, got.params), 0u) << what << ": parameters differ";
  ASSERT_EQ(ref.losses.size(), got.losses.size()) << what;
  for (size_t s = 0; s < ref.losses.size(); ++s)
    EXPECT_TRUE(test::same_bits(ref.losses[s], got.losses[s]))
        << what << ": loss of step " << s << " " << ref.losses[s] << " vs " << got.losses[s];
  EXPECT_TRUE(got.replicas_equal) << what << ": replicas hold different parameters";
  if (ref.skipped.empty()) return;  // a reference without a grid records no steps
  EXPECT_EQ(ref.skipped, got.skipped) << what << ": fp16 steps skipped";
  EXPECT_EQ(ref.scales, got.scales) << what << ": fp16 loss scales";
}

const std::vector<Layout> kLayouts = {{1, 1}, {2, 1}, {1, 2}, {2, 2}, {4, 1}, {1, 4}};

// "ordered": one global micro-batch order, whatever the layout.
TEST(DataParallel, OrderedIsBitwiseAcrossEveryLayout) {
  for (const char* schedule : {"1f1b", "gpipe"})
    for (auto make : {mlp_deck, gpt_deck}) {
      const Deck deck = make(schedule, "ordered");
      const GridRun ref = train_grid(deck, {1, 1}, 4);
      for (const Layout& l : kLayouts)
        expect_bitwise(ref, train_grid(deck, l, 4),
                       std::string(schedule) + " " + deck.model.type + " " + name(l));
    }
}

TEST(DataParallel, OrderedInterleavedIsBitwiseAcrossLayouts) {
  // Interleaved: 2 stages per rank, micro-batches a multiple of the ranks.
  const Deck deck = mlp_deck("interleaved", "ordered");
  Deck one = deck;
  one.pipeline.schedule = ScheduleKind::OneFOneB;  // one rank, 1 stage: the reference order
  const GridRun ref = train_grid(one, {1, 1}, 4);
  for (const Layout& l : std::vector<Layout>{{2, 1}, {2, 2}})
    expect_bitwise(ref, train_grid(deck, l, 4), "interleaved " + name(l));
}

// fp16 with a loss scale that overflows at first: every replica and stage
// skips the same steps and backs the scale off the same way, and the layouts
// stay bitwise equal (the overflow check reads the reduced gradients).
TEST(DataParallel, Fp16LossScalingIsConsistentAcrossTheGrid) {
  Deck deck = mlp_deck("1f1b", "ordered");
  deck.training.precision = Precision::Fp16;
  deck.training.loss_scale = 16777216.0;  // 2^24: overflows fp16 for the first steps
  deck.training.steps = 8;
  const GridRun ref = train_grid(deck, {1, 1}, 4);
  if (is_root()) {
    int skipped = 0;
    for (int s : ref.skipped) skipped += s;
    EXPECT_GT(skipped, 0) << "no overflow: the case does not exercise the scaler";
    EXPECT_LT(skipped, 8) << "never recovered from the overflow";
  }
  for (const Layout& l : std::vector<Layout>{{1, 2}, {2, 2}, {1, 4}})
    expect_bitwise(ref, train_grid(deck, l, 4), "fp16 " + name(l));
}

// "replica": bitwise across P at one D; within rounding of "ordered".
TEST(DataParallel, ReplicaIsBitwiseAcrossPipelinesAtOneReplicaCount) {
  for (const char* schedule : {"1f1b", "zb-h1", "1f1b+step"}) {
    // "1f1b+step": pipeline.weight_grad = "step", whose one pass of weight
    // gradients per stage reports every (micro-batch, layer) to the reducer.
    const bool step = std::string(schedule) == "1f1b+step";
    Deck deck = mlp_deck(step ? "1f1b" : schedule, "replica");
    if (step) deck.pipeline.weight_grad = WeightGradKind::Step;
    for (int d : {1, 2, 4}) {
      const GridRun ref = train_grid(deck, {1, d}, 4);
      for (int p : {2, 4})
        expect_bitwise(ref, train_grid(deck, {p, d}, 4),
                       std::string(schedule) + " replica " + name({p, d}));
    }
  }
}

TEST(DataParallel, ReplicaIsWithinRoundingOfOrdered) {
  const GridRun ordered = train_grid(mlp_deck("1f1b", "ordered"), {1, 1}, 4);
  const GridRun replica = train_grid(mlp_deck("1f1b", "replica"), {1, 2}, 4);
  if (!is_root() || !replica.ran) return;
  ASSERT_EQ(ordered.params.size(), replica.params.size());
  for (size_t i = 0; i < ordered.params.size(); ++i)
    ASSERT_NEAR(ordered.params[i], replica.params[i],
                1e-5 * std::max(1.f, std::fabs(ordered.params[i])))
        << "parameter " << i;
  for (size_t s = 0; s < ordered.losses.size(); ++s)
    EXPECT_NEAR(ordered.losses[s], replica.losses[s], 1e-6 * std::fabs(ordered.losses[s]));
}

// The bitwise checks can see a change of summation order: two replicas'
// sums added ("replica") differ in some bits from one ordered fold.
TEST(DataParallel, SummationOrderIsVisibleBitwise) {
  const GridRun ordered = train_grid(mlp_deck("1f1b", "ordered"), {1, 1}, 4);
  const GridRun replica = train_grid(mlp_deck("1f1b", "replica"), {1, 2}, 4);
  if (!is_root() || !replica.ran) return;
  ASSERT_EQ(ordered.params.size(), replica.params.size());
  EXPECT_GT(test::bitwise_differences(ordered.params, replica.params), 0u);
}

// D = 1 with "replica" is exactly the pipeline without a grid.
TEST(DataParallel, OneReplicaIsThePlainPipeline) {
  const Deck deck = mlp_deck("1f1b", "replica");
  const int p = std::min(2, world_size());
  const GridRun grid = train_grid(deck, {p, 1}, 4);
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < p ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  GridRun plain;
  plain.ran = true;
  if (sub != MPI_COMM_NULL) {
    Deck d = deck;
    d.pipeline.micro_batches = 4;
    Trainer trainer(d, sub);
    for (int64_t s = 0; s < d.training.steps; ++s) plain.losses.push_back(trainer.train_step(s).loss);
    plain.params = trainer.gather_parameters();
    MPI_Comm_free(&sub);
  }
  expect_bitwise(plain, grid, "1 replica vs no grid");
}

// Without "ordered" the replicas' data shares still tile the batch: a
// replica computes on the rows one pipeline gives the same global micro-batches.
TEST(DataParallel, ReplicasSplitTheGlobalBatchWithoutOverlap) {
  Deck deck = mlp_deck("1f1b", "replica");
  deck.data_parallel.replicas = 2;
  deck.pipeline.micro_batches = 2;
  // Global micro-batch g of step t starts at t * 16 + g * 4.
  for (int g = 0; g < 4; ++g) EXPECT_EQ(micro_batch_first_sample(data_set_config_for(deck), 3, g), 3 * 16 + g * 4);
  // Replica d's local micro-batch m is global d * 2 + m: replica 0 holds rows
  // 0-7, replica 1 rows 8-15 of the batch; together every row once.
  std::vector<int> seen(16, 0);
  for (int d = 0; d < 2; ++d)
    for (int m = 0; m < 2; ++m)
      for (int r = 0; r < 4; ++r) ++seen[static_cast<size_t>(micro_batch_first_sample(data_set_config_for(deck), 0, d * 2 + m) + r)];
  for (int v : seen) EXPECT_EQ(v, 1);
}

// The trace: a REDUCTION event per bucket and step (mb = bucket index),
// each starting after its stage's last backward of the step.
TEST(DataParallel, TraceShowsEveryBucketAfterItsLastBackward) {
  Deck deck = mlp_deck("1f1b", "replica");
  deck.output.trace = true;
  const Layout l = world_size() >= 4 ? Layout{2, 2} : Layout{1, world_size()};
  if (l.d < 2) GTEST_SKIP() << "needs 2 ranks";
  const GridRun r = train_grid(deck, l, 4);
  if (!is_root()) return;
  int buckets = 0;
  for (const auto& rank_events : r.events)
    for (const TraceEvent& e : rank_events) {
      if (e.kind != static_cast<int32_t>(EventKind::Reduction) || e.mb < 0) continue;
      ++buckets;
      double last_b = -1e300;
      for (const TraceEvent& b : rank_events)
        if (b.kind == static_cast<int32_t>(EventKind::B) && b.stage == e.stage && b.step == e.step)
          last_b = std::max(last_b, b.start_us);
      EXPECT_GE(e.start_us, last_b) << "bucket " << e.mb << " of stage " << e.stage;
      EXPECT_GE(e.end_us, e.start_us);
    }
  EXPECT_GT(r.buckets_per_step, l.p);  // dp_bucket_mb = 0.002: several per stage
  EXPECT_EQ(buckets, r.buckets_per_step * deck.training.steps);
}

// The deck's grid checks (resolve_deck_layout), each with its message.
std::string layout_error(Deck deck, int ranks) {
  deck.source_file = "t.toml";
  return test::error_of([&] { resolve_deck_layout(deck, ranks); });
}

TEST(DataParallel, DeckChecksNameTheProblem) {
  Deck deck = mlp_deck("1f1b", "replica");
  deck.pipeline.micro_batches = 4;
  deck.data_parallel.replicas = 3;
  EXPECT_NE(layout_error(deck, 4).find("data_parallel.replicas = 3 but the job has 4 MPI ranks"),
            std::string::npos) << layout_error(deck, 4);
  deck.data_parallel.replicas = 2;
  deck.training.batch_size = 12;  // 12 % (2 x 4) != 0
  EXPECT_NE(layout_error(deck, 4).find("training.batch_size = 12: the global batch must be divisible "
                                       "by data_parallel x micro_batches = 2 x 4"),
            std::string::npos) << layout_error(deck, 4);
  deck.training.batch_size = 16;
  deck.pipeline.schedule = ScheduleKind::ZbH1;
  deck.data_parallel.reduction = DpReductionKind::Ordered;
  EXPECT_NE(layout_error(deck, 4).find("data_parallel.reduction = \"ordered\""), std::string::npos);
  deck.pipeline.schedule = ScheduleKind::OneFOneB;
  deck.pipeline.weight_grad = WeightGradKind::Step;
  EXPECT_NE(layout_error(deck, 4).find("with pipeline.weight_grad = \"step\" splits the backward"),
            std::string::npos) << layout_error(deck, 4);
  deck.pipeline.weight_grad = WeightGradKind::MicroBatch;
  deck.data_parallel.reduction = DpReductionKind::Replica;
  deck.rebalance.enabled = true;
  EXPECT_NE(layout_error(deck, 4).find("not supported with 2 data-parallel replicas"), std::string::npos);
  deck.rebalance.enabled = false;
  // One pipeline's checks count its ranks, and say so: not the job's.
  deck.pipeline.stages = 3;
  EXPECT_NE(layout_error(deck, 4).find("pipeline.stages = 3 but each of the 2 pipelines has 2 MPI ranks "
                                       "(the job's 4 ranks / data_parallel.replicas = 2)"),
            std::string::npos) << layout_error(deck, 4);
  deck.pipeline.stages = 0;
  // Default: ranks / stages.
  deck.data_parallel.replicas = 0;
  deck.pipeline.stages = 2;
  const DeckLayout layout = resolve_deck_layout(deck, 4);
  EXPECT_EQ(layout.data_parallel, 2);
  EXPECT_EQ(layout.pipeline_ranks, 2);
  deck.pipeline.stages = 0;
  EXPECT_EQ(resolve_deck_layout(deck, 4).data_parallel, 1);
}

}  // namespace
}  // namespace pt
