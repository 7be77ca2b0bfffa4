// test_semantics.cpp: the one model of schedule semantics
// (schedule/semantics.hpp) and of recompute policies (schedule/recompute.hpp):
// in-flight counts against the closed forms, the bubble against hand cases
// (the same cases as tests/tools/test_trace_tools.py, so trace_report.py's
// bubble_of stays the C++ one), the one dependency rule, the single policy parser, the unit-to-layer
// map, and the planner's every:K counting layers through that map.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/plan/stage_cost.hpp"
#include "pipetrain/schedule/recompute.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {
namespace {

TEST(InFlight, MatchesTheClosedFormsAndTheValidator) {
  for (int p : {1, 2, 4})
    for (int n : {1, 2, 3, 4, 8}) {
      const Schedule gpipe = generate_schedule("gpipe", p, n);
      const Schedule one = generate_schedule("1f1b", p, n);
      for (int s = 0; s < p; ++s) {
        EXPECT_EQ(count_in_flight(gpipe).peak_in_flight()[s], n);
        EXPECT_EQ(count_in_flight(one).peak_in_flight()[s], std::min(p - s, n));
      }
      const Schedule zb = generate_schedule("zb-h1", p, n);
      const ScheduleReport report = validate_schedule(zb);
      EXPECT_EQ(count_in_flight(zb).peak_in_flight(), report.peak_in_flight);
      EXPECT_EQ(count_in_flight(zb).peak_pending_w(), report.peak_pending_w);
      EXPECT_EQ(schedule_in_flight(zb), report.peak_in_flight);
      for (int s = 0; s < p; ++s) EXPECT_EQ(report.peak_in_flight[s], std::min(p, n)) << p << " " << n;
    }
}

TEST(InFlight, TheSplitBackwardReleasesAtW) {
  const Schedule zb = generate_schedule("zb-h1", 2, 4);
  EXPECT_EQ(stash_release(zb), ActionKind::W);
  EXPECT_EQ(stash_release(generate_schedule("1f1b", 2, 4)), ActionKind::B);
  InFlightCounter c(zb);
  const Action f = make_action(0, ActionKind::F, 0), b = make_action(0, ActionKind::B, 0);
  EXPECT_EQ(c.enter(f), 1);
  c.leave(f);
  EXPECT_EQ(c.enter(b), 1);  // B keeps the weight products' inputs until W
  c.leave(b);
  EXPECT_EQ(c.peak_pending_w()[0], 1);
  c.run(make_action(0, ActionKind::W, 0));
  EXPECT_EQ(c.enter(make_action(0, ActionKind::F, 1)), 1);
}

// The cases of tests/tools/test_trace_tools.py (BUBBLE_CASES).
std::vector<std::string> names(const Prerequisites& needs) {
  std::vector<std::string> out;
  for (const Action& a : needs) out.push_back(to_string(a));
  return out;
}

TEST(Prerequisites, TheOneDependencyRule) {
  using V = std::vector<std::string>;
  EXPECT_EQ(names(Prerequisites(parse_action("0F3"), 4)), V{});
  EXPECT_EQ(names(Prerequisites(parse_action("2F3"), 4)), V{"1F3"});
  EXPECT_EQ(names(Prerequisites(parse_action("1B3"), 4)), (V{"1F3", "2B3"}));
  EXPECT_EQ(names(Prerequisites(parse_action("3B3"), 4)), V{"3F3"});  // the last stage: the loss
  EXPECT_EQ(names(Prerequisites(parse_action("2W0"), 4)), V{"2B0"});
  EXPECT_EQ(names(Prerequisites(parse_action("1SEND_F3"), 4)), V{});
  const Action b = parse_action("1B3");
  EXPECT_EQ(to_string(*Prerequisites(b, 4).from_other_stage(b)), "2B3");
  EXPECT_EQ(Prerequisites(parse_action("2W0"), 4).from_other_stage(parse_action("2W0")), nullptr);
}

TEST(Prerequisites, ArriveBySendsBetweenRanksAndDirectlyOnOne) {
  // ZB-V on 2 ranks: stages 0 and 3 on rank 0, 1 and 2 on rank 1.
  const Schedule v = generate_schedule("zb-v", 2, 4);
  ASSERT_EQ(stage_rank(v, 0), stage_rank(v, 3));
  EXPECT_EQ(to_string(delivery_of(v, parse_action("0F1"), 1)), "0SEND_F1");
  EXPECT_EQ(to_string(delivery_of(v, parse_action("2F1"), 3)), "2SEND_F1");
  EXPECT_EQ(to_string(delivery_of(v, parse_action("2B1"), 1)), "2B1");  // same rank
  EXPECT_EQ(to_string(delivery_of(v, parse_action("1F1"), 1)), "1F1");  // own stage
}

TEST(BubbleOf, HandCasesSharedWithTheTraceReport) {
  EXPECT_DOUBLE_EQ(bubble_of({6.0, 6.0}, {9.0, 7.2}), 1.0 / 3.0);
  EXPECT_DOUBLE_EQ(bubble_of({9.0, 6.0}, {12.0, 10.0}), 3.0 / 8.0);
  EXPECT_DOUBLE_EQ(bubble_of({2.0, 1.0, 0.0}, {4.0, 2.0, 0.0}), (0.5 + 0.75 + 1.0) / 3.0);
  EXPECT_EQ(bubble_of({0.0, 0.0}, {0.0, 0.0}), 0.0);
}

TEST(BubbleOf, IsTheSimulatorsBubble) {
  for (const char* name : {"gpipe", "1f1b"}) {
    const Schedule s = generate_schedule(name, 4, 8);
    SimulationInput in;
    in.stages.assign(4, StageCost{});
    for (StageCost& c : in.stages) c.forward_s = 1.0, c.backward_s = 2.0;
    in.links = {LinkCost{}};
    const SimulationResult r = simulate_schedule(s, in);
    EXPECT_EQ(r.bubble, bubble_of(r.busy_s, r.span_s)) << name;
    EXPECT_DOUBLE_EQ(r.bubble, 3.0 / 11.0) << name;  // (P-1)/(N+P-1)
  }
}

TEST(RecomputePolicy, OneParserForTheDeckAndThePlanner) {
  for (const char* text : {"none", "selective", "every:1", "every:12", "full"}) {
    EXPECT_EQ(RecomputePolicy::parse(text).name(), text);
    EXPECT_EQ(parse_recompute_policy(text, "k").name(), text);
    EXPECT_TRUE(is_recompute_setting(text));
  }
  EXPECT_TRUE(is_recompute_setting("auto"));
  for (const char* bad : {"auto", "every:0", "every:", "every:x", "All"}) {
    EXPECT_THROW(RecomputePolicy::parse(bad), InputError) << bad;
    if (std::string(bad) != "auto") {
      EXPECT_FALSE(is_recompute_setting(bad)) << bad;
    }
  }
  const RecomputePolicy every3 = RecomputePolicy::parse("every:3");
  EXPECT_TRUE(every3.keeps_input(6));
  EXPECT_FALSE(every3.keeps_input(7));
  EXPECT_EQ(every3.segment_start(8), 6u);
}

TEST(UnitLayerMap, FindsTheUnitOfALayer) {
  const UnitLayerMap map({2, 2, 2, 1});  // an MLP of 4 Linear layers
  EXPECT_EQ(map.layers(0, 4), 7u);
  EXPECT_EQ(map.layers(1, 3), 4u);
  bool first = false;
  EXPECT_EQ(map.unit_of(0, 0, first), 0u);
  EXPECT_TRUE(first);
  EXPECT_EQ(map.unit_of(0, 3, first), 1u);
  EXPECT_FALSE(first);
  EXPECT_EQ(map.unit_of(1, 2, first), 2u);  // counted from unit 1's first layer
  EXPECT_TRUE(first);
  EXPECT_EQ(map.unit_of(0, 6, first), 3u);
  EXPECT_TRUE(first);
}

// Units of two layers (Linear, activation) but the last: every:K keeps the
// inputs of the stage's layers 0, K, 2K, ...; a unit's second layer takes a
// tensor of its output's size.
TEST(StageCostLayers, EveryKCountsLayersThroughTheMap) {
  ModelProfile p;
  p.model = "four units of two layers, the last of one";
  for (int u = 0; u < 4; ++u) {
    UnitCost c;
    c.name = "linear" + std::to_string(u);
    c.layers = u < 3 ? 2 : 1;
    c.input_bytes = 100.0 * (u + 1);
    c.output_bytes = 10.0 * (u + 1);
    c.stash_none_bytes = c.input_bytes + (u < 3 ? c.output_bytes : 0.0);
    c.stash_selective_bytes = c.stash_none_bytes;
    p.units.push_back(c);
  }
  const auto stash = [&](const char* policy) {
    return stage_costs(p, {4}, {PlanRecompute::parse(policy)}).front().stash_bytes;
  };
  EXPECT_EQ(stash("every:1"), stash("none"));  // every layer's input
  EXPECT_EQ(stash("every:2"), 100.0 + 200.0 + 300.0 + 400.0);  // each unit's input
  EXPECT_EQ(stash("every:3"), 100.0 + 20.0 + 400.0);  // layers 0, 3 (unit 1's activation), 6
  EXPECT_EQ(stash("every:4"), 100.0 + 300.0);  // layers 0 and 4
  EXPECT_EQ(stash("every:7"), stash("full"));
}

}  // namespace
}  // namespace pt
