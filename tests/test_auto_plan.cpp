// test_auto_plan.cpp: pipeline.auto's choice (app/auto_plan.hpp) on a
// synthetic profile, with no ranks or timings: the request it weighs opens
// exactly the keys the deck leaves to it, the row it takes is the fastest
// that fits (the one `pipetrain plan` names: the same functions), a deck's
// explicit partition is evaluated as given, a budget nothing fits names the
// smallest feasible one, and the deck it runs holds the choice as explicit
// values. The end-to-end run (resolved deck bitwise, resume) is
// tests/cli/test_auto.sh.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "error_of.hpp"
#include "pipetrain/app/auto_plan.hpp"
#include "pipetrain/io/deck_io.hpp"

namespace pt {
namespace {

const char* const kDeck = R"(
[model]
input_dim = 16
hidden_dim = 64
output_dim = 4
depth = 8
[training]
steps = 2
batch_size = 16
[pipeline]
auto = true
)";

Deck deck_with(const std::vector<std::string>& overrides) {
  return parse_deck_text(kDeck, "auto.toml", overrides);
}

// Eight MLP units; unit 5 three times the others' time and the last one's
// activations large, so partitions and recompute differ in time and memory.
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
    const double weight = i == 5 ? 3.0 : 1.0;
    u.forward_s = 1e-4 * weight * (0.2 + r / 16.0);
    u.backward_s = 2.0 * u.forward_s;
    u.recompute_s = u.forward_s;
    u.recompute_selective_s = u.forward_s;
    u.recompute_end_s = u.forward_s;
    u.input_bytes = 256.0 * r;
    u.output_bytes = 256.0 * r;
    u.stash_none_bytes = (i == 7 ? 4096.0 : 512.0) * r;
    u.stash_selective_bytes = u.stash_none_bytes;
    u.param_bytes = u.grad_bytes = 16384.0;
    u.optimizer_bytes = 32768.0;
    p.units.push_back(u);
  }
  p.link = {1e-5, 1e9};
  return p;
}

// As measure_plans ranks: a request with data_parallel 0 over every P x D grid.
PlanTable rank(const PlanRequest& request) {
  const auto profile_for = [](int64_t rows) { return profile_of(rows); };
  const std::vector<LinkCost> links = {profile_of(1).link};
  if (request.data_parallel == 0)
    return rank_grid_plans(profile_for, [&](int) { return links; }, [&](int, int) { return links[0]; },
                           request, request.num_stages);
  return rank_plans(profile_for, links, request);
}

TEST(AutoPlan, OpensWhatTheDeckLeavesOpen) {
  const PlanRequest r = auto_plan_request(deck_with({}), 2, 1e9);
  EXPECT_EQ(r.schedules, (std::vector<std::string>{"gpipe", "1f1b", "zb-h1", "interleaved", "zb-v"}));
  EXPECT_TRUE(r.micro_batch_counts.empty());  // every divisor of the batch
  EXPECT_EQ(r.recompute, (std::vector<std::string>{"none", "full"}));  // an MLP: selective drops nothing
  EXPECT_EQ(r.partitions.size(), 4u);
  EXPECT_TRUE(r.fixed_partition.empty());
}

TEST(AutoPlan, KeepsTheKeysTheDeckSets) {
  const PlanRequest r = auto_plan_request(
      deck_with({"pipeline.schedule=\"gpipe\"", "pipeline.micro_batches=4", "pipeline.recompute=\"full\"",
                 "pipeline.partition=\"memory\""}),
      2, 1e9);
  EXPECT_EQ(r.schedules, std::vector<std::string>{"gpipe"});
  EXPECT_EQ(r.micro_batch_counts, std::vector<int>{4});
  EXPECT_EQ(r.recompute, std::vector<std::string>{"full"});
  EXPECT_EQ(r.partitions, std::vector<PartitionObjective>{PartitionObjective::Memory});
}

// The fastest feasible plan, or a simpler one tied with it (kPlanTieMargin).
TEST(AutoPlan, TakesTheFastestPlanThatFits) {
  const Deck deck = deck_with({});
  PlanRequest r = auto_plan_request(deck, 2, 0.0);
  // A budget between the smallest and the largest peak, so that some fit.
  PlanTable all = rank([&] { PlanRequest big = r; big.memory_budget_bytes = 1e12; return big; }());
  double lo = 1e300, hi = 0.0;
  for (const PlanRow& row : all.rows)
    if (!row.units_per_stage.empty()) lo = std::min(lo, row.max_peak_bytes), hi = std::max(hi, row.max_peak_bytes);
  ASSERT_LT(lo, hi);
  r.memory_budget_bytes = (lo + hi) / 2.0;
  const PlanTable table = rank(r);
  const int chosen = auto_pick(table, deck);
  ASSERT_GE(chosen, 0);
  const PlanRow& best = table.rows[static_cast<size_t>(chosen)];
  EXPECT_TRUE(best.fits);
  EXPECT_EQ(chosen, table.best);  // what `plan` names as its best
  size_t faster_unfit = 0;
  for (const PlanRow& row : table.rows) {
    if (row.step_time_s * (1.0 + kPlanTieMargin) < best.step_time_s) {
      EXPECT_FALSE(row.fits) << plan_choice_text(row) << " is faster by more than the tie margin and fits";
    }
    if (row.step_time_s < best.step_time_s && !row.fits) ++faster_unfit;
  }
  std::printf("  chose %s of %zu plans (%zu faster ones over the budget)\n",
              plan_choice_text(best).c_str(), table.rows.size(), faster_unfit);
}

TEST(AutoPlan, EvaluatesAnExplicitPartitionAsGiven) {
  const Deck deck = deck_with({"pipeline.partition=[3, 5]"});
  const PlanTable table = rank(auto_plan_request(deck, 2, 1e12));
  ASSERT_FALSE(table.rows.empty());
  for (const PlanRow& row : table.rows) {
    EXPECT_TRUE(row.fixed_partition);
    if (row.schedule == "interleaved" || row.schedule == "zb-v") ADD_FAILURE() << "4 stages weighed for a 2-stage partition";
    EXPECT_EQ(row.units_per_stage, (std::vector<int64_t>{3, 5}));
  }
}

TEST(AutoPlan, ABudgetNothingFitsNamesTheSmallestFeasible) {
  const Deck deck = deck_with({"pipeline.memory_budget_mb=0.001"});
  const PlanTable table = rank(auto_plan_request(deck, 2, plan_budget_bytes(deck, 2)));
  double smallest = 1e300;
  for (const PlanRow& row : table.rows)
    if (!row.units_per_stage.empty()) smallest = std::min(smallest, row.max_peak_bytes);
  char mib[48];
  std::snprintf(mib, sizeof mib, "%.1f MiB", smallest / (1024.0 * 1024.0));
  const std::string message = test::error_of([&] { auto_pick(table, deck); });
  EXPECT_NE(message.find("fits the memory budget of 0.0 MiB (pipeline.memory_budget_mb = 0.001"), std::string::npos) << message;
  EXPECT_NE(message.find(std::string("the smallest feasible budget is ") + mib), std::string::npos) << message;
}

TEST(AutoPlan, TheDeckToRunHoldsTheChoice) {
  const Deck deck = deck_with({"pipeline.micro_batches=4"});
  PlanRow row;
  row.schedule = "interleaved";
  row.micro_batches = 4;
  row.recompute = "full";
  row.units_per_stage = {2, 2, 2, 2};
  row.weight_grad = WeightGradKind::Step;
  const Deck chosen = deck_with_plan(deck, row, 2);
  EXPECT_EQ(chosen.pipeline.weight_grad, WeightGradKind::Step);
  // A weight_grad the deck sets is kept.
  EXPECT_EQ(deck_with_plan(deck_with({"pipeline.weight_grad=\"micro_batch\""}), row, 2).pipeline.weight_grad,
            WeightGradKind::MicroBatch);
  EXPECT_TRUE(weight_grad_open(deck));
  EXPECT_FALSE(weight_grad_open(deck_with({"pipeline.weight_grad=\"step\""})));
  EXPECT_FALSE(chosen.pipeline.auto_plan);
  EXPECT_EQ(chosen.pipeline.schedule, ScheduleKind::Interleaved);
  EXPECT_EQ(chosen.pipeline.virtual_stages, 2);
  EXPECT_EQ(chosen.pipeline.recompute, "full");
  EXPECT_EQ(chosen.pipeline.partition_strategy, PartitionStrategy::Explicit);
  EXPECT_EQ(chosen.pipeline.partition, (std::vector<int64_t>{2, 2, 2, 2}));
  EXPECT_EQ(chosen.where("pipeline.schedule"), "pipeline.auto: pipeline.schedule");
  EXPECT_NE(chosen.where("pipeline.micro_batches"), "pipeline.auto: pipeline.micro_batches");
  // The resolved deck repeats it: parsed back, the same values, no auto.
  const Deck again = parse_deck_text(deck_to_toml(chosen), "resolved", {});
  EXPECT_FALSE(again.pipeline.auto_plan);
  EXPECT_EQ(again.pipeline.partition, chosen.pipeline.partition);
  EXPECT_EQ(again.pipeline.schedule, chosen.pipeline.schedule);
}

// The P x D grid is auto's when the deck sets neither data_parallel.replicas
// nor pipeline.stages (and rebalancing, which needs D = 1, is off): the
// request weighs every grid of the ranks, the pick may be any of them, and
// the deck to run writes the chosen D (stages left to follow from it).
TEST(AutoPlan, ChoosesTheGridWhenTheDeckLeavesIt) {
  const Deck open = deck_with({});
  EXPECT_TRUE(auto_chooses_grid(open, 2));
  EXPECT_FALSE(auto_chooses_grid(open, 1));
  EXPECT_FALSE(auto_chooses_grid(deck_with({"data_parallel.replicas=1"}), 2));
  EXPECT_FALSE(auto_chooses_grid(deck_with({"pipeline.stages=2"}), 2));
  EXPECT_FALSE(auto_chooses_grid(deck_with({"rebalance.enabled=true"}), 2));
  EXPECT_FALSE(auto_chooses_grid(deck_with({"pipeline.partition=[3, 5]"}), 2)) << "counts fix the stages";
  EXPECT_TRUE(auto_chooses_grid(deck_with({"pipeline.partition=\"time\""}), 2));
  EXPECT_EQ(auto_plan_request(deck_with({"data_parallel.replicas=1"}), 2, 1e9).data_parallel, 1);
  const PlanRequest r = auto_plan_request(open, 4, 1e12);
  EXPECT_EQ(r.data_parallel, 0);
  const PlanTable table = rank(r);
  std::vector<int> grids;
  for (const PlanRow& row : table.rows)
    if (std::find(grids.begin(), grids.end(), row.data_parallel) == grids.end()) grids.push_back(row.data_parallel);
  std::sort(grids.begin(), grids.end());
  EXPECT_EQ(grids, (std::vector<int>{1, 2, 4})) << "P x D = 4 x 1, 2 x 2 and 1 x 4 weighed";
  const int pick = auto_pick(table, open);
  for (const PlanRow& row : table.rows) {
    if (row.fits) {
      EXPECT_GE(row.step_time_s * (1.0 + kPlanTieMargin), table.rows[static_cast<size_t>(pick)].step_time_s);
    }
  }
  // A choice of 2 x 2 on 4 ranks: D written, stages follow (0 = ranks / D).
  PlanRow row;
  row.schedule = "interleaved";
  row.micro_batches = 2;
  row.recompute = "none";
  row.data_parallel = 2;
  row.num_stages = 2;
  row.units_per_stage = {2, 2, 2, 2};
  const Deck chosen = deck_with_plan(open, row, 4);
  EXPECT_EQ(chosen.data_parallel.replicas, 2);
  EXPECT_EQ(chosen.pipeline.stages, 0);
  EXPECT_EQ(chosen.pipeline.virtual_stages, 2) << "4 stages on a pipeline of 4 / 2 ranks";
  EXPECT_EQ(chosen.where("data_parallel.replicas"), "pipeline.auto: data_parallel.replicas");
  EXPECT_NE(plan_choice_text(row).find("2 data-parallel replicas"), std::string::npos);
  // A deck that sets D keeps it, whatever the row says.
  const Deck fixed = deck_with_plan(deck_with({"data_parallel.replicas=1"}), row, 4);
  EXPECT_EQ(fixed.data_parallel.replicas, 1);
}

// pipeline.schedule_times = "measured" (or "auto" without rebalancing): the
// run places zb-h1 and zb-v again at its measured times, so the plan predicts
// them at the placement it makes at the predicted times. Unit 5's triple
// time leaves the unit-time placement a bubble the timed one fills.
TEST(AutoPlan, PredictsZeroBubbleRowsAtTheRunsPlacement) {
  EXPECT_TRUE(auto_plan_request(deck_with({}), 2, 1e9).timed_placement);
  EXPECT_FALSE(auto_plan_request(deck_with({"pipeline.schedule=\"zb-h1\"", "pipeline.schedule_times=\"unit\""}), 2, 1e9).timed_placement);
  EXPECT_FALSE(auto_plan_request(deck_with({"rebalance.enabled=true"}), 2, 1e9).timed_placement);
  // With the schedule left to auto, the deck may still say how a zero-bubble
  // choice is placed; the resolved deck keeps the key only if auto chose one.
  const Deck unit_times = deck_with({"pipeline.schedule_times=\"unit\""});
  EXPECT_FALSE(auto_plan_request(unit_times, 2, 1e9).timed_placement);
  PlanRow zb_row, plain_row;
  zb_row.schedule = "zb-v";
  plain_row.schedule = "1f1b";
  for (PlanRow* row : {&zb_row, &plain_row}) {
    row->micro_batches = 4;
    row->recompute = "none";
    row->units_per_stage = {2, 2, 2, 2};
  }
  plain_row.units_per_stage = {4, 4};
  EXPECT_NE(deck_to_toml(deck_with_plan(unit_times, zb_row, 2)).find("schedule_times"), std::string::npos);
  EXPECT_EQ(deck_to_toml(deck_with_plan(unit_times, plain_row, 2)).find("schedule_times"), std::string::npos);
  EXPECT_TRUE(auto_plan_request(deck_with({"pipeline.schedule=\"zb-v\"", "pipeline.schedule_times=\"measured\""}), 2, 1e9)
                  .timed_placement);
  PlanRequest timed = auto_plan_request(deck_with({"data_parallel.replicas=1"}), 2, 1e12);
  timed.schedules = {"zb-h1", "zb-v", "1f1b"};
  timed.micro_batch_counts = {4, 8};
  PlanRequest unit = timed;
  unit.timed_placement = false;
  const PlanTable at_times = rank(timed), at_unit = rank(unit);
  const auto key = [](const PlanRow& r) {
    return r.schedule + " " + std::to_string(r.micro_batches) + " " + r.recompute + " " +
           objective_name(r.partition);
  };
  std::map<std::string, const PlanRow*> unit_rows;
  for (const PlanRow& row : at_unit.rows) {
    EXPECT_FALSE(row.timed_placement);
    unit_rows[key(row)] = &row;
  }
  ASSERT_EQ(unit_rows.size(), at_times.rows.size());
  int placed = 0;
  for (const PlanRow& row : at_times.rows) {
    const PlanRow& u = *unit_rows.at(key(row));
    if (!row.timed_placement) {
      EXPECT_EQ(row.step_time_s, u.step_time_s) << key(row) << ": not placed, so predicted as at unit times";
      continue;
    }
    ++placed;
    EXPECT_NE(row.schedule, "1f1b");
    EXPECT_LT(row.step_time_s, u.step_time_s) << key(row);
    EXPECT_LT(row.bubble, u.bubble) << key(row);
    EXPECT_LE(row.max_peak_bytes, u.max_peak_bytes) << key(row) << ": a placement never holds more in flight";
    EXPECT_EQ(row.units_per_stage, u.units_per_stage) << key(row);
  }
  EXPECT_GT(placed, 0) << "no zero-bubble row was predicted at a timed placement";
  std::printf("  %d of %zu rows predicted at the placement at their predicted times\n", placed,
              at_times.rows.size());
}

// weight_grad = "step": a profile whose stage chains timed the step
// (UnitCost::step_input_s, step_weight_s) predicts its step plans from those
// figures, and the profile at a whole batch's rows (the pass profile of a
// profile without them) is never asked for; a split that costs more than
// the fused backward predicts a longer step.
TEST(AutoPlan, StepPlansTakeTheStepFiguresOfTheirProfile) {
  PlanRequest r = auto_plan_request(
      deck_with({"pipeline.schedule=\"1f1b\"", "pipeline.micro_batches=4", "pipeline.recompute=\"none\"",
                 "pipeline.partition=\"uniform\"", "data_parallel.replicas=1"}),
      2, 1e12);
  r.weight_grad = WeightGradKind::Step;
  const auto step_time = [&](double input_share, double weight_share, std::vector<int64_t>* asked) {
    const auto profile_for = [&](int64_t rows) {
      asked->push_back(rows);
      ModelProfile p = profile_of(rows);
      if (input_share > 0.0)
        for (UnitCost& u : p.units) {
          u.step_input_s = input_share * u.backward_s;
          u.step_weight_s = weight_share * u.backward_s;
        }
      return p;
    };
    const PlanTable table = rank_plans(profile_for, {profile_of(1).link}, r);
    EXPECT_EQ(table.rows.size(), 1u);
    EXPECT_EQ(table.rows.at(0).weight_grad, WeightGradKind::Step);
    return table.rows.at(0).step_time_s;
  };
  std::vector<int64_t> asked;
  const double even = step_time(0.55, 0.45, &asked);
  EXPECT_EQ(asked, std::vector<int64_t>{4});  // 16 samples in 4 micro-batches; never 16 rows
  asked.clear();
  const double costly = step_time(0.7, 0.6, &asked);
  EXPECT_GT(costly, even * 1.1);
  asked.clear();
  step_time(0.0, 0.0, &asked);  // no step figures: the pass at the whole batch's rows too
  EXPECT_NE(std::find(asked.begin(), asked.end(), 16), asked.end());
}

TEST(AutoPlan, RefusesWhatItCannotKeep) {
  EXPECT_NE(test::error_of([] {
              auto_plan_request(deck_with({"pipeline.recompute_stages=[\"none\", \"full\"]"}), 2, 1e9);
            }).find("pipeline.recompute_stages: pipeline.auto chooses one recompute policy for every stage"),
            std::string::npos);
  EXPECT_NE(test::error_of([] {
              auto_plan_request(deck_with({"pipeline.recompute=\"auto\"", "pipeline.memory_budget_mb=10"}), 2, 1e9);
            }).find("pipeline.recompute = \"auto\": pipeline.auto chooses the recompute policy itself"),
            std::string::npos);
}

}  // namespace
}  // namespace pt
