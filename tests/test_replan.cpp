// test_replan.cpp: re-planning's decision (plan/replan.hpp) on a synthetic
// profile, with no ranks or timings: the measurement the test hook
// PIPETRAIN_TEST_REPLAN_SPEED substitutes, the speed factors recovered from
// it, no re-planning within the margin, a switch past it to the fastest plan
// at the measured speeds (the expected configuration, found by ranking every
// plan independently), no switch when the best plan gains no more than the
// margin; the deck keys' messages (the hook's parsing: test_fault_injection). The end-to-end
// run (bitwise below the margin, one switch, resume across it) is
// tests/cli/test_replan.sh.
#include <gtest/gtest.h>

#include <string>

#include "error_of.hpp"
#include "pipetrain/app/auto_plan.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/plan/replan.hpp"

namespace pt {
namespace {

using test::error_of;

const char* const kDeck = R"(
[model]
input_dim = 16
hidden_dim = 64
output_dim = 4
depth = 8
[training]
steps = 4
batch_size = 16
[pipeline]
auto = true
auto_replan_every = 2
schedule = "1f1b"
recompute = "none"
weight_grad = "micro_batch"
[data_parallel]
replicas = 1  # the grid a switch keeps (the Replanner fixes it so)
)";

// Eight MLP units of equal time (micro-batch overhead included), so the
// best plan at speed 1 is balanced and a slow rank wants fewer units.
ModelProfile profile_of(int64_t rows) {
  ModelProfile p;
  p.model = "synthetic";
  p.backend = "cpu";
  p.micro_batch_rows = rows;
  const double r = static_cast<double>(rows);
  for (int i = 0; i < 8; ++i) {
    UnitCost u;
    u.name = "linear" + std::to_string(i);
    u.layers = 2;
    u.forward_s = 1e-4 * (0.2 + r / 16.0);
    u.backward_s = 2.0 * u.forward_s;
    u.recompute_s = u.recompute_selective_s = u.recompute_end_s = u.forward_s;
    u.input_bytes = u.output_bytes = 256.0 * r;
    u.stash_none_bytes = u.stash_selective_bytes = 512.0 * r;
    u.param_bytes = u.grad_bytes = 16384.0;
    u.optimizer_bytes = 32768.0;
    p.units.push_back(u);
  }
  p.link = {1e-5, 1e9};
  return p;
}

const ProfileForMicroBatch kProfile = [](int64_t rows) { return profile_of(rows); };
const std::vector<LinkCost> kLinks = {profile_of(1).link};

ReplanInput input_for(const RunningPlan& current, const std::vector<double>& speeds, double margin) {
  ReplanInput in;
  in.request = auto_plan_request(parse_deck_text(kDeck, "replan.toml", {}), 2, 1e12);
  in.current = current;
  in.margin = margin;
  const ReplanMeasurement m = simulated_measurement(kProfile, kLinks, in.request, current, speeds);
  in.measured_step_s = m.step_s;
  in.measured_rank_compute_s = m.rank_compute_s;
  return in;
}

RunningPlan plan(int n, std::vector<int64_t> counts) {
  RunningPlan p;
  p.row.schedule = "1f1b";
  p.row.micro_batches = n;
  p.row.recompute = "none";
  p.row.units_per_stage = std::move(counts);
  p.row.fixed_partition = true;
  return p;
}

TEST(Replan, TheHookMeasuresThePredictionAtItsSpeeds) {
  const RunningPlan current = plan(4, {4, 4});
  const ReplanInput in = input_for(current, {2.0, 2.0}, 0.1);
  const PlanRow at_one = evaluate_running_plan(kProfile, kLinks, in.request, current, {});
  ASSERT_EQ(at_one.rank_busy_s.size(), 2u);
  for (size_t r = 0; r < 2; ++r) EXPECT_DOUBLE_EQ(in.measured_rank_compute_s[r], 2.0 * at_one.rank_busy_s[r]);
  EXPECT_GT(in.measured_step_s, 1.5 * at_one.step_time_s);  // compute doubled; links did not
}

TEST(Replan, NoReplanningWithinTheMargin) {
  for (const std::vector<double>& speeds : {std::vector<double>{1.0, 1.0}, {1.05, 1.05}, {1.0, 1.08}}) {
    const ReplanDecision d = decide_replan(kProfile, kLinks, input_for(plan(4, {4, 4}), speeds, 0.1));
    EXPECT_FALSE(d.ranked) << "speeds " << speeds[0] << ", " << speeds[1] << ": deviation " << d.deviation;
    EXPECT_FALSE(d.change);
    EXPECT_LE(std::abs(d.deviation), 0.1);
  }
  const ReplanDecision exact = decide_replan(kProfile, kLinks, input_for(plan(4, {4, 4}), {1.0, 1.0}, 0.1));
  EXPECT_EQ(exact.deviation, 0.0);  // the same simulation: no timing enters
}

TEST(Replan, SwitchesPastTheMarginToTheFastestPlanAtTheMeasuredSpeeds) {
  const std::vector<double> speeds = {1.0, 4.0};
  const ReplanInput in = input_for(plan(4, {4, 4}), speeds, 0.1);
  const ReplanDecision d = decide_replan(kProfile, kLinks, in);
  ASSERT_TRUE(d.ranked);
  EXPECT_GT(d.deviation, 0.1);
  ASSERT_EQ(d.speed.size(), 2u);
  EXPECT_NEAR(d.speed[0], 1.0, 1e-12);
  EXPECT_NEAR(d.speed[1], 4.0, 1e-12);
  ASSERT_TRUE(d.change) << d.reason;
  EXPECT_GT(d.gain, 0.1);
  // The expected configuration: every plan ranked at those speeds, independently.
  PlanRequest request = in.request;
  request.rank_time_scale = speeds;
  const PlanTable table = rank_plans(kProfile, kLinks, request);
  ASSERT_GE(table.best, 0);
  const PlanRow& expected = table.rows[static_cast<size_t>(table.best)];
  EXPECT_TRUE(same_plan(d.best, expected));
  EXPECT_DOUBLE_EQ(d.best.step_time_s, expected.step_time_s);
  // A rank 4 times as slow gets a fifth of the equal units, [7, 1] at the least.
  ASSERT_EQ(d.best.units_per_stage.size(), 2u);
  EXPECT_EQ(d.best.units_per_stage, (std::vector<int64_t>{7, 1})) << plan_choice_text(d.best);
  EXPECT_DOUBLE_EQ(d.current_at_speed_s, in.measured_step_s);
  std::printf("  switch: %s, predicted gain %.1f%%\n", plan_choice_text(d.best).c_str(), 100.0 * d.gain);

  // Then at the same speeds in the new plan: ranked (the profile's
  // prediction is still off), and the plan in force is the best: no switch.
  RunningPlan switched = plan(d.best.micro_batches, d.best.units_per_stage);
  switched.row.weight_grad = d.best.weight_grad;
  const ReplanDecision again = decide_replan(kProfile, kLinks, input_for(switched, speeds, 0.1));
  EXPECT_TRUE(again.ranked);
  EXPECT_FALSE(again.change) << again.reason;
}

TEST(Replan, NoSwitchWhenTheBestPlanGainsNoMoreThanTheMargin) {
  // Every rank 1.5 times as slow: the deviation is past the margin, but the
  // ranking at uniform speeds is the profile's; from a plan within a few
  // percent of the best, a switch happens only under a smaller margin.
  const ReplanInput probe = input_for(plan(4, {4, 4}), {1.5, 1.5}, 0.1);
  PlanRequest request = probe.request;
  request.rank_time_scale = {1.5, 1.5};
  const PlanTable table = rank_plans(kProfile, kLinks, request);
  const PlanRow& best = table.rows[static_cast<size_t>(table.best)];
  const PlanRow* close = nullptr;  // the fastest other plan
  for (const PlanRow& r : table.rows)
    if (r.fits && !same_plan(r, best)) { close = &r; break; }
  ASSERT_NE(close, nullptr);
  const double gain = 1.0 - best.step_time_s / close->step_time_s;
  ASSERT_GT(gain, 0.0);
  RunningPlan current = plan(close->micro_batches, close->units_per_stage);
  const ReplanDecision kept = decide_replan(kProfile, kLinks, input_for(current, {1.5, 1.5}, gain + 0.01));
  EXPECT_TRUE(kept.ranked);
  EXPECT_FALSE(kept.change) << kept.reason;
  const ReplanDecision taken = decide_replan(kProfile, kLinks, input_for(current, {1.5, 1.5}, gain / 2.0));
  EXPECT_TRUE(taken.change) << taken.reason;
  EXPECT_TRUE(same_plan(taken.best, best));
  EXPECT_NEAR(taken.gain, gain, 1e-9);
}

TEST(Replan, DeckKeysNameTheirMistakes) {
  const auto message = [](const std::vector<std::string>& set) {
    return error_of([&] { parse_deck_text(kDeck, "replan.toml", set); });
  };
  EXPECT_NE(message({"pipeline.auto_replan_every=-1"}).find("pipeline.auto_replan_every"), std::string::npos);
  EXPECT_NE(message({"pipeline.auto_replan_margin=1.5"}).find("pipeline.auto_replan_margin"), std::string::npos);
  EXPECT_NE(message({"pipeline.auto_replan_margin=0"}).find("pipeline.auto_replan_margin"), std::string::npos);
  const std::string without_auto = message({"pipeline.auto=false"});
  EXPECT_NE(without_auto.find("pipeline.auto_replan_every: only applies with pipeline.auto = true"),
            std::string::npos) << without_auto;
  const std::string margin_alone = message({"pipeline.auto_replan_every=0", "pipeline.auto_replan_margin=0.2"});
  EXPECT_NE(margin_alone.find("only applies with pipeline.auto_replan_every > 0"), std::string::npos) << margin_alone;
  const std::string rebalance = message({"rebalance.enabled=true"});
  EXPECT_NE(rebalance.find("cannot be combined with rebalance.enabled = true"), std::string::npos) << rebalance;
  EXPECT_EQ(message({"pipeline.auto_replan_margin=0.25"}), "");
}

}  // namespace
}  // namespace pt
