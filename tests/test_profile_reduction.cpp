// test_profile_reduction.cpp: data-parallel reductions timed as a run
// reduces them (runtime/profile_reduction.hpp), and the run's prediction
// that adds them.
//   - every D of the ranks' grids is timed, each replica group on its stage of
//     the uniform partition and on that stage's first unit, the byte counts
//     those of the stages' gradients; every rank holds the same figures and
//     the fitted link reproduces them;
//   - predict_step adds a D = 2 deck's measured reduction after the span:
//     the step grows by exactly replica_reduction_s of the stage's gradient.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "pipetrain/model/model.hpp"
#include "pipetrain/plan/alternatives.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/profile_reduction.hpp"
#include "pipetrain/runtime/run_builder.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "mpi_test_util.hpp"
#include "test_decks.hpp"

namespace pt {
namespace {

using test::is_root;
using test::world_size;

double stage_grad_bytes_by_hand(StageModel stage) {
  double bytes = 0.0;
  for (Param* p : stage.params()) bytes += 4.0 * static_cast<double>(p->grad.numel());
  return bytes;
}

// (bytes) of each timed reduction at D on `ranks` ranks, in the order timed:
// stage by stage, the whole stage then its first unit.
std::vector<double> expected_bytes(const Deck& d, int ranks, int replicas) {
  const int stages = ranks / replicas;
  const std::vector<int64_t> counts = partition_units(model_units(d.model), stages, {});
  std::vector<double> bytes;
  int64_t first = 0;
  for (int s = 0; s < stages; ++s) {
    const double whole = stage_grad_bytes_by_hand(build_stage(d.model, counts, s));
    const double unit = stage_grad_bytes_by_hand(build_cost_unit_stage(d.model, first));
    bytes.push_back(whole);
    if (unit < whole) bytes.push_back(unit);
    first += counts[static_cast<size_t>(s)];
  }
  return bytes;
}

TEST(ProfileReduction, EveryGridOfTheRanksTimedOnItsStages) {
  Deck d = pt_test::tiny_mlp(16);
  d.data_parallel.bucket_mb = 0.001;  // several buckets a stage
  const int ranks = world_size();
  const std::vector<int> counts = grid_replica_counts(ranks, d.training.batch_size);
  ASSERT_EQ(counts, ranks == 4 ? std::vector<int>({2, 4}) : std::vector<int>({2}));
  const std::vector<MeasuredReduction> timed =
      time_replica_reductions(d, cpu_backend(), MPI_COMM_WORLD, counts, ProfileOptions::brief());
  ASSERT_EQ(timed.size(), counts.size());
  for (size_t i = 0; i < timed.size(); ++i) {
    const MeasuredReduction& m = timed[i];
    EXPECT_EQ(m.replicas, counts[i]);
    EXPECT_EQ(m.grad_bytes, expected_bytes(d, ranks, m.replicas)) << "D = " << m.replicas;
    ASSERT_EQ(m.seconds.size(), m.grad_bytes.size());
    for (double s : m.seconds) EXPECT_GT(s, 0.0);
    EXPECT_GT(m.link.bandwidth_bytes_per_s, 0.0);
    EXPECT_GE(m.link.latency_s, 0.0);
    // the link is fitted to these very figures
    const LinkCost refit = fit_reduction_link(m.replicas, m.grad_bytes, m.seconds);
    EXPECT_EQ(refit.latency_s, m.link.latency_s);
    EXPECT_EQ(refit.bandwidth_bytes_per_s, m.link.bandwidth_bytes_per_s);
    // the same figures on every rank
    std::vector<double> mine = m.seconds, rank0 = m.seconds;
    MPI_Bcast(rank0.data(), static_cast<int>(rank0.size()), MPI_DOUBLE, 0, MPI_COMM_WORLD);
    EXPECT_EQ(mine, rank0);
    if (is_root())
      std::printf("  D = %d: %zu reductions, link %.2f us, %.3f GB/s\n", m.replicas, m.seconds.size(),
                  m.link.latency_s * 1e6, m.link.bandwidth_bytes_per_s / 1e9);
  }
  EXPECT_THROW(time_replica_reductions(d, cpu_backend(), MPI_COMM_WORLD, {ranks + 1}, ProfileOptions::brief()),
               Error);
}

TEST(ProfileReduction, RunPredictionAddsTheMeasuredReduction) {
  Deck d = pt_test::tiny_mlp(16);
  d.data_parallel.replicas = 2;
  d.pipeline.micro_batches = 2;
  ProfileOptions o = ProfileOptions::brief();
  ModelProfile p = profile_model(d, cpu_backend(), MPI_COMM_SELF, o);
  p.link = LinkCost{};  // the fallback link costs nothing
  const Schedule schedule = schedule_for_deck(d, 1);
  const std::vector<int64_t> counts{model_units(d.model)};
  const std::vector<PlanRecompute> none{PlanRecompute::parse("none")};
  const SimulationResult base = predict_step(d, p, schedule, counts, none);
  const LinkCost link{1e-3, 1e8};
  p.reductions.push_back({2, {1e4}, {1e-3}, link});
  const SimulationResult with = predict_step(d, p, schedule, counts, none);
  const double grads = stage_grad_bytes_by_hand(build_stage(d.model, counts, 0));
  EXPECT_NEAR(with.step_time_s, base.step_time_s + replica_reduction_s(grads, 2, 1, link), 1e-12);
  EXPECT_EQ(with.peak_bytes, base.peak_bytes);  // the buffers, added to both, do not depend on the link
  // At D = 1 nothing is added, whatever the links: a slow pipeline link
  // and the reductions change nothing.
  d.data_parallel.replicas = 1;
  ModelProfile slow = p;
  slow.link = LinkCost{1.0, 1.0};
  p.reductions.clear();
  const SimulationResult single = predict_step(d, p, schedule_for_deck(d, 1), counts, none);
  const SimulationResult single_slow = predict_step(d, slow, schedule_for_deck(d, 1), counts, none);
  EXPECT_EQ(single_slow.step_time_s, single.step_time_s);
  EXPECT_EQ(single_slow.peak_bytes, single.peak_bytes);
}

}  // namespace
}  // namespace pt
