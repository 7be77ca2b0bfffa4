// deck_plan.cpp: a deck's partition and predicted step from a profile
// (runtime/deck_plan.hpp).
#include "pipetrain/runtime/deck_plan.hpp"

#include <cstdio>

#include "pipetrain/model/family.hpp"
#include "pipetrain/plan/alternatives.hpp"
#include "pipetrain/runtime/run_builder.hpp"

namespace pt {

std::vector<PlanRecompute> deck_recompute_policies(const Deck& deck, int stages,
                                                   const std::string& auto_as) {
  std::vector<PlanRecompute> policies;
  for (int s = 0; s < stages; ++s) {
    const auto& per_stage = deck.pipeline.recompute_stages;
    std::string setting = per_stage.empty() ? deck.pipeline.recompute
                                            : per_stage[static_cast<size_t>(s)];
    policies.push_back(PlanRecompute::parse(is_auto_recompute(setting) ? auto_as : setting));
  }
  return policies;
}

PartitionSetup partition_setup_for(const Deck& deck, const Schedule& schedule,
                                   const std::vector<PlanRecompute>& policies) {
  return partition_setup_for(deck.pipeline.memory_budget_mb * 1048576.0, schedule, policies);
}

PartitionSetup partition_setup_for(double memory_budget_bytes, const Schedule& schedule,
                                   const std::vector<PlanRecompute>& policies) {
  PartitionSetup setup;
  setup.num_stages = schedule.num_stages;
  setup.in_flight = schedule_in_flight(schedule);
  setup.recompute = policies;
  setup.memory_budget_bytes = memory_budget_bytes;
  return setup;
}

// The profile with the deck's asynchronous-checkpoint staging added to each
// unit's persistent memory (its parameters and optimizer state once more).
namespace {

ModelProfile with_checkpoint_staging(const Deck& deck, ModelProfile profile) {
  if (!deck.output.checkpoint_async) return profile;
  for (UnitCost& u : profile.units) u.checkpoint_staging_bytes = u.param_bytes + u.optimizer_bytes;
  return profile;
}

}  // namespace

PartitionResult choose_partition(const Deck& deck, const ModelProfile& deck_profile, int ranks) {
  const ModelProfile profile = with_checkpoint_staging(deck, deck_profile);
  const Schedule schedule = schedule_for_deck(deck, ranks);
  const int stages = schedule.num_stages;
  const PartitionSetup setup =
      partition_setup_for(deck, schedule, deck_recompute_policies(deck, stages));
  const PartitionStrategy strategy = deck.pipeline.partition_strategy;
  if (strategy == PartitionStrategy::Explicit)
    return evaluate_partition(profile, deck.pipeline.partition, setup);
  if (strategy == PartitionStrategy::Uniform) {
    const UnitLayout layout = unit_layout(profile);
    return evaluate_partition(profile,
                              uniform_counts(static_cast<int64_t>(layout.partitionable), stages),
                              setup);
  }
  if (strategy == PartitionStrategy::Balanced && setup.memory_budget_bytes <= 0.0)
    throw InputError(deck.where("pipeline.partition") + " = \"balanced\" needs a memory budget: " +
                     "set pipeline.memory_budget_mb (MiB per stage) > 0");
  try {
    return solve_partition(profile, objective_of(strategy), setup);
  } catch (const MemoryBudgetError& e) {
    throw MemoryBudgetError(deck.where("pipeline.memory_budget_mb") + ": " + e.what());
  }
}

// W's share of a backward without recompute: the family's planner cost.
double weight_grad_share(const ModelConfig& m) { return model_family(m).weight_grad_share(m); }

SimulationResult predict_step(const Deck& deck, const ModelProfile& profile,
                              const Schedule& schedule, const std::vector<int64_t>& units_per_stage,
                              const std::vector<PlanRecompute>& policies,
                              const ModelProfile* pass_profile) {
  SimulationInput input;
  input.stages = stage_costs(with_checkpoint_staging(deck, profile), units_per_stage, policies);
  input.links = {profile.link};
  input.step_overhead_s = profile.step_overhead_s;
  input.batch_size = deck.training.batch_size;
  input.record_events = false;
  input.weight_grad_share = weight_grad_share(deck.model);
  input.receiver_progress = receiver_driven_links(profile);
  if (schedule.step_weight_grads)
    input.step_weight_s = step_pass_seconds(profile, pass_profile, input.weight_grad_share, units_per_stage,
                                            policies, schedule.num_micro_batches, input.stages);
  SimulationResult step = simulate_schedule(schedule, input);
  // Data parallelism: each stage's reduction after its span, over the link
  // its measured reductions fit (else the pipeline's measured link).
  const int replicas = static_cast<int>(data_parallel_size(deck));
  const int slots =
      deck.data_parallel.reduction == DpReductionKind::Ordered ? schedule.num_micro_batches : 1;
  add_replica_reductions(step, profile, units_per_stage, replicas, slots,
                         replica_link_of(profile, replicas, profile.link));
  return step;
}

std::string describe_plan(const std::string& strategy, const PartitionResult& partition,
                          const SimulationResult& step) {
  std::string text = "plan: partition " + strategy + ": " + partition.reason + "\n";
  char line[256];
  std::snprintf(line, sizeof line,
                "plan: predicted step %.2f ms, bubble %.1f%%, %.1f samples/s; per stage:",
                step.step_time_s * 1e3, 100.0 * step.bubble, step.throughput_samples_per_s);
  text += line;
  for (size_t s = 0; s < partition.stage_time_s.size(); ++s) {
    std::snprintf(line, sizeof line, " [%zu] %.3f ms/micro-batch, peak %.2f MiB", s,
                  partition.stage_time_s[s] * 1e3, step.peak_bytes[s] / 1048576.0);
    text += line;
  }
  return text + "\n";
}

}  // namespace pt
