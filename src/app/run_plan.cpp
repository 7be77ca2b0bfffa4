// run_plan.cpp: the planner inside a training run (app/run_plan.hpp).
#include "pipetrain/app/run_plan.hpp"
#include "pipetrain/app/profile_command.hpp"

#include <chrono>
#include <cstdio>

#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/io/profile_io.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/runtime/profile_reduction.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/speed_probe.hpp"

namespace pt {

namespace {

bool needs_profile(const Deck& deck) {
  const PartitionStrategy s = deck.pipeline.partition_strategy;
  return deck.pipeline.predict || deck.rebalance.enabled || s == PartitionStrategy::Time ||
         s == PartitionStrategy::Memory || s == PartitionStrategy::Balanced;
}

ProfileOptions brief_options(const ComputeResources& compute) {
  return options_on(compute, ProfileOptions::brief());
}

Backend& run_backend(const ComputeResources& compute) {
  return compute.setup.backend ? *compute.setup.backend : cpu_backend();
}

int comm_size(MPI_Comm comm) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  return size;
}

// "; data-parallel reductions at D = 2: ...": the measured reduction of the
// run's D, for the plan line; "" when none.
std::string reductions_text(const ModelProfile& profile, int replicas) {
  const MeasuredReduction* r = reduction_at(profile, replicas);
  return r ? "; data-parallel reductions at " + describe_reduction(*r) : "";
}

}  // namespace

RunPlan prepare_run_plan(const Deck& deck, MPI_Comm comm, MPI_Comm world, const ComputeResources& compute,
                         const ModelProfile* measured) {
  RunPlan plan;
  if (!needs_profile(deck)) return plan;
  set_wait_phase("in the start-up profile");
  Backend& be = run_backend(compute);
  plan.probe_site = {be.device(), compute.device_name, compute.device_shared};
  plan.speed_probe_s.push_back(time_speed_probe(be, comm));
  const auto start = std::chrono::steady_clock::now();
  ProfileOptions options = brief_options(compute);
  // A probe after every pass of the profile: a slow spell inside it spoils
  // the units or the stage chains measured then, and the probes around the
  // profile alone would not see it.
  options.after_pass = [&] { plan.speed_probe_s.push_back(time_speed_probe(be, comm)); };
  options.step_weight_grads = deck.pipeline.weight_grad == WeightGradKind::Step;
  plan.profile = measured ? *measured : profile_model(deck, be, comm, options);
  plan.profile_from_auto = measured != nullptr;
  // D > 1: the replicas' reductions, timed as this grid runs them (auto's
  // profile has them when auto weighed this D).
  const int replicas = static_cast<int>(data_parallel_size(deck));
  if (replicas > 1 && !reduction_at(plan.profile, replicas))
    plan.profile.reductions = time_replica_reductions(deck, be, world, {replicas}, options);
  // A profile without the step's split (auto's, weighing "step" only where the
  // deck left it open) falls back on the pass at a whole batch's rows.
  if (deck.pipeline.weight_grad == WeightGradKind::Step && !has_step_split(plan.profile))
    plan.pass_profile = profile_weight_pass(deck, be, comm, plan.profile, brief_options(compute));
  plan.profile_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  plan.speed_probe_s.push_back(time_speed_probe(be, comm));
  plan.measured = true;
  // Every rank has the same profile, so every rank solves to the same counts.
  plan.partition = choose_partition(deck, plan.profile, comm_size(comm));
  return plan;
}

std::vector<int64_t> starting_partition(const Deck& deck, const RunPlan& plan) {
  if (!plan.measured || deck.pipeline.partition_strategy == PartitionStrategy::Explicit)
    return deck.pipeline.partition;
  return plan.partition.units_per_stage;
}

void predict_run(RunPlan& plan, const Deck& deck, const Trainer& trainer) {
  if (!plan.measured) return;
  std::vector<PlanRecompute> policies;
  for (const RecomputeChoice& c : trainer.recompute_choices())
    policies.push_back(PlanRecompute::parse(c.policy));
  plan.prediction = predict_step(deck, plan.profile, trainer.schedule(),
                                 plan.partition.units_per_stage, policies,
                                 plan.pass_profile ? &*plan.pass_profile : nullptr);
}

void print_run_plan(const RunPlan& plan, const Deck& deck) {
  if (!plan.measured) return;
  std::printf("plan: brief profile of every unit in %.2f s%s (%s; caches %s; %s%s)\n%s",
              plan.profile_seconds, plan.profile_from_auto ? ", pipeline.auto's at this micro-batch size" : "",
              plan.profile.kernels.c_str(), plan.profile.cache.c_str(),
              plan.profile.calibration.c_str(),
              reductions_text(plan.profile, static_cast<int>(data_parallel_size(deck))).c_str(),
              describe_plan(kind_name(deck.pipeline.partition_strategy), plan.partition, plan.prediction).c_str());
}

void record_run_plan(const RunPlan& plan, const Deck& deck, const std::vector<int64_t>& partition,
                     MetricsFile& metrics) {
  metrics.set_attribute("partition", partition);
  metrics.set_attribute("partition_strategy", std::string(kind_name(deck.pipeline.partition_strategy)));
  if (!plan.measured) return;
  metrics.set_attribute("partition_reason", plan.partition.reason);
  metrics.set_attribute("profile_cache", plan.profile.cache);
  metrics.set_attribute("profile_calibration", plan.profile.calibration);
  if (const MeasuredReduction* r = reduction_at(plan.profile, static_cast<int>(data_parallel_size(deck))))
    metrics.set_attribute("profile_reductions", describe_reduction(*r));
  metrics.set_attribute("predicted_step_time_s", plan.prediction.step_time_s);
  metrics.set_attribute("predicted_bubble", plan.prediction.bubble);
  metrics.set_attribute("predicted_stage_peak_bytes", plan.prediction.peak_bytes);
  metrics.set_attribute("predicted_stage_time_s", plan.partition.stage_time_s);
  metrics.set_attribute("predicted_stage_busy_s", plan.prediction.busy_s);
  metrics.set_attribute("predicted_span_s", plan.prediction.span_s_max);
}

void probe_after_steps(RunPlan& plan, MPI_Comm comm, const ComputeResources& compute) {
  if (!plan.measured) return;
  set_wait_phase("in the speed probe after the steps");
  plan.speed_probe_s.push_back(time_speed_probe(run_backend(compute), comm));
}

void report_speed_probes(const RunPlan& plan, MetricsFile& metrics) {
  if (!plan.measured || plan.speed_probe_s.size() < 3) return;
  const std::vector<double>& t = plan.speed_probe_s;
  const double spread = speed_probe_spread(t);
  std::printf("%s\n", speed_probe_line(t, plan.probe_site).c_str());
  metrics.set_attribute("speed_probe_s", t);
  metrics.set_attribute("speed_probe_spread", spread);
  metrics.flush();
}

// pipeline.schedule_times = "measured": the log line, the run's new schedule
// in metrics.h5, and the prediction for it.
void report_schedule_placement(int rank, RunPlan& plan, const Deck& deck, const Trainer& trainer,
                               const StepRecord& rec, MetricsFile& metrics) {
  predict_run(plan, deck, trainer);
  if (rank != 0) return;
  std::string times;
  char part[96];
  for (size_t s = 0; s < trainer.placement_times().size(); ++s) {
    const auto& t = trainer.placement_times()[s];
    std::snprintf(part, sizeof part, "%s[%zu] %.2f/%.2f/%.2f", s ? " " : "", s, t[0] * 1e3,
                  t[1] * 1e3, t[2] * 1e3);
    times += part;
  }
  char why[160] = "";
  if (!trainer.schedule().timed && rec.placed_bubble_timed < rec.placed_bubble_before)
    std::snprintf(why, sizeof why, "; the best timed one, %.2f%%, gains under the %.1f points asked",
                  100.0 * rec.placed_bubble_timed, 100.0 * kMinPlacementGain);
  std::printf("schedule %s: placed again at the measured F/B/W ms per stage %s: %s (bubble at "
              "those times %.1f%% -> %.1f%%%s), from step %lld on\n",
              trainer.schedule().name.c_str(), times.c_str(),
              trainer.schedule().timed ? "a timed placement" : "the unit-time placement is kept",
              100.0 * rec.placed_bubble_before, 100.0 * rec.placed_bubble_after, why,
              static_cast<long long>(trainer.schedule_first_step()));
  metrics.set_attribute("schedule", format_schedule(trainer.schedule()));
  metrics.set_attribute("schedule_first_step", std::vector<int64_t>{trainer.schedule_first_step()});
  std::vector<double> flat;  // (stages, 3): F, B, W seconds
  for (const auto& t : trainer.placement_times()) flat.insert(flat.end(), t.begin(), t.end());
  metrics.set_attribute("schedule_action_times_s", flat);
  if (plan.measured) record_run_plan(plan, deck, trainer.partition(), metrics);
}

void save_run_profile(const RunPlan& plan, const Deck& deck, const std::string& resolved_deck) {
  if (!plan.measured) return;
  char how[96];
  std::snprintf(how, sizeof how, "measured: the brief start-up profile of a training run (%.2f s)",
                plan.profile_seconds);
  write_profile_file(deck.output.dir + "/profile.h5", plan.profile, {resolved_deck, how});
}

}  // namespace pt
