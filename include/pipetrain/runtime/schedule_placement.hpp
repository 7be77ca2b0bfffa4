// schedule_placement.hpp: pipeline.schedule_times = "measured". A zero-bubble
// schedule (zb-h1, zb-v) starts in its unit-time placement; the executor
// times every F, B and W of the first steps, and after them every rank
// agrees on each stage's median F, B and W time and the schedule is placed
// again at those times (plan/simulate: generate_at_times keeps the unit-time
// placement unless another simulates a bubble at least kMinPlacementGain
// smaller at them). Every
// placement runs each stage's F, B and W in micro-batch order, so the
// switch changes when actions run, never a number (docs/schedules.md).
#pragma once

#include <mpi.h>

#include <array>
#include <vector>

#include "pipetrain/runtime/executor.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

class MeasuredPlacement {
 public:
  static constexpr int kWarmupSteps = 1;    // not timed: first allocations, cold caches
  static constexpr int kMeasuredSteps = 2;  // timed, then the schedule is placed

  explicit MeasuredPlacement(int num_stages);
  // After each training step, this rank's action times of the step; true
  // once kMeasuredSteps steps after the warm-up were seen.
  bool observe(const std::vector<ActionTime>& times);
  // Collective over the pipeline and then its replicas (replica 0's times
  // win, so that every replica runs one schedule): (stages) median F, B, W
  // seconds, the same on every rank.
  StageActionTimes agreed_times(MPI_Comm pipeline, MPI_Comm replicas) const;

 private:
  int steps_seen_ = 0;
  std::vector<std::array<std::vector<double>, 3>> samples_;  // (stages, F/B/W) seconds
};

// `current` placed again at `times` (generate_at_times), validated under
// `semantics`, with its forward-only twin for evaluation, and the bubbles
// simulated at those times: of `current`, of the new placement, and of the
// best timed candidate, kept or not.
struct PlacedSchedules {
  Schedule train, eval;
  ScheduleReport report;
  double unit_bubble = 0.0, bubble = 0.0, timed_bubble = 0.0;
};
PlacedSchedules place_at_times(const Schedule& current, const StageActionTimes& times,
                               const CommSemantics& semantics);

}  // namespace pt
