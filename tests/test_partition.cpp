// test_partition.cpp: the planner's stage costs and partition solver: the
// memory and time formulas on hand-computed units, the solver against brute
// force on random cost vectors (every objective, random stages, in-flight
// counts, policies and budgets), the infeasible-budget message, the uniform
// rule against the runtime's partition_units, and the enumerator.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/plan/partition.hpp"
#include "error_of.hpp"

namespace {

using pt::InputError;
using pt::test::error_of;
using pt::ModelProfile;
using pt::PartitionObjective;
using pt::PartitionResult;
using pt::PartitionSetup;
using pt::PlanRecompute;
using pt::UnitCost;
using testing::HasSubstr;

PlanRecompute policy(const std::string& text) { return PlanRecompute::parse(text); }

// Four units with round numbers: unit i (1-based) has input 100 i bytes,
// stash none 1000 i, selective 500 i, workspace 7 i, persistent 10000 i.
ModelProfile round_profile() {
  ModelProfile p;
  p.model = "round";
  for (int i = 1; i <= 4; ++i) {
    UnitCost u;
    u.name = "u" + std::to_string(i);
    u.forward_s = i;
    u.backward_s = 2.0 * i;
    u.recompute_s = 0.5 * i;
    u.recompute_selective_s = 0.25 * i;
    u.optimizer_s = 0.125 * i;
    u.input_bytes = 100.0 * i;
    u.output_bytes = 100.0 * (i + 1);
    u.stash_none_bytes = 1000.0 * i;
    u.stash_selective_bytes = 500.0 * i;
    u.workspace_bytes = 7.0 * i;
    u.param_bytes = 10000.0 * i;
    p.units.push_back(u);
  }
  return p;
}

TEST(StageCost, TimeAndMemoryOfEachPolicy) {
  const ModelProfile p = round_profile();
  // One stage of all four units (first and last: no messages).
  auto one = [&](const std::string& name) {
    return pt::stage_costs(p, {4}, {policy(name)}).front();
  };
  const pt::StageCost none = one("none");
  EXPECT_DOUBLE_EQ(none.forward_s, 10.0);
  EXPECT_DOUBLE_EQ(none.backward_s, 20.0);
  EXPECT_DOUBLE_EQ(none.optimizer_s, 1.25);
  EXPECT_DOUBLE_EQ(none.persistent_bytes, 100000.0);
  EXPECT_DOUBLE_EQ(none.comm_buffer_bytes, 0.0);
  EXPECT_DOUBLE_EQ(none.stash_bytes, 10000.0);
  EXPECT_DOUBLE_EQ(none.forward_transient_bytes, 28.0);
  EXPECT_DOUBLE_EQ(none.backward_transient_bytes, 28.0);
  EXPECT_DOUBLE_EQ(none.peak_bytes(3), 100000.0 + 30000.0 + 28.0);

  const pt::StageCost selective = one("selective");
  EXPECT_DOUBLE_EQ(selective.backward_s, 20.0 + 2.5);
  EXPECT_DOUBLE_EQ(selective.stash_bytes, 5000.0);
  EXPECT_DOUBLE_EQ(selective.backward_transient_bytes, 28.0 + 2000.0);  // unit 4 drops 2000

  const pt::StageCost every2 = one("every:2");
  EXPECT_DOUBLE_EQ(every2.backward_s, 20.0 + 5.0);
  EXPECT_DOUBLE_EQ(every2.stash_bytes, 100.0 + 300.0);  // inputs of units 1 and 3
  EXPECT_DOUBLE_EQ(every2.backward_transient_bytes, 28.0 + 7000.0);  // segment {3, 4}

  const pt::StageCost full = one("full");
  EXPECT_DOUBLE_EQ(full.stash_bytes, 100.0);
  // B re-creates the stash of none less what full keeps (unit 1's input).
  EXPECT_DOUBLE_EQ(full.forward_transient_bytes, 28.0);
  EXPECT_DOUBLE_EQ(full.backward_transient_bytes, 28.0 + 10000.0 - 100.0);
  EXPECT_DOUBLE_EQ(full.peak_bytes(2), 100000.0 + 200.0 + 9928.0);
}

// Cached training data: every stage holds stage_data_bytes, the first also
// its first unit's data_bytes (inputs), the last its last unit's (targets);
// the peak and the solver's lower bound both count them.
TEST(StageCost, DataBytesOnEveryStageAndAtBothEnds) {
  ModelProfile p = round_profile();
  p.stage_data_bytes = 3.0;
  p.units.front().data_bytes = 40.0;
  p.units.back().data_bytes = 500.0;
  const auto costs = pt::stage_costs(p, {1, 2, 1}, {policy("none")});
  ASSERT_EQ(costs.size(), 3u);
  EXPECT_DOUBLE_EQ(costs[0].data_bytes, 43.0);
  EXPECT_DOUBLE_EQ(costs[1].data_bytes, 3.0);
  EXPECT_DOUBLE_EQ(costs[2].data_bytes, 503.0);
  EXPECT_DOUBLE_EQ(costs[2].base_bytes(), 40000.0 + 503.0 + 2.0 * 400.0);  // + input message
  EXPECT_DOUBLE_EQ(costs[2].peak_bytes(1) - costs[2].base_bytes(), 4000.0 + 28.0);
  const pt::UnitRanges ranges(p);
  // The bound takes the last unit's output (500) off its workspace (28) too.
  EXPECT_NEAR(ranges.peak_lower_bound(3, 4, policy("none"), 1.0), 40000.0 + 503.0 + 4000.0, 1e-6);
  const pt::StageCost whole = pt::stage_costs(p, {4}, {policy("none")}).front();
  EXPECT_DOUBLE_EQ(whole.peak_bytes(1), 100000.0 + 543.0 + 10000.0 + 28.0);
}

// A unit's workspace counts above the stash of the units before it only:
// the later units' stash does not exist yet (F) or is freed already (B),
// and its output is consumed by the next unit (docs/profile.md).
TEST(StageCost, LayeredTransientOfAnEarlyUnit) {
  ModelProfile p = round_profile();
  p.units[0].workspace_bytes = 20000.0;
  const auto none = pt::stage_costs(p, {4}, {policy("none")}).front();
  EXPECT_DOUBLE_EQ(none.forward_transient_bytes, 20000.0 - 200.0 - (2000.0 + 3000.0 + 4000.0));
  EXPECT_DOUBLE_EQ(none.peak_bytes(1), 100000.0 + 10000.0 + 10800.0);
  // Selective: later units keep half, unit 1 re-creates its 500 dropped bytes.
  const auto selective = pt::stage_costs(p, {4}, {policy("selective")}).front();
  EXPECT_DOUBLE_EQ(selective.backward_transient_bytes,
                   20000.0 + 500.0 - 200.0 - (1000.0 + 1500.0 + 2000.0));
  // A stage of unit 1 alone (not the last stage): the workspace was measured
  // with its output gradient allocated before F and its output held through
  // B; a run's F has no gradient yet and its B has sent the output, so both
  // take an output-sized buffer off.
  const auto alone = pt::stage_costs(p, {1, 3}, {policy("none")}).front();
  EXPECT_DOUBLE_EQ(alone.backward_transient_bytes, 20000.0 - 200.0);
  EXPECT_DOUBLE_EQ(alone.forward_transient_bytes, 20000.0 - 200.0);
  const auto last = pt::stage_costs(p, {3, 1}, {policy("none")}).back();
  EXPECT_DOUBLE_EQ(last.forward_transient_bytes, last.backward_transient_bytes);
}

TEST(StageCost, MessagesAndTheAlwaysKeptStash) {
  ModelProfile p = round_profile();
  p.units[3].stash_always_bytes = 50.0;  // the "loss gradient" of the last unit
  const auto costs = pt::stage_costs(p, {1, 2, 1}, {policy("full")});
  ASSERT_EQ(costs.size(), 3u);
  EXPECT_DOUBLE_EQ(costs[0].input_message_bytes, 0.0);
  EXPECT_DOUBLE_EQ(costs[0].output_message_bytes, 200.0);
  EXPECT_DOUBLE_EQ(costs[1].input_message_bytes, 200.0);
  EXPECT_DOUBLE_EQ(costs[1].output_message_bytes, 400.0);
  EXPECT_DOUBLE_EQ(costs[1].comm_buffer_bytes, 2.0 * (200.0 + 400.0));
  EXPECT_DOUBLE_EQ(costs[2].output_message_bytes, 0.0);
  EXPECT_DOUBLE_EQ(costs[1].stash_bytes, 200.0);       // input of unit 2
  EXPECT_DOUBLE_EQ(costs[2].stash_bytes, 400.0 + 50.0);  // input of unit 4 + always kept
}

TEST(StageCost, PolicyNames) {
  for (const char* name : {"none", "selective", "every:3", "full"})
    EXPECT_EQ(policy(name).name(), name);
  for (const char* bad : {"every:0", "every:", "auto", "All"})
    EXPECT_THAT(error_of([&] { policy(bad); }), HasSubstr("expected"));
}

// ------------------------------------------------------------ random profiles

struct RandomCase {
  ModelProfile profile;
  PartitionSetup setup;
};

UnitCost random_unit(std::mt19937& rng, const std::string& name, bool partitionable) {
  std::uniform_real_distribution<double> time(0.1, 5.0), bytes(1.0, 1000.0);
  std::bernoulli_distribution sometimes(0.3);
  UnitCost u;
  u.name = name;
  u.partitionable = partitionable;
  u.forward_s = time(rng);
  u.backward_s = time(rng);
  u.recompute_s = time(rng);
  u.recompute_selective_s = 0.3 * time(rng);
  u.optimizer_s = 0.1 * time(rng);
  u.input_bytes = bytes(rng);
  u.output_bytes = bytes(rng);
  u.stash_none_bytes = 5.0 * bytes(rng);
  u.stash_selective_bytes = u.stash_none_bytes * 0.5;
  u.stash_always_bytes = sometimes(rng) ? 0.2 * bytes(rng) : 0.0;
  u.workspace_bytes = bytes(rng);
  // Sometimes no persistent bytes and a small stash, so that the kept inputs
  // and messages (the terms that can shrink as a stage grows) decide.
  const bool lean = std::bernoulli_distribution(0.5)(rng);
  u.param_bytes = lean ? 0.0 : 10.0 * bytes(rng);
  u.grad_bytes = u.param_bytes;
  if (lean) u.stash_none_bytes = 0.1 * bytes(rng);
  if (lean) u.stash_selective_bytes = 0.5 * u.stash_none_bytes;
  u.optimizer_bytes = sometimes(rng) ? 2.0 * u.param_bytes : 0.0;
  return u;
}

PlanRecompute random_policy(std::mt19937& rng) {
  const char* names[] = {"none", "selective", "every:1", "every:2", "every:3", "full"};
  return policy(names[std::uniform_int_distribution<int>(0, 5)(rng)]);
}

RandomCase random_case(std::mt19937& rng) {
  RandomCase c;
  std::bernoulli_distribution coin(0.5);
  const int units = std::uniform_int_distribution<int>(1, 12)(rng);
  c.profile.model = "random";
  if (coin(rng)) c.profile.units.push_back(random_unit(rng, "embedding", false));
  for (int i = 0; i < units; ++i) c.profile.units.push_back(random_unit(rng, "unit", true));
  if (coin(rng)) c.profile.units.push_back(random_unit(rng, "head", false));
  c.setup.num_stages = std::uniform_int_distribution<int>(1, std::min(units, 6))(rng);
  c.setup.in_flight.clear();
  for (int s = 0; s < c.setup.num_stages; ++s)
    c.setup.in_flight.push_back(std::uniform_int_distribution<int>(0, 6)(rng));
  c.setup.recompute = {random_policy(rng)};
  if (coin(rng)) {
    c.setup.recompute.clear();
    for (int s = 0; s < c.setup.num_stages; ++s) c.setup.recompute.push_back(random_policy(rng));
  }
  return c;
}

// The solver's pruning relies on peak_lower_bound: at most the peak, and
// never smaller for a larger range (grown at either end).
TEST(StageCost, PeakLowerBoundIsMonotoneAndBelowThePeak) {
  std::mt19937 rng(99);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    ModelProfile p;
    for (int i = 0; i < 10; ++i) p.units.push_back(random_unit(rng, "unit", true));
    const pt::UnitRanges ranges(p);
    const PlanRecompute pol = random_policy(rng);
    const double in_flight = std::uniform_int_distribution<int>(0, 6)(rng);
    for (size_t first = 0; first < 10; ++first)
      for (size_t end = first + 1; end <= 10; ++end) {
        const double bound = ranges.peak_lower_bound(first, end, pol, in_flight);
        for (bool first_stage : {false, true})
          for (bool last_stage : {false, true})
            EXPECT_LE(bound, ranges.cost(first, end, first_stage, last_stage, pol).peak_bytes(in_flight));
        // Never decreasing, up to rounding: a unit whose stash exactly pays
        // for what it takes off a layered term leaves the bound equal in
        // exact arithmetic, and the two sums may round 1 ulp apart.
        const double rounding = 1e-12 * bound;
        if (first > 0) {
          EXPECT_GE(ranges.peak_lower_bound(first - 1, end, pol, in_flight), bound - rounding)
              << pol.name();
        }
        if (end < 10) {
          EXPECT_GE(ranges.peak_lower_bound(first, end + 1, pol, in_flight), bound - rounding)
              << pol.name();
        }
        ++checked;
      }
  }
  EXPECT_EQ(checked, 300 * 55);
}

void expect_valid_counts(const PartitionResult& r, const RandomCase& c) {
  ASSERT_EQ(static_cast<int>(r.units_per_stage.size()), c.setup.num_stages);
  int64_t total = 0;
  for (int64_t n : r.units_per_stage) {
    EXPECT_GE(n, 1) << "an empty stage";
    total += n;
  }
  EXPECT_EQ(total, static_cast<int64_t>(pt::unit_layout(c.profile).partitionable));
}

// Random cases compared with brute force: fewer under ASan, where each brute
// force costs about ten times as much (the same seed, so a prefix of the cases).
#ifdef __SANITIZE_ADDRESS__
constexpr int kRandomTrials = 100;
#else
constexpr int kRandomTrials = 1500;
#endif

// The solver's optimum equals the best of all partitions, for every objective.
TEST(PartitionSolver, MatchesBruteForceOnRandomCosts) {
  std::mt19937 rng(20240613);
  int compared = 0, infeasible = 0;
  for (int trial = 0; trial < kRandomTrials; ++trial) {
    RandomCase c = random_case(rng);
    for (PartitionObjective objective :
         {PartitionObjective::Time, PartitionObjective::Memory, PartitionObjective::Balanced}) {
      if (objective == PartitionObjective::Balanced) {
        // A budget between 0.8 and 1.6 times the smallest achievable peak.
        const double frugal =
            pt::brute_force_partition(c.profile, PartitionObjective::Memory, c.setup).max_peak_bytes;
        c.setup.memory_budget_bytes =
            frugal * std::uniform_real_distribution<double>(0.8, 1.6)(rng);
      }
      const std::string brute_error = error_of(
          [&] { pt::brute_force_partition(c.profile, objective, c.setup); });
      if (!brute_error.empty()) {
        EXPECT_EQ(objective, PartitionObjective::Balanced) << brute_error;
        // Equal numbers; the memory-optimal partition named may differ on ties.
        const std::string solver_error =
            error_of([&] { pt::solve_partition(c.profile, objective, c.setup); });
        EXPECT_EQ(solver_error.substr(0, solver_error.find(", on stage")),
                  brute_error.substr(0, brute_error.find(", on stage")));
        EXPECT_THAT(solver_error, HasSubstr("smallest achievable largest stage peak"));
        ++infeasible;
        continue;
      }
      const PartitionResult brute = pt::brute_force_partition(c.profile, objective, c.setup);
      const PartitionResult solved = pt::solve_partition(c.profile, objective, c.setup);
      expect_valid_counts(solved, c);
      EXPECT_EQ(pt::objective_value(solved, objective, c.setup),
                pt::objective_value(brute, objective, c.setup))
          << "trial " << trial << " objective " << pt::objective_name(objective) << ": solver "
          << solved.reason << " vs brute force " << brute.reason;
      if (objective == PartitionObjective::Balanced) {
        EXPECT_LE(solved.max_peak_bytes, c.setup.memory_budget_bytes);
      }
      ++compared;
    }
  }
  EXPECT_GT(compared, kRandomTrials * 2 / 3);
  EXPECT_GT(infeasible, kRandomTrials / 75);  // budgets below 1.0 x the optimum are infeasible
}

// A time-optimal partition reported by the solver is what a hand count gives.
TEST(PartitionSolver, HandExampleForTime) {
  ModelProfile p;
  for (int i = 1; i <= 5; ++i) {
    UnitCost u;
    u.forward_s = i;
    p.units.push_back(u);
  }
  // {1,2,3} | {4,5} -> max(6, 9) = 9; the alternatives give 10 or more.
  const PartitionResult r =
      pt::solve_partition(p, PartitionObjective::Time, PartitionSetup{2, {1, 1}, {policy("none")}, 0.0, {}});
  EXPECT_EQ(r.units_per_stage, (std::vector<int64_t>{3, 2}));
  EXPECT_DOUBLE_EQ(r.max_time_s, 9.0);
  EXPECT_EQ(r.slowest_stage, 1);
  EXPECT_THAT(r.reason, HasSubstr("time [3, 2]"));
}

// Pinned units join the end stages: a heavy embedding pushes units off stage 0.
TEST(PartitionSolver, PinnedUnitsStayOnTheEndStages) {
  ModelProfile p;
  UnitCost embedding;
  embedding.name = "embedding";
  embedding.partitionable = false;
  embedding.forward_s = 4.0;
  p.units.push_back(embedding);
  for (int i = 0; i < 6; ++i) {
    UnitCost u;
    u.forward_s = 1.0;
    p.units.push_back(u);
  }
  UnitCost head = embedding;
  head.name = "head";
  head.forward_s = 2.0;
  p.units.push_back(head);
  const PartitionResult r =
      pt::solve_partition(p, PartitionObjective::Time, PartitionSetup{3, {1, 1, 1}, {policy("none")}, 0.0, {}});
  // Stage times 4 + a, b, 2 + c with a + b + c = 6, each >= 1: a = 1 is
  // forced for a maximum of 5 (a = 2 gives 6); [1, 3, 2] and [1, 4, 1] reach it.
  EXPECT_DOUBLE_EQ(r.max_time_s, 5.0);
  EXPECT_EQ(r.units_per_stage[0], 1);
  const PartitionResult uniform =
      pt::solve_partition(p, PartitionObjective::Uniform, PartitionSetup{3, {1, 1, 1}, {policy("none")}, 0.0, {}});
  EXPECT_DOUBLE_EQ(uniform.stage_time_s[0], 6.0);  // embedding + 2 units
  EXPECT_DOUBLE_EQ(uniform.stage_time_s[2], 4.0);  // 2 units + head
}

// The numbers of the infeasible-budget message, counted by hand: four equal
// units of 100 persistent bytes and 10 stash bytes, 2 stages, in flight {2, 1}:
// [1, 3] -> 120 | 330, [2, 2] -> 240 | 220, [3, 1] -> 360 | 120: at least 240.
TEST(PartitionSolver, InfeasibleBudgetGivesTheNumbers) {
  ModelProfile p;
  p.model = "four";
  for (int i = 0; i < 4; ++i) {
    UnitCost u;
    u.param_bytes = 100.0;
    u.stash_none_bytes = 10.0;
    p.units.push_back(u);
  }
  PartitionSetup setup{2, {2, 1}, {policy("none")}, 200.0, {}};
  const std::string msg =
      error_of([&] { pt::solve_partition(p, PartitionObjective::Balanced, setup); });
  EXPECT_THAT(msg, HasSubstr("memory budget 200 bytes"));
  EXPECT_THAT(msg, HasSubstr("smallest achievable largest stage peak 240 bytes"));
  EXPECT_THAT(msg, HasSubstr("on stage 0 of the memory-optimal partition [2, 2]"));
  EXPECT_THAT(msg, HasSubstr("in flight [2, 1]"));
  EXPECT_EQ(error_of([&] { pt::brute_force_partition(p, PartitionObjective::Balanced, setup); }),
            msg);
  EXPECT_THROW(pt::solve_partition(p, PartitionObjective::Balanced, setup), pt::MemoryBudgetError);
  // The memory objective with the same budget fails the same way; at 240 both fit.
  EXPECT_EQ(error_of([&] { pt::solve_partition(p, PartitionObjective::Memory, setup); }), msg);
  setup.memory_budget_bytes = 240.0;
  EXPECT_EQ(pt::solve_partition(p, PartitionObjective::Balanced, setup).units_per_stage,
            (std::vector<int64_t>{2, 2}));
  EXPECT_DOUBLE_EQ(pt::solve_partition(p, PartitionObjective::Memory, setup).max_peak_bytes, 240.0);
}

TEST(PartitionSolver, BadSetupsAreInputErrors) {
  const ModelProfile p = round_profile();
  EXPECT_THAT(error_of([&] {
                pt::solve_partition(p, PartitionObjective::Time, PartitionSetup{5, {1, 1, 1, 1, 1}, {policy("none")}, 0, {}});
              }),
              HasSubstr("5 stages need at least 5 partitionable units (one per stage); the model has 4"));
  EXPECT_THAT(error_of([&] {
                pt::solve_partition(p, PartitionObjective::Time, PartitionSetup{2, {1}, {policy("none")}, 0, {}});
              }),
              HasSubstr("1 in-flight counts for 2 stages"));
  EXPECT_THAT(error_of([&] {
                pt::solve_partition(p, PartitionObjective::Balanced, PartitionSetup{2, {1, 1}, {policy("none")}, 0, {}});
              }),
              HasSubstr("needs a memory budget"));
  ModelProfile middle = p;
  middle.units[2].partitionable = false;
  EXPECT_THAT(error_of([&] {
                pt::solve_partition(middle, PartitionObjective::Time, PartitionSetup{2, {1, 1}, {policy("none")}, 0, {}});
              }),
              HasSubstr("pinned units may only open or close the model"));
  EXPECT_THAT(error_of([&] {
                pt::evaluate_partition(p, {2, 1}, PartitionSetup{2, {1, 1}, {policy("none")}, 0, {}});
              }),
              HasSubstr("adding up to the 4 partitionable units"));
  EXPECT_THAT(error_of([&] {
                pt::evaluate_partition(p, {4, 0}, PartitionSetup{2, {1, 1}, {policy("none")}, 0, {}});
              }),
              HasSubstr("one count >= 1 per stage"));
  // Setup errors are plain input errors, not budget errors.
  try {
    pt::solve_partition(p, PartitionObjective::Balanced, PartitionSetup{5, {1, 1, 1, 1, 1}, {policy("none")}, 1.0, {}});
    ADD_FAILURE() << "no InputError";
  } catch (const pt::MemoryBudgetError&) {
    ADD_FAILURE() << "a setup error reported as a budget error";
  } catch (const InputError&) {
  }
}

// uniform_counts reproduces the runtime's rule (model.cpp's partition_units).
TEST(PartitionSolver, UniformMatchesTheRuntimeRule) {
  for (int64_t units = 1; units <= 40; ++units)
    for (int stages = 1; stages <= units; ++stages)
      ASSERT_EQ(pt::uniform_counts(units, stages), pt::partition_units(units, stages, {}))
          << units << " units, " << stages << " stages";
  EXPECT_EQ(pt::uniform_counts(10, 4), (std::vector<int64_t>{3, 3, 2, 2}));
  const ModelProfile p = round_profile();
  const PartitionResult r = pt::solve_partition(
      p, PartitionObjective::Uniform, PartitionSetup{3, {1, 1, 1}, {policy("none")}, 0, {}});
  EXPECT_EQ(r.units_per_stage, (std::vector<int64_t>{2, 1, 1}));
  EXPECT_THAT(pt::evaluate_partition(p, {1, 1, 2}, PartitionSetup{3, {1, 1, 1}, {policy("none")}, 0, {}}).reason,
              HasSubstr("given [1, 1, 2]: slowest stage 2 at 21 s per micro-batch"));
  EXPECT_THAT(r.reason, HasSubstr("uniform: 4 units over 3 stages, 1 each, the first stage one more"));
}

TEST(PartitionEnumerator, VisitsEveryCompositionOnce) {
  for (int units = 1; units <= 9; ++units)
    for (int stages = 1; stages <= units; ++stages) {
      std::vector<std::vector<int64_t>> seen;
      pt::for_each_partition(units, stages, [&](const std::vector<int64_t>& c) {
        EXPECT_EQ(static_cast<int>(c.size()), stages);
        int64_t total = 0;
        for (int64_t n : c) {
          EXPECT_GE(n, 1);
          total += n;
        }
        EXPECT_EQ(total, units);
        seen.push_back(c);
      });
      // C(units - 1, stages - 1) compositions, strictly increasing (so distinct).
      double expected = 1.0;
      for (int k = 1; k < stages; ++k) expected = expected * (units - k) / k;
      EXPECT_EQ(static_cast<double>(seen.size()), std::round(expected)) << units << " " << stages;
      EXPECT_TRUE(std::is_sorted(seen.begin(), seen.end()));
      EXPECT_EQ(std::adjacent_find(seen.begin(), seen.end()), seen.end());
    }
}

// Large instances: the time optimum against an independent check (greedy
// packing: feasible at the optimum, infeasible just below), well within 1 s.
bool packs_within(const std::vector<double>& times, int stages, double limit) {
  int used = 1;
  double load = 0.0;
  for (double t : times) {
    if (t > limit) return false;
    if (load + t > limit) {
      ++used;
      load = 0.0;
    }
    load += t;
  }
  return used <= stages;
}

// (Its speed is a benchmark: jobs/bench_plan_scale.sh.)
TEST(PartitionSolver, LargeTimeOptimumIsExact) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> time(0.5, 2.0);
  for (int stages : {7, 64, 250, 999}) {
    ModelProfile p;
    std::vector<double> times;
    for (int i = 0; i < 1000; ++i) {
      UnitCost u;
      u.forward_s = time(rng);
      u.param_bytes = 1.0;
      times.push_back(u.forward_s);
      p.units.push_back(u);
    }
    PartitionSetup setup{stages, std::vector<int>(stages, 1), {policy("none")}, 0.0, {}};
    const PartitionResult r = pt::solve_partition(p, PartitionObjective::Time, setup);
    EXPECT_TRUE(packs_within(times, stages, r.max_time_s * (1 + 1e-9)));
    EXPECT_FALSE(packs_within(times, stages, r.max_time_s * (1 - 1e-9)));
    const PartitionResult uniform = pt::solve_partition(p, PartitionObjective::Uniform, setup);
    EXPECT_LE(r.max_time_s, uniform.max_time_s);
    setup.memory_budget_bytes = 1e9;
    EXPECT_EQ(pt::solve_partition(p, PartitionObjective::Balanced, setup).max_time_s, r.max_time_s);
  }
}

}  // namespace
