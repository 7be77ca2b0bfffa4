// profile_reduction.cpp: data-parallel gradient reductions timed through the
// run's own reducer (runtime/profile_reduction.hpp).
#include "pipetrain/runtime/profile_reduction.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>

#include "profile_parts.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/plan/alternatives.hpp"
#include "pipetrain/runtime/grad_reducer.hpp"
#include "pipetrain/runtime/grid.hpp"

namespace pt {

namespace {

double grad_bytes(StageModel& stage) {
  double bytes = 0.0;
  for (Param* p : stage.params()) bytes += 4.0 * static_cast<double>(p->grad.numel());
  return bytes;
}

// Timed reductions of one size: at least options.reps, more (up to 5 x)
// while they fit this many seconds, so that a burst of load from another
// process does not move the median; the same count in a replica group.
constexpr double kReductionBudgetSeconds = 0.15;

// One reduction of every gradient of the stage, started as after a step's
// last backward (every layer reported done); its seconds.
double reduce_once(GradientReducer& reducer, StageModel& stage, Backend& be, MPI_Comm replicas, int64_t step) {
  timed_barrier(replicas, "the profiler's barrier before a data-parallel reduction");
  const auto start = std::chrono::steady_clock::now();
  reducer.begin_step(step);
  for (size_t layer = stage.layers.size(); layer-- > 0;) reducer.layer_done(stage.stage, 0, layer);
  reducer.finish();
  be.synchronize();
  return seconds_since(start);
}

// The median seconds of the timed reductions of `stage`'s gradients over
// the grid's replica group `group`, after the untimed warm-ups.
double time_reduction(StageModel& stage, const Deck& deck, Backend& be, const ProcessGrid& grid,
                      ReplicaGroup& group, const ProfileOptions& options) {
  ReductionConfig config = reduction_config_for(deck);
  config.ordered = false;
  config.micro_batches = 1;
  config.fault_points = false;  // a test's stall is for the training steps' reductions
  GradientReducer reducer({&stage}, group, config, be, nullptr, grid.replica_group_text());
  int64_t step = 0;
  double warm = 0.0;
  for (int r = 0; r < std::max(1, options.warmup); ++r) warm = reduce_once(reducer, stage, be, grid.replicas(), step++);
  int wanted = static_cast<int>(std::clamp(kReductionBudgetSeconds / std::max(warm, 1e-9),
                                           static_cast<double>(options.reps), 5.0 * options.reps));
  int reps = wanted;
  timed_allreduce(&wanted, &reps, 1, MPI_INT, MPI_MAX, grid.replicas(),
                  "the profiler's all-reduce of the data-parallel reduction repetitions");
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) times.push_back(reduce_once(reducer, stage, be, grid.replicas(), step++));
  return median(times);
}

// (bytes, seconds) of this rank's two reductions at D: its pipeline stage of
// the uniform partition, then that stage's first unit alone (0, 0 when the
// stage is that unit); both over one replica group, as the run's.
std::vector<double> time_stage_reductions(const Deck& deck, Backend& be, const ProcessGrid& grid,
                                          const ProfileOptions& options) {
  const std::unique_ptr<ReplicaGroup> group = options.make_replica_group
                                                  ? options.make_replica_group(grid.replicas())
                                                  : make_mpi_replica_group(grid.replicas());
  const std::vector<int64_t> counts = partition_units(model_units(deck.model), grid.pipeline_ranks(), {});
  const int stage = grid.pipeline_rank();
  StageModel whole = build_stage(deck.model, counts, stage);
  move_parameters(whole, be.device());
  std::vector<double> figures{grad_bytes(whole), time_reduction(whole, deck, be, grid, *group, options), 0.0, 0.0};
  const int64_t first = model_family(deck.model).pinned_front + whole.first_unit;
  StageModel unit = build_cost_unit_stage(deck.model, first);
  if (grad_bytes(unit) < figures[0] && grad_bytes(unit) > 0.0) {
    move_parameters(unit, be.device());
    figures[2] = grad_bytes(unit);
    figures[3] = time_reduction(unit, deck, be, grid, *group, options);
  }
  return figures;
}

MeasuredReduction time_at(const Deck& deck, Backend& be, MPI_Comm world, int replicas,
                          const ProfileOptions& options) {
  const ProcessGrid grid(world, replicas);
  const std::vector<double> mine = time_stage_reductions(deck, be, grid, options);
  int ranks = 1;
  MPI_CHECK(MPI_Comm_size(world, &ranks));
  std::vector<double> all(mine.size() * static_cast<size_t>(ranks));
  timed_allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), world,
                  "the profiler's all-gather of the data-parallel reduction times");
  // Every pipeline stage once, at the slowest of its replica group's ranks
  // (world rank q holds pipeline rank q % P).
  MeasuredReduction m;
  m.replicas = replicas;
  const int pipelines = grid.pipeline_ranks();
  for (int stage = 0; stage < pipelines; ++stage)
    for (size_t size = 0; size < 2; ++size) {
      double bytes = 0.0, seconds = 0.0;
      for (int q = stage; q < ranks; q += pipelines) {
        bytes = all[static_cast<size_t>(q) * mine.size() + 2 * size];
        seconds = std::max(seconds, all[static_cast<size_t>(q) * mine.size() + 2 * size + 1]);
      }
      if (bytes <= 0.0) continue;
      m.grad_bytes.push_back(bytes);
      m.seconds.push_back(seconds);
    }
  m.link = fit_reduction_link(replicas, m.grad_bytes, m.seconds);
  return m;
}

}  // namespace

std::vector<MeasuredReduction> time_replica_reductions(const Deck& deck, Backend& be, MPI_Comm world,
                                                       const std::vector<int>& replica_counts,
                                                       const ProfileOptions& options) {
  int ranks = 1;
  MPI_CHECK(MPI_Comm_size(world, &ranks));
  std::vector<MeasuredReduction> measured;
  for (int d : replica_counts) {
    PT_CHECK(d > 1 && ranks % d == 0, "a timed reduction at D = " + std::to_string(d) + " on " +
                                          std::to_string(ranks) + " ranks");
    if (ranks / d > model_units(deck.model)) continue;  // not a grid of this model
    measured.push_back(time_at(deck, be, world, d, options));
  }
  return measured;
}

std::string describe_reduction(const MeasuredReduction& reduction) {
  char part[96];
  std::string text = "D = " + std::to_string(reduction.replicas) + ":";
  for (size_t i = 0; i < reduction.grad_bytes.size(); ++i) {
    std::snprintf(part, sizeof part, "%s %.2f MiB in %.2f ms", i ? "," : "",
                  reduction.grad_bytes[i] / 1048576.0, reduction.seconds[i] * 1e3);
    text += part;
  }
  std::snprintf(part, sizeof part, " (fitted link %.1f us, %.2f GB/s)", reduction.link.latency_s * 1e6,
                reduction.link.bandwidth_bytes_per_s / 1e9);
  return text + part;
}

std::vector<int> grid_replica_counts(int ranks, int64_t batch_size) {
  std::vector<int> counts;
  for (int d = 2; d <= ranks; ++d)
    if (ranks % d == 0 && batch_size % d == 0) counts.push_back(d);
  return counts;
}

}  // namespace pt
