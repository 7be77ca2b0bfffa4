// placement_search.hpp: a local search that shortens a zero-bubble schedule
// at given per-stage F, B and W times (pipeline.schedule_times = "measured").
//
// The list scheduler (schedule/generators_multi.cpp) places each action
// greedily; at uneven times (a GPT's last stage: F carries the head and the
// loss, B and W are light; attention has no W) its choices leave gaps a
// different order would fill. The search moves one compute action at a time
// to another position of its rank's list (at most kPlacementMoveReach places
// away) and keeps the move when the step, simulated at the given times with
// free links, gets shorter. Every move keeps:
//   - F, B and W of each stage in ascending micro-batch order (so every
//     gradient is accumulated in a single process's order: results stay
//     bitwise the same);
//   - each stage's peak in-flight count (micro-batches between F and W) at
//     or below the start schedule's, so no stage holds more activations;
//   - a schedule without deadlock (a move whose simulation stalls is
//     refused).
// It stops when a pass over all moves finds none better, or when the work
// (actions simulated) reaches `work_limit`; the result depends only on its
// inputs, so every rank computes the same schedule.
#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

constexpr int kPlacementMoveReach = 40;
constexpr int64_t kPlacementSearchWork = 40'000'000;  // actions simulated, ~0.2 s

struct PlacementSearchResult {
  Schedule schedule;          // the start schedule with its compute reordered
  double start_span_s = 0.0;  // the start schedule's step span at the costs
  double span_s = 0.0;        // the result's
  int64_t moves = 0;          // moves kept
  int64_t evaluations = 0;    // candidate orders simulated
};

// `start`: a schedule with a split backward (W actions); `costs`: one
// (F, B, W) per stage.
PlacementSearchResult improve_placement(const Schedule& start, const std::vector<ActionCost>& costs,
                                        int64_t work_limit = kPlacementSearchWork);

// The step span of compute orders (ranks, F/B/W in run order) at `costs`
// with free links: each rank runs its list in order, an action starts when
// the rank is free and its inputs are done. Infinity when the orders stall.
double compute_span(const Schedule& skeleton, const std::vector<std::vector<Action>>& compute,
                    const std::vector<ActionCost>& costs);

}  // namespace pt
