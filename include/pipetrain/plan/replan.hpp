// replan.hpp: re-planning during training (pipeline.auto_replan_every,
// docs/planner.md "Re-planning during training"), the decision on numbers.
//
// A check compares the measured step time with the planner's prediction of
// the plan in force. Past the margin it derives each pipeline rank's speed
// factor (measured compute / the profile's simulated compute, as
// rebalancing does per stage), ranks every plan of the request (what
// pipeline.auto left open) at those speeds, and proposes the fastest plan
// that fits when it is predicted faster than the plan in force, at the same
// speeds, by more than the margin. Pure: the app layer measures, decides on
// one rank and broadcasts (app/replan.hpp).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/plan/alternatives.hpp"

namespace pt {

// The plan in force: what a PlanRow names of it (schedule, micro_batches,
// recompute, weight_grad, units_per_stage) and its stages per rank.
struct RunningPlan {
  PlanRow row;
  int virtual_stages = 1;
};

struct ReplanInput {
  PlanRequest request;             // the plans weighed (auto_plan_request), budget included
  bool both_weight_grads = false;  // pipeline.weight_grad open: both ways, ranked together
  RunningPlan current;
  double measured_step_s = 0.0;                  // median over the check's steps
  std::vector<double> measured_rank_compute_s;   // (ranks) medians of F + B + W without waits
  double margin = 0.1;                           // pipeline.auto_replan_margin
};

struct ReplanDecision {
  double predicted_step_s = 0.0;  // the plan in force, at the profile's speeds
  double measured_step_s = 0.0;
  double deviation = 0.0;         // measured / predicted - 1
  bool ranked = false;            // |deviation| > margin: the plans were ranked again
  std::vector<double> speed;      // (ranks) measured compute / simulated compute
  double current_at_speed_s = 0.0;  // the plan in force at those speeds
  PlanRow best;                   // the plan chosen at those speeds (PlanTable::best)
  double gain = 0.0;              // 1 - best / current_at_speed
  int64_t plans_weighed = 0;
  bool change = false;            // switch to `best`
  std::string reason;             // one line: why (not)
};

// `plan` evaluated as given (its partition fixed), each rank's compute
// `speed` times the profile's (empty: 1). InputError when it cannot run.
PlanRow evaluate_running_plan(const ProfileForMicroBatch& profile_for,
                              const std::vector<LinkCost>& links, const PlanRequest& base,
                              const RunningPlan& plan, const std::vector<double>& speed);

ReplanDecision decide_replan(const ProfileForMicroBatch& profile_for,
                             const std::vector<LinkCost>& links, const ReplanInput& in);

// Test hook PIPETRAIN_TEST_REPLAN_SPEED: what a check "measures" when pipeline
// rank r computes factors[r] times as slow as the profile: the plan's
// simulated step and per-rank compute at those speeds.
struct ReplanMeasurement {
  double step_s = 0.0;
  std::vector<double> rank_compute_s;
};
ReplanMeasurement simulated_measurement(const ProfileForMicroBatch& profile_for,
                                        const std::vector<LinkCost>& links,
                                        const PlanRequest& base, const RunningPlan& plan,
                                        const std::vector<double>& factors);

// Two rows name the same plan (schedule, N, recompute, weight_grad, counts).
bool same_plan(const PlanRow& a, const PlanRow& b);

}  // namespace pt
