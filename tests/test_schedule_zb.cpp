// test_schedule_zb.cpp: the W action, stage placement, the interleaved,
// ZB-H1 and ZB-V generators, the validator's rules for W (with the marked
// grid) and the theoretical bubble of every schedule (unit_time_bubble).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "error_of.hpp"

namespace {

using pt::Action;
using pt::ActionKind;
using pt::InputError;
using pt::test::error_of;
using pt::Schedule;
using Lines = std::vector<std::string>;

Schedule from_lines(const Lines& ranks, int num_stages, int num_micro_batches) {
  std::string text;
  for (const std::string& line : ranks) text += line + "\n";
  return pt::parse_schedule(text, "test", num_stages, num_micro_batches);
}

struct Generated {
  std::string label;
  Schedule schedule;
};

// Every new generator at P = 1..4 and N = 1..16 (interleaved: multiples of P).
std::vector<Generated> all_generated() {
  std::vector<Generated> out;
  for (int p = 1; p <= 4; ++p)
    for (int n = 1; n <= 16; ++n) {
      const std::string at = " P=" + std::to_string(p) + " N=" + std::to_string(n);
      out.push_back({"zb-h1" + at, pt::generate_zb_h1(p, n)});
      out.push_back({"zb-v" + at, pt::generate_zb_v(p, n)});
      for (int v = 1; v <= 3 && n % p == 0; ++v)
        out.push_back({"interleaved v=" + std::to_string(v) + at, pt::generate_interleaved(p, v, n)});
    }
  return out;
}

TEST(WAction, RoundTripsAndNamesItsKind) {
  const Action a = pt::parse_action("0W3");
  EXPECT_EQ(a.stage, 0);
  EXPECT_EQ(a.kind, ActionKind::W);
  EXPECT_EQ(a.mb, 3);
  EXPECT_EQ(pt::to_string(a), "0W3");
  EXPECT_NE(error_of([] { pt::parse_action("0X3"); }).find("KIND one of F, B, W,"),
            std::string::npos);
}

TEST(Placement, PrintsAndParsesBackExactly) {
  const Schedule s = pt::generate_zb_v(2, 3);
  EXPECT_EQ(s.placement, (std::vector<int>{0, 1, 1, 0}));
  const std::string text = pt::format_schedule(s);
  EXPECT_EQ(text.substr(0, text.find('\n')), "placement: 0 1 1 0");
  const Schedule back = pt::parse_schedule(text, "zb-v.txt", 4, 3);
  EXPECT_EQ(back.placement, s.placement);
  EXPECT_EQ(back.ranks, s.ranks);
  EXPECT_EQ(pt::format_schedule(back), text);
  EXPECT_EQ(pt::rank_stages(back, 0), (std::vector<int>{0, 3}));
}

namespace {

// Every field of a schedule that its text carries.
void expect_same_schedule(const Schedule& back, const Schedule& s, const std::string& label) {
  EXPECT_EQ(back.num_stages, s.num_stages) << label;
  EXPECT_EQ(back.num_micro_batches, s.num_micro_batches) << label;
  EXPECT_EQ(back.num_ranks, s.num_ranks) << label;
  EXPECT_EQ(back.ranks, s.ranks) << label;
  EXPECT_EQ(back.placement, s.placement) << label;
  EXPECT_EQ(back.timed, s.timed) << label;
  EXPECT_EQ(back.forward_only, s.forward_only) << label;
  EXPECT_EQ(back.step_weight_grads, s.step_weight_grads) << label;
}

}  // namespace

TEST(Placement, TimedAndEvaluationSchedulesPrintAndParseBackExactly) {
  const pt::StageActionTimes times = {{1.0, 2.0, 0.5}, {1.5, 2.5, 0.7}, {1.0, 2.0, 0.5},
                                      {2.0, 3.0, 0.9}};
  const Schedule timed = pt::generate_zb_v(2, 4, times);
  ASSERT_TRUE(timed.timed);
  const Schedule eval = pt::forward_only_schedule(pt::generate_zb_v(2, 4));
  ASSERT_TRUE(eval.forward_only);
  for (const Schedule* s : {&timed, &eval}) {
    const std::string text = pt::format_schedule(*s);
    const Schedule back = pt::parse_schedule(text, "x", s->num_stages, s->num_micro_batches);
    expect_same_schedule(back, *s, text);
    EXPECT_EQ(pt::format_schedule(back), text);
  }
  EXPECT_NE(pt::format_schedule(timed).find("timed: measured\n"), std::string::npos);
  EXPECT_NE(pt::format_schedule(eval).find("pass: evaluate\n"), std::string::npos);
  EXPECT_EQ(pt::format_schedule(pt::generate_zb_v(2, 4)).find("timed:"), std::string::npos);
}

TEST(Placement, BadFlagLinesAreInputErrorsNamingTheLine) {
  EXPECT_NE(error_of([] { from_lines({"timed: yes", "0F0 0B0"}, 1, 1); })
                .find("test:1: bad timed line 'timed: yes'; expected 'timed: measured'"),
            std::string::npos);
  EXPECT_NE(error_of([] { from_lines({"0F0", "pass: evaluate"}, 1, 1); })
                .find("test:2: the pass line must come once, before the rank lines"),
            std::string::npos);
}

TEST(Placement, BadLinesAreInputErrorsNamingTheLine) {
  EXPECT_NE(error_of([] { from_lines({"placement: 0 x", "0F0"}, 2, 1); })
                .find("test:1: bad placement entry 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([] { from_lines({"placement: 0 1 1", "0F0"}, 2, 1); })
                .find("test:1: the placement names 3 stages; give the rank of each of the 2"),
            std::string::npos);
  EXPECT_NE(error_of([] { from_lines({"0F0", "placement: 0 0"}, 2, 1); })
                .find("test:2: the placement line must come once, before the rank lines"),
            std::string::npos);
  const std::string msg = error_of([] {
    pt::validate_schedule(from_lines({"placement: 0 0 0", "0F0 1F0 2F0 2B0 1B0 0B0", "0F0"}, 3, 1));
  });
  EXPECT_NE(msg.find("rank 1 owns no stage"), std::string::npos) << msg;
}

TEST(Generators, NewSchedulesValidateUnderMpiAndNccl) {
  for (const Generated& g : all_generated()) {
    const Schedule& s = g.schedule;
    pt::ScheduleReport r;
    ASSERT_NO_THROW(r = pt::validate_schedule(s, pt::CommSemantics::mpi())) << g.label;
    EXPECT_EQ(error_of([&] { pt::validate_schedule(s, pt::CommSemantics::nccl()); }), "")
        << g.label;
    ASSERT_NO_THROW(pt::validate_schedule(pt::forward_only_schedule(s))) << g.label;
    // Text round trip, placement included.
    const Schedule back = pt::parse_schedule(pt::format_schedule(s), "x", s.num_stages,
                                             s.num_micro_batches);
    expect_same_schedule(back, s, g.label);
    // The simulator's in-flight count is the validator's.
    EXPECT_EQ(pt::schedule_in_flight(s), r.peak_in_flight) << g.label;
  }
}

// B and W (and F) run in ascending micro-batch order on every stage: the
// gradient accumulation order of a single process.
TEST(Generators, ComputeRunsInAscendingMicroBatchOrderPerStage) {
  for (const Generated& g : all_generated()) {
    const Schedule& s = g.schedule;
    std::vector<std::vector<int>> next(3, std::vector<int>(s.num_stages, 0));
    for (const auto& rank : s.ranks)
      for (const Action& a : rank) {
        const int k = a.kind == ActionKind::F ? 0 : a.kind == ActionKind::B ? 1 : a.kind == ActionKind::W ? 2 : -1;
        if (k < 0) continue;
        EXPECT_EQ(a.mb, next[k][a.stage]++) << g.label << " " << pt::to_string(a);
      }
  }
}

TEST(Generators, PlacementAndMemoryLimits) {
  for (int p = 1; p <= 4; ++p)
    for (int n = 1; n <= 16; ++n) {
      const std::string at = " P=" + std::to_string(p) + " N=" + std::to_string(n);
      const Schedule h1 = pt::generate_zb_h1(p, n);
      const pt::ScheduleReport rh = pt::validate_schedule(h1);
      EXPECT_TRUE(pt::splits_backward(h1));
      // ZB-H1: 1F1B's peak (stage 0's min(P, N)) on every stage, F to W.
      for (int s = 0; s < p; ++s) EXPECT_LE(rh.peak_in_flight[s], std::min(p, n)) << "zb-h1" << at;
      EXPECT_EQ(rh.peak_in_flight[0], std::min(p, n)) << "zb-h1" << at;
      const Schedule v = pt::generate_zb_v(p, n);
      const pt::ScheduleReport rv = pt::validate_schedule(v);
      EXPECT_EQ(rv.peak_in_flight.size(), static_cast<size_t>(2 * p));
      for (int r = 0; r < p; ++r) {
        EXPECT_EQ(pt::rank_stages(v, r), (std::vector<int>{r, 2 * p - 1 - r})) << "zb-v" << at;
        // Both stages of the rank together, F to W: at most 2P half stages.
        int now = 0, peak = 0;
        for (const Action& a : v.ranks[r]) {
          if (a.kind == ActionKind::F) peak = std::max(peak, ++now);
          if (a.kind == ActionKind::W) --now;
        }
        EXPECT_LE(peak, 2 * p) << "zb-v" << at << " rank " << r;
      }
      if (n % p != 0) continue;
      const Schedule il = pt::generate_interleaved(p, 2, n);
      EXPECT_FALSE(pt::splits_backward(il));
      for (int r = 0; r < p; ++r) EXPECT_EQ(pt::rank_stages(il, r), (std::vector<int>{r, r + p}));
    }
}

TEST(Generators, ExactSmallSchedules) {
  // Stage 1 keeps 1F1B's F/B order; W0 must run before F2 (limit 2).
  EXPECT_EQ(pt::format_schedule(pt::generate_zb_h1(2, 3)),
            "0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0B0 0W0 0RECV_B1 0F2 0SEND_F2 0B1 0RECV_B2 0W1 0B2 0W2\n"
            "1RECV_F0 1F0 1RECV_F1 1B0 1SEND_B0 1F1 1B1 1SEND_B1 1RECV_F2 1W0 1F2 1B2 1SEND_B2 1W1 1W2\n");
  // Megatron's order with one rank: warm-up 1, then F/B pairs, chunk by chunk.
  EXPECT_EQ(pt::format_schedule(pt::generate_interleaved(1, 2, 2)), "0F0 1F0 1B0 0F1 0B0 1F1 1B1 0B1\n");
  // Both halves on rank 0, at most 2 stage micro-batches between F and W.
  EXPECT_EQ(pt::format_schedule(pt::generate_zb_v(1, 2)), "0F0 1F0 1B0 0B0 0W0 0F1 1W0 1F1 1B1 0B1 0W1 1W1\n");
}

TEST(Generators, RefuseWhatTheyCannotRun) {
  EXPECT_EQ(error_of([] { pt::generate_interleaved(2, 2, 3); }),
            "schedule 'interleaved' runs micro-batches in groups of one per rank: 3 micro-batches "
            "is not a multiple of the 2 ranks");
  EXPECT_NE(error_of([] { pt::generate_schedule("zb", 2, 4); })
                .find("expected 'gpipe', '1f1b', 'interleaved', 'zb-h1' or 'zb-v'"),
            std::string::npos);
  EXPECT_NE(error_of([] { pt::generate_zb_v(0, 4); }).find("needs at least 1 rank"),
            std::string::npos);
  EXPECT_EQ(pt::stages_per_rank("zb-v", 1), 2);
  EXPECT_EQ(pt::stages_per_rank("interleaved", 3), 3);
  EXPECT_EQ(pt::stages_per_rank("1f1b", 3), 1);
}

// Theory in unit time (F = 1, B = 2, B = W = 1 when split).
TEST(Theory, BubbleOfEverySchedule) {
  for (int p : {2, 3, 4})
    for (int n : {4, 8, 12, 16}) {
      const double P = p, N = n;
      const std::string at = " P=" + std::to_string(p) + " N=" + std::to_string(n);
      EXPECT_NEAR(pt::unit_time_bubble(pt::generate_1f1b(p, n)), (P - 1) / (N + P - 1), 1e-12) << at;
      EXPECT_NEAR(pt::unit_time_bubble(pt::generate_gpipe(p, n)), (P - 1) / (N + P - 1), 1e-12) << at;
      EXPECT_NEAR(pt::unit_time_bubble(pt::generate_zb_h1(p, n)), (P - 1) / (3 * N + P - 1), 1e-12) << at;
      // weight_grad = step: the W pass after 1F1B's (and GPipe's) fill and drain.
      for (const Schedule& step : {pt::with_step_weight_grads(pt::generate_1f1b(p, n)),
                                   pt::with_step_weight_grads(pt::generate_gpipe(p, n))})
        EXPECT_NEAR(pt::unit_time_bubble(step), 2 * (P - 1) / (3 * N + 2 * (P - 1)), 1e-12) << at;
      if (n % p == 0) {
        for (int v : {2, 3}) {
          EXPECT_NEAR(pt::unit_time_bubble(pt::generate_interleaved(p, v, n)),
                      (P - 1) / (v * N + P - 1), 1e-12) << at << " v=" << v;
        }
      }
      // ZB-V: below ZB-H1 (its ramp is half-stage steps).
      EXPECT_LT(pt::unit_time_bubble(pt::generate_zb_v(p, n)),
                pt::unit_time_bubble(pt::generate_zb_h1(p, n))) << at;
    }
}

// One stage with F = 1 and B = 3 of which recompute 1, W's share 1/2 (so W = 1, B = 2).
pt::SimulationInput one_stage_with_w() {
  pt::SimulationInput in;
  pt::StageCost c;
  c.forward_s = 1.0;
  c.backward_s = 3.0;
  c.recompute_s = 1.0;
  c.stash_bytes = 100.0;
  in.stages = {c};
  in.weight_grad_share = 0.5;
  return in;
}

// Rank 0's events start and end as `want` says, in order.
void expect_timeline(const pt::SimulationResult& r, const std::vector<std::pair<double, double>>& want) {
  ASSERT_EQ(r.events[0].size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_DOUBLE_EQ(r.events[0][i].start_s, want[i].first) << pt::to_string(r.events[0][i].action);
    EXPECT_DOUBLE_EQ(r.events[0][i].end_s, want[i].second) << pt::to_string(r.events[0][i].action);
  }
}

// The planner's simulator with W, by hand: one stage, F = 1, B = 3 of which
// recompute 1, W share 1/2 -> W = (3 - 1) / 2 = 1 and B = 2; micro-batch 0
// stays in flight until its W, so F1 finds two in flight.
TEST(SimulatorW, TimesAndInFlightByHand) {
  const Schedule s = from_lines({"0F0 0B0 0F1 0W0 0B1 0W1"}, 1, 2);
  const pt::SimulationInput in = one_stage_with_w();
  const pt::SimulationResult r = pt::simulate_schedule(s, in);
  expect_timeline(r, {{0, 1}, {1, 3}, {3, 4}, {4, 5}, {5, 7}, {7, 8}});
  EXPECT_DOUBLE_EQ(r.busy_s[0], 8.0);
  EXPECT_EQ(r.peak_in_flight, (std::vector<int>{2}));
  EXPECT_DOUBLE_EQ(r.peak_bytes[0], 200.0);
  EXPECT_EQ(pt::validate_schedule(s).peak_in_flight, (std::vector<int>{2}));
  EXPECT_EQ(pt::validate_schedule(s).peak_pending_w, (std::vector<int>{1}));
  const Schedule no_w = from_lines({"0F0 0B0 0F1 0B1 0W1"}, 1, 2);
  EXPECT_NE(error_of([&] { pt::simulate_schedule(no_w, in); }).find("no rank runs 0W0"),
            std::string::npos);
}

// weight_grad = step, by hand: one stage, F = 1, B = 3 of which recompute
// 1, W share 1/2 -> B = 2; the pass of weight gradients given as 1.2 s
// (SimulationInput::step_weight_s) makes each of the two W 0.6 s; without
// it each W takes its per-micro-batch 1 s. A wrong count is refused.
TEST(SimulatorW, StepWeightPassByHand) {
  const Schedule s = from_lines({"weight_grad: step", "0F0 0B0 0F1 0B1 0W0 0W1"}, 1, 2);
  ASSERT_TRUE(s.step_weight_grads);
  pt::SimulationInput in = one_stage_with_w();
  EXPECT_DOUBLE_EQ(pt::simulate_schedule(s, in).span_s_max, 8.0);
  in.step_weight_s = {1.2};
  expect_timeline(pt::simulate_schedule(s, in), {{0, 1}, {1, 3}, {3, 4}, {4, 6}, {6, 6.6}, {6.6, 7.2}});
  in.step_weight_s = {1.2, 1.0};
  EXPECT_NE(error_of([&] { pt::simulate_schedule(s, in); }).find("2 weight-gradient pass times given"),
            std::string::npos);
}

// weight_grad = step with B measured apart (StageCost::input_s, from the
// stage chains' step): each B takes input_s = 1.5, not backward less W's
// share (2); the pass stays 1.2 s. The same B feeds split_action_times.
TEST(SimulatorW, StepWithMeasuredInputGradientB) {
  const Schedule s = from_lines({"weight_grad: step", "0F0 0B0 0F1 0B1 0W0 0W1"}, 1, 2);
  pt::SimulationInput in = one_stage_with_w();
  in.stages[0].input_s = 1.5;
  in.step_weight_s = {1.2};
  expect_timeline(pt::simulate_schedule(s, in),
                  {{0, 1}, {1, 2.5}, {2.5, 3.5}, {3.5, 5}, {5, 5.6}, {5.6, 6.2}});
  EXPECT_DOUBLE_EQ(pt::split_action_times(in)[0][1], 1.5);
  // a schedule that does not split the backward ignores it: fused B = 3
  const Schedule fused = from_lines({"0F0 0B0 0F1 0B1"}, 1, 2);
  expect_timeline(pt::simulate_schedule(fused, in), {{0, 1}, {1, 4}, {4, 5}, {5, 8}});
}

struct Broken {
  std::string what;
  int p, n;
  Lines ranks;
  std::vector<std::string> message_parts;
};

TEST(ValidatorW, RejectsBadWPlacementWithTheMarkedGrid) {
  const std::vector<Broken> table = {
      {"W before its B", 1, 2, {"0F0 0W0 0B0 0F1 0B1 0W1"},
       {"0W0 (rank 0, step 1) comes before 0B0 (rank 0, step 2); W adds the weight gradients "
        "that B of the same micro-batch deferred", ">0W0<", ">0B0<"}},
      {"missing W", 1, 2, {"0F0 0B0 0W0 0F1 0B1"},
       {"missing 0W1: the schedule splits the backward (it has W actions), so every B needs its W",
        ">0B1<"}},
      {"duplicate W", 1, 2, {"0F0 0B0 0W0 0F1 0B1 0W1 0W0"},
       {"0W0 appears 2 times; it must appear exactly once", ">0W0<"}},
      {"W on the wrong rank", 2, 1,
       {"0F0 0SEND_F0 0RECV_B0 0B0 1W0 0W0", "1RECV_F0 1F0 1B0 1SEND_B0"},
       {"1W0 (rank 0, step 4): wrong rank; stage 1 lives on rank 1", ">1W0<"}},
  };
  for (const Broken& b : table) {
    const Schedule s = from_lines(b.ranks, b.p, b.n);
    const std::string msg = error_of([&] { pt::validate_schedule(s); });
    ASSERT_FALSE(msg.empty()) << b.what << ": accepted";
    EXPECT_NE(msg.find("step   |"), std::string::npos) << b.what << ": no grid\n" << msg;
    for (const std::string& part : b.message_parts)
      EXPECT_NE(msg.find(part), std::string::npos) << b.what << ": no '" << part << "' in\n" << msg;
  }
  Schedule eval = from_lines({"0F0 0W0"}, 1, 1);
  eval.forward_only = true;
  EXPECT_NE(error_of([&] { pt::validate_schedule(eval); })
                .find("0W0 in a forward-only schedule; it must have no backward actions"),
            std::string::npos);
}

// A hand-written ZB-V file on 2 ranks: accepted under MPI; with the
// gradient receives of rank 0 swapped it still runs under MPI (tags) but is
// refused under NCCL (order), and with W of a stage delayed past the whole
// step it is still valid (W only needs its B).
TEST(ValidatorW, HandWrittenSplitScheduleUnderBothSemantics) {
  const Lines ok = {
      "placement: 0 1 1 0",
      "0F0 0SEND_F0 3RECV_F0 3F0 3B0 3SEND_B0 0RECV_B0 0B0 3W0 0W0",
      "1RECV_F0 1F0 2F0 2SEND_F0 2RECV_B0 2B0 1B0 1SEND_B0 2W0 1W0"};
  EXPECT_NO_THROW(pt::validate_schedule(from_lines(ok, 4, 1), pt::CommSemantics::nccl()));
  const Lines two = {
      "placement: 0 1 1 0",
      "0F0 0SEND_F0 0F1 0SEND_F1 3RECV_F0 3RECV_F1 3F0 3B0 3SEND_B0 3F1 3B1 3SEND_B1 "
      "0RECV_B1 0RECV_B0 0B0 0B1 3W0 3W1 0W0 0W1",
      "1RECV_F0 1RECV_F1 1F0 2F0 2SEND_F0 1F1 2F1 2SEND_F1 2RECV_B0 2RECV_B1 2B0 1B0 1SEND_B0 "
      "2B1 1B1 1SEND_B1 2W0 2W1 1W0 1W1"};
  const Schedule s = from_lines(two, 4, 2);
  EXPECT_NO_THROW(pt::validate_schedule(s, pt::CommSemantics::mpi()));
  const std::string msg = error_of([&] { pt::validate_schedule(s, pt::CommSemantics::nccl()); });
  EXPECT_NE(msg.find("under NCCL semantics the messages from rank 1 to rank 0 meet by order"),
            std::string::npos) << msg;
  EXPECT_NE(msg.find(">0RECV_B1<"), std::string::npos) << msg;
}

}  // namespace

// The schedule at given action costs (the trace's cost_bubble), by hand:
// 1F1B, P = 2, N = 2, stage 0 F = 1 B = 2, stage 1 F = 3 B = 1. Rank 0 runs
// F0 [0,1] F1 [1,2] B0 [5,7] B1 [9,11]; rank 1 F0 [1,4] B0 [4,5] F1 [5,8]
// B1 [8,9]. Span 11, busy 6 and 8: bubble (5/11 + 3/11) / 2 = 4/11, above
// the unit-time 1/3 of equal stages.
TEST(BubbleAtCosts, UnevenStagesByHand) {
  const std::vector<pt::ActionCost> costs = {{1.0, 2.0, 0.0}, {3.0, 1.0, 0.0}};
  EXPECT_NEAR(pt::bubble_at_costs(pt::generate_1f1b(2, 2), costs), 4.0 / 11.0, 1e-12);
}

// Equal F = B = W = 1 on every stage is the unit-time theory of a split
// backward; W's own time is used, not a share of B.
TEST(BubbleAtCosts, EqualCostsAreTheUnitTimeTheory) {
  for (int p : {2, 4})
    for (int n : {4, 8}) {
      const std::vector<pt::ActionCost> unit(static_cast<size_t>(p), {1.0, 1.0, 1.0});
      EXPECT_NEAR(pt::bubble_at_costs(pt::generate_zb_h1(p, n), unit),
                  pt::unit_time_bubble(pt::generate_zb_h1(p, n)), 1e-12);
      const std::vector<pt::ActionCost> v(static_cast<size_t>(2 * p), {1.0, 1.0, 1.0});
      EXPECT_NEAR(pt::bubble_at_costs(pt::generate_zb_v(p, n), v),
                  pt::unit_time_bubble(pt::generate_zb_v(p, n)), 1e-12);
    }
  // A cheaper W on the last stage only changes the result.
  std::vector<pt::ActionCost> uneven(2, {1.0, 1.0, 1.0});
  uneven[1].weight_s = 0.25;
  EXPECT_GT(pt::bubble_at_costs(pt::generate_zb_h1(2, 4), uneven),
            pt::unit_time_bubble(pt::generate_zb_h1(2, 4)) + 1e-3);
}

TEST(BubbleAtCosts, WrongStageCountIsAnError) {
  const std::vector<pt::ActionCost> one = {{1.0, 2.0, 0.0}};
  EXPECT_THROW(pt::bubble_at_costs(pt::generate_1f1b(2, 2), one), pt::Error);
}

// ---- replay at every action's own time (trace.h5's replay) ----

// (stages, micro-batches, 3) seconds with every action of a stage at its
// stage's cost.
std::vector<double> per_action(const std::vector<pt::ActionCost>& costs, int n) {
  std::vector<double> out;
  for (const pt::ActionCost& c : costs)
    for (int m = 0; m < n; ++m) out.insert(out.end(), {c.forward_s, c.backward_s, c.weight_s});
  return out;
}

// 1F1B, P = 2, N = 2 by hand, with stage 1's F of micro-batch 0 slow (3)
// and every other F 1, every B 2 on stage 0 and 1 on stage 1. Rank 0: F0
// [0,1] F1 [1,2] B0 [5,7] B1 [7,9]; rank 1: F0 [1,4] B0 [4,5] F1 [5,6] B1
// [6,7]. Span 9, busy 6 and 6: bubble 1/3. The same slow F on micro-batch
// 1 instead: rank 1 F0 [1,2] B0 [2,3] F1 [3,6] B1 [6,7], rank 0 B0 [3,5]
// B1 [7,9]: the same span and bubble. Stage 0's B1 slow (3) instead: rank 1
// F0 [1,2] B0 [2,3] F1 [3,4] B1 [4,5], rank 0 B0 [3,5] B1 [5,8]: span 8,
// busy 7 and 4, bubble (1/8 + 4/8) / 2 = 0.3125.
TEST(BubbleAtActionTimes, OneSlowActionByHand) {
  const pt::Schedule s = pt::generate_1f1b(2, 2);
  const std::vector<double> base = per_action({{1.0, 2.0, 0.0}, {1.0, 1.0, 0.0}}, 2);
  const auto at = [&](int stage, int mb, int kind, double seconds) {
    std::vector<double> t = base;
    t[static_cast<size_t>((stage * 2 + mb) * 3 + kind)] = seconds;
    return pt::bubble_at_action_times(s, t);
  };
  EXPECT_NEAR(at(1, 0, 0, 3.0), 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(at(1, 1, 0, 3.0), 1.0 / 3.0, 1e-12);
  EXPECT_NEAR(at(0, 1, 1, 3.0), 0.3125, 1e-12);
}

// Every action at its stage's cost is bubble_at_costs, for every schedule.
TEST(BubbleAtActionTimes, StageCostsForEveryActionAreBubbleAtCosts) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.2, 2.0);
  for (const char* name : {"gpipe", "1f1b", "interleaved", "zb-h1", "zb-v"})
    for (int n : {2, 4, 8}) {
      const pt::Schedule s = pt::generate_schedule(name, 2, n, 2);
      const bool split = pt::splits_backward(s);
      std::vector<pt::ActionCost> costs;
      for (int st = 0; st < s.num_stages; ++st) costs.push_back({u(rng), u(rng), split ? u(rng) : 0.0});
      EXPECT_NEAR(pt::bubble_at_action_times(s, per_action(costs, n)), pt::bubble_at_costs(s, costs),
                  1e-12) << name << " N = " << n;
    }
}

TEST(BubbleAtActionTimes, WrongCountOrNegativeTimeIsAnError) {
  const pt::Schedule s = pt::generate_1f1b(2, 2);
  EXPECT_THROW(pt::bubble_at_action_times(s, std::vector<double>(11, 1.0)), pt::Error);
  std::vector<double> t(12, 1.0);
  t[5] = -1.0;
  EXPECT_THROW(pt::bubble_at_action_times(s, t), pt::Error);
}

// ---- placement at measured action times (pipeline.schedule_times) ----

namespace {
pt::StageActionTimes equal_times(int stages, double f, double b, double w) {
  return pt::StageActionTimes(static_cast<size_t>(stages), {f, b, w});
}
// Per stage, each kind's micro-batches in ascending order: what makes every
// placement's gradients bitwise those of the unit-time one.
bool micro_batch_order_kept(const Schedule& s) {
  std::map<std::pair<int, pt::ActionKind>, int> next;
  for (const auto& rank : s.ranks)
    for (const pt::Action& a : rank) {
      if (a.kind != pt::ActionKind::F && a.kind != pt::ActionKind::B && a.kind != pt::ActionKind::W)
        continue;
      int& n = next[{a.stage, a.kind}];
      if (a.mb != n) return false;
      ++n;
    }
  return true;
}
// Most micro-batches between their F and their W on a rank (its actions run in order).
int rank_peak_in_flight(const Schedule& s, int rank) {
  int now = 0, peak = 0;
  for (const pt::Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.kind == pt::ActionKind::F) peak = std::max(peak, ++now);
    if (a.kind == pt::ActionKind::W) --now;
  }
  return peak;
}
}  // namespace

TEST(TimedPlacement, EqualTimesGiveThePapersSchedules) {
  for (int p : {1, 2, 3, 4})
    for (int n = 1; n <= 8; ++n) {
      const std::string at = " P=" + std::to_string(p) + " N=" + std::to_string(n);
      // The same actions and placement; only the `timed` flag (its own line) differs.
      const Schedule zv = pt::generate_zb_v(p, n, equal_times(2 * p, 2.5, 2.5, 2.5));
      const Schedule zv_papers = pt::generate_zb_v(p, n);
      EXPECT_EQ(zv.ranks, zv_papers.ranks) << "zb-v" << at;
      EXPECT_EQ(zv.placement, zv_papers.placement) << "zb-v" << at;
      const Schedule zh = pt::generate_zb_h1(p, n, equal_times(p, 0.3, 0.3, 0.3));
      EXPECT_EQ(zh.ranks, pt::generate_zb_h1(p, n).ranks) << "zb-h1" << at;
    }
}

TEST(TimedPlacement, RandomTimesGiveValidSchedulesInMicroBatchOrder) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.1, 3.0);
  for (int trial = 0; trial < 300; ++trial) {
    const int p = 1 + trial % 4, n = 1 + (trial / 4) % 12;
    pt::StageActionTimes v(static_cast<size_t>(2 * p));
    for (auto& t : v) t = {time(rng), time(rng), time(rng)};
    const pt::StageActionTimes h(v.begin(), v.begin() + p);
    for (double slack : pt::kTimedPlacementSlacks) {
      const std::string at = " P=" + std::to_string(p) + " N=" + std::to_string(n) + " slack " +
                             std::to_string(slack) + " trial " + std::to_string(trial);
      const Schedule zv = pt::generate_zb_v(p, n, v, slack);
      const Schedule zh = pt::generate_zb_h1(p, n, h, slack);
      EXPECT_TRUE(zv.timed && zh.timed);
      for (const Schedule* s : {&zv, &zh}) {
        EXPECT_NO_THROW(pt::validate_schedule(*s, pt::CommSemantics::mpi())) << s->name << at;
        EXPECT_NO_THROW(pt::validate_schedule(*s, pt::CommSemantics::nccl())) << s->name << at;
        EXPECT_TRUE(micro_batch_order_kept(*s)) << s->name << at;
      }
      for (int rank = 0; rank < p; ++rank)  // ZB-V's memory bound: 2P per rank
        EXPECT_LE(rank_peak_in_flight(zv, rank), 2 * p) << "zb-v rank " << rank << at;
    }
  }
}

TEST(TimedPlacement, KeepsTheUnitPlacementUnlessAnotherGainsEnough) {
  // W half as long as F and B (attention has no W): the unit-time ZB-V
  // leaves W-sized holes that a placement at these times fills.
  const pt::StageActionTimes light_w = equal_times(4, 1.0, 1.0, 0.5);
  const Schedule unit = pt::generate_zb_v(2, 8);
  const Schedule placed = pt::generate_at_times("zb-v", 2, 8, light_w).schedule;
  EXPECT_TRUE(placed.timed);
  const double before = pt::bubble_at_costs(unit, pt::action_costs(light_w));
  const double after = pt::bubble_at_costs(placed, pt::action_costs(light_w));
  std::printf("zb-v P=2 N=8 at F=B=1, W=0.5: bubble %.2f%% unit-time, %.2f%% placed\n",
              100 * before, 100 * after);
  EXPECT_LT(after, before - 0.05);
  // The theory stays that of the papers' schedule.
  EXPECT_DOUBLE_EQ(pt::theory_bubble(placed), pt::unit_time_bubble(unit));
  // Equal times: nothing simulates better than the papers' schedule, which is kept.
  const Schedule same = pt::generate_at_times("zb-v", 2, 8, equal_times(4, 1.0, 1.0, 1.0)).schedule;
  EXPECT_FALSE(same.timed);
  EXPECT_EQ(pt::format_schedule(same), pt::format_schedule(unit));
  // Never worse than unit time at the given times; for both schedules some
  // uneven times are placed strictly better.
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> time(0.2, 2.0);
  std::map<std::string, int> better;
  for (int trial = 0; trial < 100; ++trial) {
    const int p = 1 + trial % 3, n = 1 + trial % 16;
    for (const char* name : {"zb-h1", "zb-v"}) {
      pt::StageActionTimes t(static_cast<size_t>(pt::stages_per_rank(name, 1) * p));
      for (auto& x : t) x = {time(rng), time(rng), time(rng)};
      const pt::TimedPlacement result = pt::generate_at_times(name, p, n, t);
      const Schedule& placed = result.schedule;
      const double at_unit = pt::bubble_at_costs(pt::generate_schedule(name, p, n), pt::action_costs(t));
      const double at_placed = pt::bubble_at_costs(placed, pt::action_costs(t));
      const std::string at = std::string(name) + " P=" + std::to_string(p) + " N=" + std::to_string(n);
      EXPECT_EQ(result.unit_bubble, at_unit) << at;
      EXPECT_EQ(result.bubble, at_placed) << at;
      EXPECT_LE(result.timed_bubble, at_unit) << at;
      // Switched exactly when the best timed candidate gains the minimum.
      const bool gains_enough = result.timed_bubble <= at_unit - pt::kMinPlacementGain;
      EXPECT_EQ(placed.timed, gains_enough) << at;
      EXPECT_EQ(at_placed, gains_enough ? result.timed_bubble : at_unit) << at;
      better[name] += placed.timed;
    }
  }
  std::printf("placed better than the papers' in 100 random trials: zb-h1 %d, zb-v %d\n",
              better["zb-h1"], better["zb-v"]);
  EXPECT_GT(better["zb-h1"], 0);
  EXPECT_GT(better["zb-v"], 0);
}

TEST(TimedPlacement, AGainUnderTheMinimumKeepsThePapersPlacement) {
  // W a little shorter than F and B: a timed placement simulates a smaller
  // bubble, but by less than kMinPlacementGain, so the papers' is kept.
  const pt::StageActionTimes near_equal = equal_times(4, 1.0, 1.0, 0.97);
  const pt::TimedPlacement kept = pt::generate_at_times("zb-v", 2, 16, near_equal);
  std::printf("zb-v P=2 N=16 at F=B=1, W=0.97: bubble %.3f%% unit-time, %.3f%% best timed\n",
              100 * kept.unit_bubble, 100 * kept.timed_bubble);
  EXPECT_LT(kept.timed_bubble, kept.unit_bubble);
  EXPECT_GT(kept.timed_bubble, kept.unit_bubble - pt::kMinPlacementGain);
  EXPECT_FALSE(kept.schedule.timed);
  EXPECT_EQ(pt::format_schedule(kept.schedule), pt::format_schedule(pt::generate_zb_v(2, 16)));
  EXPECT_EQ(kept.bubble, kept.unit_bubble);
}

TEST(TimedPlacement, BadTimesAreRefused) {
  EXPECT_THROW(pt::generate_zb_v(2, 4, equal_times(3, 1, 1, 1)), std::exception);
  EXPECT_THROW(pt::generate_zb_h1(2, 4, equal_times(2, 1, 0.0, 1)), std::exception);
  EXPECT_THROW(pt::generate_schedule("1f1b", 2, 4, 1, equal_times(2, 1, 1, 1)), std::exception);
}
