// test_placement_search.cpp: the local search that shortens a zero-bubble
// placement at measured action times (plan/placement_search). It keeps every
// stage's micro-batch order and in-flight peak (and each rank's), never
// lengthens the step, gives valid schedules under MPI and NCCL semantics, its
// span model is the planner's simulator with free links, and on a GPT's
// measured costs it comes near a lower bound, under the list scheduler.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "pipetrain/plan/placement_search.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace {

using pt::Action;
using pt::ActionCost;
using pt::ActionKind;
using pt::Schedule;

// The planner's simulator: the longest rank span at the costs, free links.
double simulated_span(const Schedule& s, const std::vector<ActionCost>& costs) {
  pt::SimulationInput input;
  for (const ActionCost& c : costs) {
    pt::StageCost stage;
    stage.forward_s = c.forward_s;
    stage.backward_s = c.backward_s + c.weight_s;
    stage.weight_s = c.weight_s;
    input.stages.push_back(stage);
  }
  input.links = {pt::LinkCost{}};
  input.record_events = false;
  return pt::simulate_schedule(s, input).span_s_max;
}

// Per stage, each kind's micro-batches in ascending order.
bool micro_batch_order_kept(const Schedule& s) {
  std::map<std::pair<int, ActionKind>, int> next;
  for (const auto& rank : s.ranks)
    for (const Action& a : rank)
      if (pt::is_compute(a.kind) && a.mb != next[{a.stage, a.kind}]++) return false;
  return true;
}

// Most micro-batches between F and W on a rank, its stages summed.
int rank_peak(const Schedule& s, int rank) {
  int now = 0, peak = 0;
  for (const Action& a : s.ranks[static_cast<size_t>(rank)]) {
    if (a.kind == ActionKind::F) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::W) --now;
  }
  return peak;
}

std::vector<ActionCost> random_costs(std::mt19937& rng, int stages) {
  std::uniform_real_distribution<double> time(0.1, 3.0);
  std::vector<ActionCost> costs(static_cast<size_t>(stages));
  for (ActionCost& c : costs) c = {time(rng), time(rng), time(rng)};
  return costs;
}

pt::StageActionTimes times_of(const std::vector<ActionCost>& costs) {
  pt::StageActionTimes t;
  for (const ActionCost& c : costs) t.push_back({c.forward_s, c.backward_s, c.weight_s});
  return t;
}

struct Case {
  std::string label;
  Schedule start;
  std::vector<ActionCost> costs;
};

// ZB-H1 and ZB-V at P = 1..4, N = 1..12: the papers' placement and the list
// scheduler's at random times, with those times.
std::vector<Case> random_cases() {
  std::mt19937 rng(11);
  std::vector<Case> cases;
  for (int trial = 0; trial < 96; ++trial) {
    const int p = 1 + trial % 4, n = 1 + (trial / 4) % 12;
    const std::string at = " P=" + std::to_string(p) + " N=" + std::to_string(n) + " trial " +
                           std::to_string(trial);
    const std::vector<ActionCost> v = random_costs(rng, 2 * p);
    const std::vector<ActionCost> h(v.begin(), v.begin() + p);
    cases.push_back({"zb-v unit" + at, pt::generate_zb_v(p, n), v});
    cases.push_back({"zb-v timed" + at, pt::generate_zb_v(p, n, times_of(v)), v});
    cases.push_back({"zb-h1 unit" + at, pt::generate_zb_h1(p, n), h});
    cases.push_back({"zb-h1 timed" + at, pt::generate_zb_h1(p, n, times_of(h), 0.5), h});
  }
  return cases;
}

TEST(PlacementSearch, SpanModelIsThePlannersSimulatorWithFreeLinks) {
  for (const Case& c : random_cases()) {
    const double model = pt::compute_span(c.start, pt::compute_actions(c.start), c.costs);
    EXPECT_NEAR(model, simulated_span(c.start, c.costs), 1e-9 * model) << c.label;
  }
}

TEST(PlacementSearch, KeepsOrderAndPeaksValidAndNeverLonger) {
  int shorter = 0;
  for (const Case& c : random_cases()) {
    const pt::PlacementSearchResult r = pt::improve_placement(c.start, c.costs);
    const Schedule& s = r.schedule;
    EXPECT_EQ(s.timed, c.start.timed || r.moves > 0) << c.label;
    EXPECT_EQ(s.placement, c.start.placement) << c.label;
    EXPECT_NO_THROW(pt::validate_schedule(s, pt::CommSemantics::mpi())) << c.label;
    EXPECT_NO_THROW(pt::validate_schedule(s, pt::CommSemantics::nccl())) << c.label;
    EXPECT_TRUE(micro_batch_order_kept(s)) << c.label;
    const std::vector<int> peak = pt::schedule_in_flight(s), start_peak = pt::schedule_in_flight(c.start);
    for (size_t st = 0; st < peak.size(); ++st)
      EXPECT_LE(peak[st], start_peak[st]) << c.label << " stage " << st;
    for (int rank = 0; rank < s.num_ranks; ++rank)  // stages summed: ZB-V's 2P bound
      EXPECT_LE(rank_peak(s, rank), rank_peak(c.start, rank)) << c.label << " rank " << rank;
    // The same actions on the same ranks, only reordered.
    std::vector<std::vector<Action>> before = pt::compute_actions(c.start), after = pt::compute_actions(s);
    for (size_t rank = 0; rank < before.size(); ++rank) {
      auto key = [](const Action& a) { return std::make_tuple(a.stage, static_cast<int>(a.kind), a.mb); };
      auto less = [&](const Action& a, const Action& b) { return key(a) < key(b); };
      std::sort(before[rank].begin(), before[rank].end(), less);
      std::sort(after[rank].begin(), after[rank].end(), less);
      EXPECT_EQ(before[rank], after[rank]) << c.label << " rank " << rank;
    }
    EXPECT_DOUBLE_EQ(r.start_span_s, simulated_span(c.start, c.costs)) << c.label;
    EXPECT_NEAR(r.span_s, simulated_span(s, c.costs), 1e-9 * r.span_s) << c.label;
    EXPECT_LE(r.span_s, r.start_span_s * (1 + 1e-12)) << c.label;
    shorter += r.span_s < r.start_span_s * (1 - 1e-9);
  }
  std::printf("the search shortened %d of %zu random placements\n", shorter, random_cases().size());
  EXPECT_GT(shorter, 0);
}

TEST(PlacementSearch, SameInputsSameScheduleAndWorkLimitHolds) {
  std::mt19937 rng(5);
  const std::vector<ActionCost> costs = random_costs(rng, 4);
  const Schedule start = pt::generate_zb_v(2, 8);
  const pt::PlacementSearchResult a = pt::improve_placement(start, costs);
  const pt::PlacementSearchResult b = pt::improve_placement(start, costs);
  EXPECT_EQ(pt::format_schedule(a.schedule), pt::format_schedule(b.schedule));
  EXPECT_GT(a.moves, 0);
  // No work allowed: the start is evaluated once and kept.
  const pt::PlacementSearchResult none = pt::improve_placement(start, costs, 0);
  EXPECT_EQ(none.moves, 0);
  EXPECT_EQ(none.evaluations, 0);
  EXPECT_EQ(none.schedule.ranks, start.ranks);
  EXPECT_FALSE(none.schedule.timed);
  // A small budget: the search stops within one candidate of it (each costs
  // the start's 96 actions simulated plus one rank's 48 scanned).
  const pt::PlacementSearchResult some = pt::improve_placement(start, costs, 2000);
  EXPECT_LE(some.evaluations, 2000 / 96 + 1);
  EXPECT_LT(some.evaluations, a.evaluations);
  // A schedule without W has nothing to place.
  EXPECT_THROW(pt::improve_placement(pt::generate_1f1b(2, 4), {{1, 1, 0}, {1, 1, 0}}), std::exception);
}

// Per stage (F, B, W) ms measured in a run of inputs/gpt_balanced.toml
// under ZB-V, P = 2 (results/bench_schedules_gptauto.md, N = 8): the last
// stage's F carries the head and the loss, its B and W are light.
const std::vector<ActionCost> kGptCosts = {
    {2.00, 1.90, 1.14}, {1.89, 1.89, 1.10}, {1.88, 1.89, 1.14}, {2.59, 1.15, 0.74}};

// A lower bound on ZB-V's bubble at P = 2: rank 1 cannot start before
// stage 0's first F, and no rank finishes before its busy time.
double zb_v_p2_bound(const std::vector<ActionCost>& c, int mbs) {
  auto total = [&](int st) { return mbs * (c[st].forward_s + c[st].backward_s + c[st].weight_s); };
  const double rank0 = total(0) + total(3), rank1 = total(1) + total(2);
  const double span = std::max(rank0, c[0].forward_s + rank1);
  return 1.0 - (rank0 + rank1) / (2.0 * span);
}

TEST(PlacementSearch, GptCostsNearTheBoundAndUnderTheListScheduler) {
  for (int n : {2, 4, 8, 16}) {
    double list_only = pt::bubble_at_costs(pt::generate_zb_v(2, n), kGptCosts);
    for (double slack : pt::kTimedPlacementSlacks)
      list_only = std::min(list_only, pt::bubble_at_costs(pt::generate_zb_v(2, n, times_of(kGptCosts), slack),
                                                          kGptCosts));
    const pt::TimedPlacement placed = pt::generate_at_times("zb-v", 2, n, times_of(kGptCosts));
    const double bound = zb_v_p2_bound(kGptCosts, n);
    std::printf("zb-v P=2 N=%2d at the GPT's costs: bubble %.2f%% papers', %.2f%% list scheduler, "
                "%.2f%% searched, bound %.2f%%\n",
                n, 100 * placed.unit_bubble, 100 * list_only, 100 * placed.timed_bubble, 100 * bound);
    EXPECT_GE(placed.timed_bubble, bound - 1e-12);
    // At N = 2 the best timed placement gains 0.16 points, under
    // kMinPlacementGain, so the run keeps the papers'; elsewhere it switches.
    EXPECT_EQ(placed.schedule.timed, n != 2) << "N=" << n;
    // docs/schedules.md: 10.52 / 6.17 / 6.69 / 2.74% against the bound's
    // 10.52 / 6.17 / 3.83 / 2.62%. At N = 8 the in-flight caps bind (the
    // search without them reaches 4.07%, at up to 2P + 1 micro-batches on a
    // rank): there it only has to beat the list scheduler's 7.55%.
    if (n != 8) {
      EXPECT_LE(100 * placed.timed_bubble, 100 * bound + (n <= 4 ? 0.05 : 0.3)) << "N=" << n;
    }
    if (n >= 4) {
      EXPECT_LT(100 * placed.timed_bubble, 100 * list_only - 0.5) << "N=" << n;
    }
  }
}

}  // namespace
