// deck_plan.hpp: the planner applied to a deck: the partition its
// pipeline.partition strategy asks for, and the predicted step of the run
// (docs/planner.md). The solver and the simulator (plan/) work on costs; this
// file turns a deck, its schedule and a measured profile into their inputs.
#pragma once

#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/plan/partition.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

// Per-stage recompute policies of the deck for the planner. "auto" is decided
// at run time by measurement; before that it is planned as `auto_as`.
std::vector<PlanRecompute> deck_recompute_policies(const Deck& deck, int stages,
                                                   const std::string& auto_as = "none");

// The solver's setup for the deck: in-flight counts of its schedule, its
// recompute policies, pipeline.memory_budget_mb.
PartitionSetup partition_setup_for(const Deck& deck, const Schedule& schedule,
                                   const std::vector<PlanRecompute>& policies);
// The same with the budget given in bytes (0 = none).
PartitionSetup partition_setup_for(double memory_budget_bytes, const Schedule& schedule,
                                   const std::vector<PlanRecompute>& policies);

// The partition pipeline.partition asks for: explicit counts and "uniform"
// are evaluated, "time" / "memory" / "balanced" solved. InputError (a
// MemoryBudgetError for an infeasible budget, with the numbers) on failure.
// The schedule on `ranks` ranks fixes the stage count (ranks x stages per rank).
PartitionResult choose_partition(const Deck& deck, const ModelProfile& profile, int ranks);

// W's share of a backward without recompute (SimulationInput): the weight
// products' FLOPs over all of the backward's, as the deck's model family
// declares it (GPT attention products have no weights; an MLP's is one half).
double weight_grad_share(const ModelConfig& model);

// One simulated step of the deck's schedule with `units_per_stage` and the
// policies the run uses. With per-step weight gradients
// (Schedule::step_weight_grads), `pass_profile` (units at the pass's rows:
// a whole replica batch) sets each stage's pass of weight gradients
// (SimulationInput::step_weight_s); null: N per-micro-batch ones.
SimulationResult predict_step(const Deck& deck, const ModelProfile& profile,
                              const Schedule& schedule, const std::vector<int64_t>& units_per_stage,
                              const std::vector<PlanRecompute>& policies,
                              const ModelProfile* pass_profile = nullptr);

// "plan: partition time: ..." and the predicted step and per-stage figures, for the log.
std::string describe_plan(const std::string& strategy, const PartitionResult& partition,
                          const SimulationResult& step);

}  // namespace pt
