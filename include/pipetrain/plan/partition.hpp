// partition.hpp: contiguous partitions of a model's units into pipeline
// stages, solved exactly for one objective.
//
// A partition gives each stage a contiguous run of partitionable units (at
// least one); pinned units (UnitCost::partitionable = false) join the first
// stage (those before the partitionable ones, e.g. the GPT embedding) or the
// last (those after, e.g. the head). Counts are of partitionable units only,
// as in pipeline.partition.
//
// Objectives:
//   uniform   as even as possible by count, the remainder to the earliest
//             stages (the runtime's default, partition_units in model.cpp)
//   time      minimise the slowest stage's F + B (+ recompute) per micro-batch
//   memory    minimise the largest stage peak (plan/stage_cost.hpp)
//   balanced  minimise the slowest stage subject to every stage peak <= the
//             memory budget
// The solver is a dynamic programme over stage boundaries with exact pruning
// (docs/planner.md, "The partition solver"); for_each_partition enumerates
// every partition for brute-force checks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/plan/cost.hpp"
#include "pipetrain/plan/stage_cost.hpp"

namespace pt {

enum class PartitionObjective { Uniform, Time, Memory, Balanced };

// No partition meets the memory budget (an InputError whose message gives
// the numbers); a separate type so that planners can mark such plans
// infeasible and still stop on other input errors.
class MemoryBudgetError : public InputError {
 public:
  using InputError::InputError;
};

// The deck's strategy of an objective and back (an explicit partition has
// none); the names are PartitionStrategy's (base/deck_kinds.hpp).
PartitionStrategy strategy_of(PartitionObjective objective);
PartitionObjective objective_of(PartitionStrategy strategy);
const char* objective_name(PartitionObjective objective);  // "uniform", ...
// "uniform" | "time" | "memory" | "balanced"; else InputError.
PartitionObjective parse_partition_objective(const std::string& text);

struct PartitionSetup {
  int num_stages = 1;
  // Peak micro-batches in flight per stage, from the schedule
  // (validate_schedule's or schedule_in_flight's peak_in_flight).
  std::vector<int> in_flight;
  // One policy per stage, or one for all stages.
  std::vector<PlanRecompute> recompute{PlanRecompute{}};
  // balanced: required (> 0); memory: optional, 0 = no budget; others ignore it.
  double memory_budget_bytes = 0.0;
  // Per stage, a factor on the time of whatever units it holds (a stage on a
  // rank that computes k times slower than the profile: k); empty = 1 on
  // every stage. Dynamic rebalancing (plan/rebalance.hpp) measures it.
  std::vector<double> stage_time_scale;
};

struct PartitionResult {
  PartitionObjective objective = PartitionObjective::Uniform;
  std::vector<int64_t> units_per_stage;  // partitionable units per stage
  std::vector<StageCost> stages;
  std::vector<double> stage_time_s;      // F + B (+ recompute) per micro-batch
  std::vector<double> stage_peak_bytes;  // with the setup's in-flight counts
  double max_time_s = 0.0;
  double max_peak_bytes = 0.0;
  int slowest_stage = 0;
  int largest_stage = 0;  // by peak bytes
  std::string reason;     // one human-readable line
};

// The optimum for `objective`. InputError: fewer partitionable units than
// stages, setup vectors of the wrong length, a balanced objective without a
// budget. MemoryBudgetError: a budget no partition meets (balanced, or
// memory with a budget); the message gives the smallest achievable largest
// stage peak, its stage, the memory-optimal partition and the budget.
PartitionResult solve_partition(const ModelProfile& profile, PartitionObjective objective,
                                const PartitionSetup& setup);

// The costs of a given partition (no optimisation); reason says what it is.
PartitionResult evaluate_partition(const ModelProfile& profile,
                                   const std::vector<int64_t>& units_per_stage,
                                   const PartitionSetup& setup,
                                   PartitionObjective objective = PartitionObjective::Uniform);

// The value `objective` minimises for a result: max_time_s (time, balanced;
// +infinity for balanced when over the budget), max_peak_bytes (memory).
double objective_value(const PartitionResult& result, PartitionObjective objective,
                       const PartitionSetup& setup);

// The runtime's default counts: units / stages each, the first units % stages one more.
std::vector<int64_t> uniform_counts(int64_t units, int num_stages);

// Calls visit with every partition of `units` into `num_stages` non-empty
// contiguous runs (C(units - 1, num_stages - 1) of them), in lexicographic order.
void for_each_partition(int64_t units, int num_stages,
                        const std::function<void(const std::vector<int64_t>&)>& visit);

// The best of all partitions by enumeration, for tests and comparisons.
// Same contract as solve_partition; only for small unit counts.
PartitionResult brute_force_partition(const ModelProfile& profile, PartitionObjective objective,
                                      const PartitionSetup& setup);

}  // namespace pt
