// run_plan.hpp: the planner inside a training run. Before the Trainer is
// built, a brief profile of the deck's model (runtime/profiler) is measured
// when the deck asks for a profile-based partition or a prediction
// (pipeline.predict), and a named pipeline.partition strategy becomes
// per-stage counts. After it is built, the run's step is simulated with its
// schedule and recompute choices, so that every step line and metrics.h5
// carry the prediction beside the measurement (docs/planner.md).
#pragma once

#include <mpi.h>

#include <optional>
#include <string>
#include <vector>

#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/speed_probe.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

class MetricsFile;

struct RunPlan {
  bool measured = false;         // a profile was measured (else nothing below is set)
  ModelProfile profile;
  // pipeline.weight_grad = "step": the units at a whole replica batch's rows
  // (the rows of the pass of weight gradients), for its time.
  std::optional<ModelProfile> pass_profile;
  PartitionResult partition;     // the run's partition and its per-stage costs
  SimulationResult prediction;   // one simulated step of the run
  double profile_seconds = 0.0;  // wall time of the brief profile
  bool profile_from_auto = false;  // pipeline.auto's profile of the chosen micro-batch size, not measured again
  // The speed probe (runtime/speed_probe.hpp) before the profile, after each
  // of its passes, after it, then after the steps, in that order: how steady
  // the host was between them.
  std::vector<double> speed_probe_s;
  SpeedProbeSite probe_site;  // the device the probes ran on, for their log line
};

// Collective over comm. Profiles and partitions when the deck asks for it
// (plan.partition: a named strategy's counts, the same on every rank).
// Throws InputError (an infeasible memory budget with its numbers, a
// balanced partition without a budget).
// `measured`: pipeline.auto's brief profile at the run's micro-batch size on
// the same pipeline ranks (taken instead of measuring the same thing again).
// `world`: the whole grid; at D > 1 the replicas' reductions are timed on it
// (time_replica_reductions) unless `measured` has them.
RunPlan prepare_run_plan(const Deck& deck, MPI_Comm comm, MPI_Comm world, const ComputeResources& compute,
                         const ModelProfile* measured = nullptr);

// The units per stage the run starts with: the deck's explicit counts, a
// named strategy's from the plan, else the deck's (empty: uniform).
std::vector<int64_t> starting_partition(const Deck& deck, const RunPlan& plan);

// The run's predicted step (after the Trainer resolved "auto" recomputation).
void predict_run(RunPlan& plan, const Deck& deck, const Trainer& trainer);

// Rank 0: the plan's lines for the log, and its attributes in metrics.h5.
void print_run_plan(const RunPlan& plan, const Deck& deck);
// `partition`: the units per stage the run uses (Trainer::partition).
void record_run_plan(const RunPlan& plan, const Deck& deck, const std::vector<int64_t>& partition,
                     MetricsFile& metrics);
// Collective over comm, after the steps: the last speed probe.
void probe_after_steps(RunPlan& plan, MPI_Comm comm, const ComputeResources& compute);
// Rank 0: the probes' line for the log, and their attributes in metrics.h5
// (speed_probe_s, speed_probe_spread).
void report_speed_probes(const RunPlan& plan, MetricsFile& metrics);

// pipeline.schedule_times = "measured", after the step the trainer placed
// its schedule again (rec.schedule_placed): the prediction for the placed
// schedule; on rank 0 the log line and metrics.h5's schedule,
// schedule_first_step and schedule_action_times_s (and the new prediction).
void report_schedule_placement(int rank, RunPlan& plan, const Deck& deck, const Trainer& trainer,
                               const StepRecord& rec, MetricsFile& metrics);

// Rank 0: the brief profile as <output.dir>/profile.h5 (when one was
// measured), so that `pipetrain plan DECK --profile` repeats the run's
// prediction without measuring.
void save_run_profile(const RunPlan& plan, const Deck& deck, const std::string& resolved_deck);

}  // namespace pt
