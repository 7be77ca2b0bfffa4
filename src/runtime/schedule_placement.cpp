// schedule_placement.cpp: the measured placement of zero-bubble schedules
// (runtime/schedule_placement.hpp).
#include "pipetrain/runtime/schedule_placement.hpp"

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "profile_parts.hpp"

namespace pt {

MeasuredPlacement::MeasuredPlacement(int num_stages)
    : samples_(static_cast<size_t>(num_stages)) {}

bool MeasuredPlacement::observe(const std::vector<ActionTime>& times) {
  ++steps_seen_;
  if (steps_seen_ <= kWarmupSteps) return false;
  for (const ActionTime& t : times) {
    PT_CHECK(t.stage >= 0 && static_cast<size_t>(t.stage) < samples_.size() && t.kind >= 0 &&
                 t.kind < 3,
             "action time of an unknown stage or kind");
    samples_[static_cast<size_t>(t.stage)][static_cast<size_t>(t.kind)].push_back(t.seconds);
  }
  return steps_seen_ >= kWarmupSteps + kMeasuredSteps;
}

StageActionTimes MeasuredPlacement::agreed_times(MPI_Comm pipeline, MPI_Comm replicas) const {
  // Each stage is timed on the one rank that runs it; the others add zeros,
  // so the sum is exactly that rank's medians.
  std::vector<double> mine(3 * samples_.size(), 0.0), all(mine.size(), 0.0);
  for (size_t s = 0; s < samples_.size(); ++s)
    for (size_t k = 0; k < 3; ++k) mine[3 * s + k] = median(samples_[s][k]);
  timed_allreduce(mine.data(), all.data(), static_cast<int>(all.size()), MPI_DOUBLE, MPI_SUM,
                  pipeline, "the measured action times all-reduce (pipeline.schedule_times)");
  timed_bcast(all.data(), static_cast<int>(all.size()), MPI_DOUBLE, 0, replicas,
              "the measured action times broadcast from replica 0 (pipeline.schedule_times)");
  StageActionTimes times(samples_.size());
  for (size_t s = 0; s < samples_.size(); ++s)
    for (size_t k = 0; k < 3; ++k) {
      constexpr double kShortest = 1e-9;  // the generator needs positive times
      times[s][k] = std::max(all[3 * s + k], kShortest);
    }
  return times;
}

PlacedSchedules place_at_times(const Schedule& current, const StageActionTimes& times,
                               const CommSemantics& semantics) {
  TimedPlacement placed =
      generate_at_times(current.name, current.num_ranks, current.num_micro_batches, times);
  PlacedSchedules out;
  out.report = validate_schedule(placed.schedule, semantics);
  out.unit_bubble = placed.unit_bubble;
  out.bubble = placed.bubble;
  out.timed_bubble = placed.timed_bubble;
  out.train = std::move(placed.schedule);
  out.eval = forward_only_schedule(out.train);
  validate_schedule(out.eval, semantics);
  return out;
}

}  // namespace pt
