// replan.cpp: the re-planning decision on numbers (plan/replan.hpp).
#include "pipetrain/plan/replan.hpp"

#include <cmath>
#include <cstdio>

#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

// The request narrowed to `plan` alone (its partition as given).
PlanRequest request_of(const PlanRequest& base, const RunningPlan& plan, const std::vector<double>& speed) {
  PlanRequest r = base;
  r.schedules = {plan.row.schedule};
  r.micro_batch_counts = {plan.row.micro_batches};
  r.recompute = {plan.row.recompute};
  r.partitions = {PartitionObjective::Uniform};
  r.fixed_partition = plan.row.units_per_stage;
  r.weight_grad = plan.row.weight_grad;
  r.virtual_stages = plan.virtual_stages;
  r.rank_time_scale = speed;
  return r;
}

// Every plan of the request at `speed` (pipeline.weight_grad open: the
// schedules without W of their own once more with one pass per step).
PlanTable rank_at_speed(const ProfileForMicroBatch& profile_for, const std::vector<LinkCost>& links,
                        const ReplanInput& in, const std::vector<double>& speed) {
  PlanRequest request = in.request;
  request.rank_time_scale = speed;
  if (!in.both_weight_grads) return rank_plans(profile_for, links, request);
  PlanRequest per_step = request;
  request.weight_grad = WeightGradKind::MicroBatch;
  per_step.weight_grad = WeightGradKind::Step;
  per_step.schedules.clear();
  for (const std::string& name : request.schedules)
    if (name == "gpipe" || name == "1f1b" || name == "interleaved") per_step.schedules.push_back(name);
  std::vector<PlanTable> tables;
  tables.push_back(rank_plans(profile_for, links, request));
  if (!per_step.schedules.empty()) tables.push_back(rank_plans(profile_for, links, per_step));
  return merge_plan_tables(std::move(tables));
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100.0 * x);
  return buf;
}

}  // namespace

bool same_plan(const PlanRow& a, const PlanRow& b) {
  return a.schedule == b.schedule && a.micro_batches == b.micro_batches && a.recompute == b.recompute &&
         a.weight_grad == b.weight_grad && a.units_per_stage == b.units_per_stage;
}

PlanRow evaluate_running_plan(const ProfileForMicroBatch& profile_for,
                              const std::vector<LinkCost>& links, const PlanRequest& base,
                              const RunningPlan& plan, const std::vector<double>& speed) {
  const PlanTable t = rank_plans(profile_for, links, request_of(base, plan, speed));
  if (t.rows.empty() || !std::isfinite(t.rows.front().step_time_s))
    throw InputError("re-planning: the plan in force (" + plan.row.schedule + ", N=" +
                     std::to_string(plan.row.micro_batches) + ") could not be simulated" +
                     (t.rows.empty() ? std::string() : ": " + t.rows.front().note));
  return t.rows.front();
}

ReplanMeasurement simulated_measurement(const ProfileForMicroBatch& profile_for,
                                        const std::vector<LinkCost>& links,
                                        const PlanRequest& base, const RunningPlan& plan,
                                        const std::vector<double>& factors) {
  const PlanRow row = evaluate_running_plan(profile_for, links, base, plan, factors);
  return {row.step_time_s, row.rank_busy_s};
}

ReplanDecision decide_replan(const ProfileForMicroBatch& profile_for,
                             const std::vector<LinkCost>& links, const ReplanInput& in) {
  ReplanDecision d;
  const PlanRow predicted = evaluate_running_plan(profile_for, links, in.request, in.current, {});
  d.predicted_step_s = predicted.step_time_s;
  d.measured_step_s = in.measured_step_s;
  d.deviation = in.measured_step_s / predicted.step_time_s - 1.0;
  if (!(std::fabs(d.deviation) > in.margin)) {
    d.reason = "the measured step is within the margin " + percent(in.margin) + " of the prediction";
    return d;
  }
  d.ranked = true;
  for (size_t r = 0; r < predicted.rank_busy_s.size(); ++r) {
    const double simulated = predicted.rank_busy_s[r];
    const double measured = r < in.measured_rank_compute_s.size() ? in.measured_rank_compute_s[r] : 0.0;
    d.speed.push_back(simulated > 0.0 && measured > 0.0 ? measured / simulated : 1.0);
  }
  d.current_at_speed_s = evaluate_running_plan(profile_for, links, in.request, in.current, d.speed).step_time_s;
  const PlanTable table = rank_at_speed(profile_for, links, in, d.speed);
  d.plans_weighed = static_cast<int64_t>(table.rows.size());
  if (table.best < 0) {
    d.reason = "no plan fits the memory budget at the measured speeds";
    return d;
  }
  d.best = table.rows[static_cast<size_t>(table.best)];
  d.gain = 1.0 - d.best.step_time_s / d.current_at_speed_s;
  if (same_plan(d.best, in.current.row)) {
    d.gain = 0.0;
    d.reason = "the plan in force is still the fastest at the measured speeds";
  } else if (!(d.gain > in.margin)) {
    d.reason = "the best plan would gain " + percent(d.gain) + ", not more than the margin " + percent(in.margin);
  } else {
    d.change = true;
    d.reason = "predicted " + percent(d.gain) + " faster at the measured speeds";
  }
  return d;
}

}  // namespace pt
