// rebalance.cpp: the decision of dynamic rebalancing (plan/rebalance.hpp).
#include "pipetrain/plan/rebalance.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pipetrain/base/error.hpp"
#include "plan_text.hpp"

namespace pt {

namespace {

double max_over_min(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *lo > 0.0 ? *hi / *lo : INFINITY;
}

std::string ratio_text(double r) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", r);
  return buf;
}

// True while every stage's speed factor is within a factor `threshold` of
// the one recorded at the move (the conditions that made it still hold).
bool same_conditions(const std::vector<double>& now, const std::vector<double>& then,
                     double threshold) {
  if (now.size() != then.size()) return false;
  for (size_t s = 0; s < now.size(); ++s) {
    const double change = now[s] > then[s] ? now[s] / then[s] : then[s] / now[s];
    if (!(change < threshold)) return false;
  }
  return true;
}

// Per stage: the profile's compute seconds per step of the current partition.
std::vector<double> predicted_per_step(const ModelProfile& profile, const PartitionSetup& setup,
                                       const std::vector<int64_t>& current, int micro_batches) {
  PartitionSetup plain = setup;
  plain.stage_time_scale.clear();
  const PartitionResult r = evaluate_partition(profile, current, plain);
  std::vector<double> per_step;
  for (double t : r.stage_time_s) per_step.push_back(t * micro_batches);
  return per_step;
}

}  // namespace

double median_of(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t mid = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  return values[mid];
}

RebalanceDecision decide_rebalance(const ModelProfile& profile, const PartitionSetup& setup,
                                   const std::vector<int64_t>& current,
                                   const std::vector<double>& measured_s, int micro_batches,
                                   const RebalanceSettings& settings,
                                   const std::vector<RebalanceMoveRecord>& history) {
  PT_CHECK(measured_s.size() == current.size() && setup.num_stages == static_cast<int>(current.size()),
           "rebalance: one measured time per stage");
  RebalanceDecision d;
  d.from = d.to = current;
  d.measured_s = measured_s;
  d.predicted_s = predicted_per_step(profile, setup, current, micro_batches);
  for (size_t s = 0; s < current.size(); ++s)
    d.speed.push_back(d.predicted_s[s] > 0.0 && measured_s[s] > 0.0 ? measured_s[s] / d.predicted_s[s]
                                                                     : 1.0);
  d.measured_ratio = max_over_min(measured_s);
  d.predicted_ratio = d.measured_ratio;
  if (!(d.measured_ratio >= settings.threshold)) {
    d.reason = "measured ratio " + ratio_text(d.measured_ratio) + " is under the threshold " +
               ratio_text(settings.threshold);
    return d;
  }
  PartitionSetup scaled = setup;
  scaled.stage_time_scale = d.speed;
  const PartitionResult best = solve_partition(profile, settings.objective, scaled);
  const double slowest_now = *std::max_element(measured_s.begin(), measured_s.end());
  d.predicted_ratio = max_over_min(best.stage_time_s);
  d.predicted_gain = 1.0 - best.max_time_s * micro_batches / slowest_now;
  const std::string target = plan_text::list(best.units_per_stage);
  if (best.units_per_stage == current) {
    d.reason = "the current partition " + target + " is already the best for the measured speeds";
    return d;
  }
  if (!(d.predicted_gain >= settings.margin)) {
    d.reason = "moving to " + target + " would gain " + ratio_text(100.0 * d.predicted_gain) +
               "% of the slowest stage, under the margin " + ratio_text(100.0 * settings.margin) + "%";
    return d;
  }
  for (const RebalanceMoveRecord& m : history)
    if (m.left == best.units_per_stage && same_conditions(d.speed, m.speed, settings.threshold)) {
      d.reason = "not returning to " + target +
                 ", which an earlier move left while the stage speeds were the same as now";
      return d;
    }
  d.move = true;
  d.to = best.units_per_stage;
  d.reason = "moving to " + target + ": predicted slowest stage " +
             ratio_text(100.0 * d.predicted_gain) + "% faster";
  return d;
}

}  // namespace pt
