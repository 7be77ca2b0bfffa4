// replan.hpp: re-planning during training (pipeline.auto_replan_every with
// pipeline.auto; docs/planner.md "Re-planning during training"), the
// driver's side.
//
// Every k steps the Replanner compares the measured step time (the median
// of the steps since the last check, the first step of a run or plan left
// out) with the planner's prediction of the plan in force; past the margin
// it ranks again what pipeline.auto left open at the measured per-rank
// speeds (plan/replan.hpp) and proposes the best plan when it is predicted
// faster than the plan in force by more than the margin. The profiles are
// pipeline.auto's from the start where it measured them on the run's
// pipeline ranks; the first check measures what is missing (a brief profile
// per micro-batch size, as auto does). World rank 0 decides and broadcasts,
// so every rank of every replica takes the same decision at the same step.
//
// A switch (switch_plan) saves the checkpoint of the step in the new plan's
// deck, rebuilds the run in the new plan and loads that checkpoint into it:
// exactly what a resume from that checkpoint does, so a resume continues in
// the plan in force at its checkpoint (resume_in_checkpoint_plan) and stays
// bitwise equal to the uninterrupted run.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/app/run_state.hpp"
#include "pipetrain/base/deck.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/plan/replan.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

// A check after a step: on world rank 0 the whole decision; on every rank
// whether to switch and the deck of the plan to switch to.
struct ReplanCheck {
  bool checked = false;
  bool forced_speeds = false;   // PIPETRAIN_TEST_REPLAN_SPEED gave the measurement
  int64_t window_steps = 0;     // steps whose medians were compared (world rank 0)
  ReplanDecision decision;      // world rank 0's (change: every rank)
  Deck next;                    // with decision.change: the deck of the new plan
};

class Replanner {
 public:
  // Collective over the world. `written`: the deck as written (pipeline.auto
  // on; rank 0's knows which keys it sets); `grid`: the one the run trains
  // on, which re-planning keeps; `profiles`: pipeline.auto's brief profiles
  // by micro-batch rows when they were measured on `grid`'s pipeline ranks
  // (the same keys on every rank), which the first check does not measure again.
  Replanner(const Deck& written, const ProcessGrid& grid, const ComputeResources& compute,
            std::map<int64_t, ModelProfile> profiles = {});
  // Every step (rank 0 keeps the window); `first_of_plan`: the first step of
  // this process or after a switch, left out (caches and allocators warm up).
  void observe(const StepRecord& rec, bool first_of_plan);
  // Whether a check follows 0-based step `step` (never after the last).
  bool due(int64_t step, int64_t steps) const;
  // Collective over the world: the check after `step` of the plan in force
  // (`running`, its `partition` per stage). The window starts again.
  ReplanCheck check(int64_t step, const Deck& running, const std::vector<int64_t>& partition);
  // The deck of `row` (chosen keys explicit, pipeline.auto off), as a switch writes it.
  Deck deck_of(const PlanRow& row) const;
  // The plan `deck` runs, as the planner names it.
  static RunningPlan running_plan(const Deck& deck, const std::vector<int64_t>& partition);

 private:
  void measure_profiles();  // collective over the pipeline, once
  ModelProfile profile_for(int64_t rows);

  Deck open_;  // the deck as written, key_origin saying which keys auto may choose
  const Deck written_;
  const ProcessGrid& grid_;
  const ComputeResources& compute_;
  int stages_ = 1;  // pipeline ranks
  int world_rank_ = 0;
  PlanRequest request_;
  bool both_weight_grads_ = false;
  std::map<int64_t, ModelProfile> profiles_;  // by micro-batch rows
  bool measured_ = false;  // the first check measured what profiles_ lacked
  std::vector<LinkCost> links_;  // empty: each plan over its profile's own link
  std::vector<double> step_times_;                 // world rank 0: the window
  std::vector<std::vector<double>> rank_compute_;  // (steps, ranks)
};

// Collective over the world: the switch after 0-based step `step` to `next`.
// Saves the checkpoint of step + 1 steps with `next`'s resolved deck (rank 0
// prints its line), builds the run in the new plan, loads that checkpoint
// into it and keeps the trace events so far; a REPLAN trace event on every
// rank. Returns the new trainer (the old one is released first).
std::unique_ptr<Trainer> switch_plan(const World& w, const ProcessGrid& grid, const ComputeSetup& setup,
                                     std::unique_ptr<Trainer> trainer, const Deck& next,
                                     int64_t step, MetricsFile& metrics);

// Collective over the world, after a resume from `loaded` (its directory,
// and on rank 0 its stored deck): when that deck runs another plan than
// `running` (a switch came before the checkpoint), the run is rebuilt in
// the checkpoint's plan and the checkpoint loaded again, and `running`
// becomes its deck. Returns the trainer to continue with.
std::unique_ptr<Trainer> resume_in_checkpoint_plan(const World& w, const ProcessGrid& grid,
                                                   const ComputeSetup& setup, const Replanner& replanner,
                                                   std::unique_ptr<Trainer> trainer,
                                                   const CheckpointRead& loaded, int64_t first_step,
                                                   Deck& running);

// "1f1b N=4 recompute none, partition [4, 4]": the plan a deck runs.
std::string running_plan_text(const RunningPlan& plan);

}  // namespace pt
