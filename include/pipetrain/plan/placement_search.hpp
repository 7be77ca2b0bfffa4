// placement_search.hpp: a local search that shortens a zero-bubble schedule
// at given per-stage F, B and W times (pipeline.schedule_times = "measured").
//
// The list scheduler (schedule/generators_multi.cpp) places each action
// greedily; at uneven times (a GPT's last stage: F carries the head and the
// loss, B and W are light; attention has no W) its choices leave gaps a
// different order would fill. The search moves one compute action to another
// position of its rank's list, or swaps two, at most kPlacementMoveReach
// places apart, and keeps the change when the step, simulated at the given
// times with free links, gets shorter (or stays as long with the B actions
// ending earlier in sum: the critical path moves forward). Every change keeps:
//   - F, B and W of each stage in ascending micro-batch order (so every
//     gradient is accumulated in a single process's order: results stay
//     bitwise the same);
//   - each stage's peak in-flight count (micro-batches between F and W),
//     and each rank's (its stages summed: ZB-V's 2P bound), at or below the
//     start schedule's, so no stage or rank holds more activations;
//   - a schedule without deadlock (a move whose simulation stalls is
//     refused).
// It stops when a pass over all moves finds none better, or when the work
// (actions simulated, and scanned for the in-flight check) reaches
// `work_limit`; the result depends only on its inputs, so every rank
// computes the same schedule. Ranks are searched in order within a pass, so
// at a large P x N the budget can end before the last ranks are tried (at
// P = 8-16, N = 64, five starts take about 1.3 s on this host).
#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

constexpr int kPlacementMoveReach = 40;  // places an action may move
constexpr int64_t kPlacementSearchWork = 40'000'000;  // actions per start

struct PlacementSearchResult {
  Schedule schedule;          // the start schedule with its compute reordered
  double start_span_s = 0.0;  // the start schedule's step span at the costs
  double span_s = 0.0;        // the result's
  int64_t moves = 0;          // moves kept
  int64_t evaluations = 0;    // candidate orders simulated
};

// `start`: a schedule with a split backward (W actions); `costs`: one
// (F, B, W) per stage. The result is `timed` when the start was or a move
// was kept.
PlacementSearchResult improve_placement(const Schedule& start, const std::vector<ActionCost>& costs,
                                        int64_t work_limit = kPlacementSearchWork);

// The step span of compute orders (ranks, F/B/W in run order) at `costs`
// with free links: each rank runs its list in order, an action starts when
// the rank is free and its inputs are done. Infinity when the orders stall.
double compute_span(const Schedule& skeleton, const std::vector<std::vector<Action>>& compute,
                    const std::vector<ActionCost>& costs);

}  // namespace pt
