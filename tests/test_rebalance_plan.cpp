// test_rebalance_plan.cpp: the decision of dynamic rebalancing on hand-made
// numbers (plan/rebalance.hpp): the solver with per-stage time scales (exact
// against brute force), the threshold, the margin, the current partition
// already best, the hysteresis rule and the median.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

#include "pipetrain/base/error.hpp"
#include "pipetrain/plan/rebalance.hpp"

namespace {

using pt::ModelProfile;
using pt::PartitionObjective;
using pt::PartitionSetup;
using pt::RebalanceDecision;
using pt::RebalanceMoveRecord;
using pt::RebalanceSettings;
using testing::HasSubstr;

// `n` units of 1 s forward and 2 s backward per micro-batch, free links.
ModelProfile equal_units(int n) {
  ModelProfile p;
  p.model = "equal";
  for (int i = 0; i < n; ++i) {
    pt::UnitCost u;
    u.name = "u" + std::to_string(i);
    u.forward_s = 1.0;
    u.backward_s = 2.0;
    p.units.push_back(u);
  }
  return p;
}

PartitionSetup setup_for(int stages) {
  PartitionSetup s;
  s.num_stages = stages;
  s.in_flight.assign(static_cast<size_t>(stages), 1);
  return s;
}

RebalanceDecision decide(const std::vector<int64_t>& current, const std::vector<double>& measured,
                         const std::vector<RebalanceMoveRecord>& history = {},
                         double margin = 0.05) {
  RebalanceSettings settings;
  settings.margin = margin;
  return pt::decide_rebalance(equal_units(8), setup_for(static_cast<int>(current.size())), current,
                              measured, 1, settings, history);
}

TEST(RebalanceSolver, StageTimeScaleMovesUnitsOffTheSlowStage) {
  PartitionSetup setup = setup_for(2);
  setup.stage_time_scale = {1.0, 3.0};
  const auto r = pt::solve_partition(equal_units(8), PartitionObjective::Time, setup);
  EXPECT_EQ(r.units_per_stage, (std::vector<int64_t>{6, 2}));
  EXPECT_DOUBLE_EQ(r.stage_time_s[1], 2 * 3.0 * 3.0);  // scaled
  EXPECT_DOUBLE_EQ(r.max_time_s, 18.0);
}

TEST(RebalanceSolver, ScaledSolverIsExact) {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> scale(0.5, 4.0), time(0.1, 2.0);
  for (int trial = 0; trial < 200; ++trial) {
    ModelProfile p = equal_units(9);
    for (auto& u : p.units) u.forward_s = time(gen);
    const int stages = 2 + trial % 4;
    PartitionSetup setup = setup_for(stages);
    for (int s = 0; s < stages; ++s) setup.stage_time_scale.push_back(scale(gen));
    const auto fast = pt::solve_partition(p, PartitionObjective::Time, setup);
    const auto brute = pt::brute_force_partition(p, PartitionObjective::Time, setup);
    EXPECT_DOUBLE_EQ(fast.max_time_s, brute.max_time_s) << "trial " << trial;
  }
}

TEST(RebalanceSolver, BadScalesAreInputErrors) {
  PartitionSetup setup = setup_for(2);
  setup.stage_time_scale = {1.0};
  EXPECT_THROW(pt::solve_partition(equal_units(8), PartitionObjective::Time, setup), pt::InputError);
  setup.stage_time_scale = {1.0, 0.0};
  EXPECT_THROW(pt::solve_partition(equal_units(8), PartitionObjective::Time, setup), pt::InputError);
}

TEST(RebalanceDecide, MovesWhenOneStageIsThreeTimesSlower) {
  // [4, 4] predicts 12 s per stage; stage 1 measures 36 s: speed 3.
  const RebalanceDecision d = decide({4, 4}, {12.0, 36.0});
  EXPECT_TRUE(d.move) << d.reason;
  EXPECT_EQ(d.to, (std::vector<int64_t>{6, 2}));
  EXPECT_DOUBLE_EQ(d.measured_ratio, 3.0);
  EXPECT_DOUBLE_EQ(d.speed[0], 1.0);
  EXPECT_DOUBLE_EQ(d.speed[1], 3.0);
  EXPECT_DOUBLE_EQ(d.predicted_ratio, 1.0);   // 18 s and 18 s
  EXPECT_DOUBLE_EQ(d.predicted_gain, 0.5);    // 1 - 18 / 36
}

TEST(RebalanceDecide, NoMoveUnderTheThreshold) {
  const RebalanceDecision d = decide({4, 4}, {12.0, 17.0});  // 1.42 < 1.5
  EXPECT_FALSE(d.move);
  EXPECT_EQ(d.to, d.from);
  EXPECT_THAT(d.reason, HasSubstr("under the threshold 1.50"));
}

TEST(RebalanceDecide, NoMoveWhenTheGainIsUnderTheMargin) {
  // Speed 1.58 on stage 1: [5, 3] gains 21% of the slowest stage.
  EXPECT_TRUE(decide({4, 4}, {12.0, 19.0}).move);
  const RebalanceDecision d = decide({4, 4}, {12.0, 19.0}, {}, 0.25);
  EXPECT_FALSE(d.move);
  EXPECT_NEAR(d.predicted_gain, 1.0 - 15.0 / 19.0, 1e-12);
  EXPECT_THAT(d.reason, HasSubstr("under the margin 25.00%"));
}

TEST(RebalanceDecide, NoMoveWhenTheCurrentPartitionIsBest) {
  // [7, 1] with stage 1 at speed 4.67: ratio 1.5, and every other partition is worse.
  const RebalanceDecision d = decide({7, 1}, {21.0, 14.0});
  EXPECT_FALSE(d.move);
  EXPECT_THAT(d.reason, HasSubstr("already the best"));
}

TEST(RebalanceDecide, HysteresisKeepsAMoveFromBeingUndone) {
  // A move left [5, 3] for [6, 2] at speeds (1, 2.5). At [6, 2] the speeds
  // now measure (1.4, 2.1) -- profile error, noise -- and [5, 3] looks best.
  const std::vector<RebalanceMoveRecord> history{{{5, 3}, {1.0, 2.5}}};
  const std::vector<double> measured{18.0 * 1.4, 6.0 * 2.1};
  EXPECT_TRUE(decide({6, 2}, measured).move);  // without the history it would go back
  const RebalanceDecision d = decide({6, 2}, measured, history);
  EXPECT_FALSE(d.move);
  EXPECT_THAT(d.reason, HasSubstr("not returning to [5, 3]"));
  // Once a rank's speed changed by the threshold factor (2.1 vs 3.5 at the
  // move), going back is allowed.
  const RebalanceDecision later = decide({6, 2}, measured, {{{5, 3}, {1.0, 3.5}}});
  EXPECT_TRUE(later.move) << later.reason;
  EXPECT_EQ(later.to, (std::vector<int64_t>{5, 3}));
}

TEST(RebalanceDecide, SequenceUnderAPersistentSlowdownSettles) {
  // Stage 1's rank is 3x slow and the profile underestimates unit 7 by 2x:
  // measure each partition as "truth", decide, move; no partition twice.
  auto truth = [](const std::vector<int64_t>& c) {
    std::vector<double> m(2, 0.0);
    for (int u = 0; u < 8; ++u) m[u < c[0] ? 0 : 1] += (u == 7 ? 6.0 : 3.0) * (u < c[0] ? 1.0 : 3.0);
    return m;
  };
  std::vector<int64_t> current{4, 4};
  std::vector<RebalanceMoveRecord> history;
  std::vector<std::vector<int64_t>> seen{current};
  for (int check = 0; check < 10; ++check) {
    const RebalanceDecision d = decide(current, truth(current), history);
    if (!d.move) continue;
    history.push_back({d.from, d.speed});
    current = d.to;
    for (const auto& s : seen) EXPECT_NE(s, current) << "partition revisited at check " << check;
    seen.push_back(current);
  }
  EXPECT_GE(history.size(), 1u);
  EXPECT_LE(history.size(), 3u);
  EXPECT_EQ(current.size(), 2u);
}

TEST(RebalanceMedian, LowerMiddle) {
  EXPECT_DOUBLE_EQ(pt::median_of({5.0, 1.0, 3.0}), 3.0);
  EXPECT_DOUBLE_EQ(pt::median_of({4.0, 1.0, 3.0, 2.0}), 2.0);
  EXPECT_DOUBLE_EQ(pt::median_of({}), 0.0);
  EXPECT_DOUBLE_EQ(pt::median_of({1.0, 1.0, 100.0}), 1.0);  // one noisy step does not move it
}

}  // namespace
