// trainer.hpp: one rank's part of pipeline-parallel training, as one object.
//
// Trainer is a facade over the parts a run is split into: what builds the
// run (run_builder.hpp: build_run builds every part once from the deck's
// immutable RunSettings, build_engine the executor and gradient reducer),
// what runs a step (training_step.hpp: loss, norm, clipping, reductions,
// the optimizer step, evaluation), what decides each stage's recomputation
// (recompute_choice.hpp), what moves units (repartition.cpp over
// unit_mover.hpp, rebuilding the engine through build_engine) and what
// re-places schedules (schedule_placement.hpp). It keeps the deck's
// RebalanceConfig for the rebalancer, not the deck, and owns the run's parts.
#pragma once

#include <mpi.h>

#include <memory>
#include <optional>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/runtime/blas_threads.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "pipetrain/runtime/rebalance.hpp"
#include "pipetrain/runtime/run_builder.hpp"
#include "pipetrain/runtime/sampler.hpp"
#include "pipetrain/runtime/training_step.hpp"

namespace pt {

class Trainer {
 public:
  // `comm` holds the schedule's ranks (stages / stages per rank).
  Trainer(const Deck& deck, MPI_Comm comm, ComputeSetup setup = {});
  // One pipeline of a P x D grid (data_parallel_size(deck) == grid's D):
  // collective over the grid's world. The grid must outlive the trainer.
  Trainer(const Deck& deck, const ProcessGrid& grid, ComputeSetup setup = {});
  // The same, starting from `partition` (units per stage, as
  // pipeline.partition; empty = uniform) instead of the deck's: the driver's
  // partition resolved from a named strategy.
  Trainer(const Deck& deck, const std::vector<int64_t>& partition, const ProcessGrid& grid,
          ComputeSetup setup = {});
  ~Trainer();
  StepRecord train_step(int64_t step);  // collective over comm
  // Mean loss over training.eval_batches held-out batches (forward only).
  double evaluate();                    // collective over comm
  // The data's best achievable loss, when known (Markov data).
  std::optional<LossFloor> loss_floor() const { return run_->data->loss_floor(); }
  // Collective over comm: a GPT's text generation from `prompt` with the
  // weights as they are now, forward only (runtime/sampler.hpp); ids drawn
  // from 0..vocab-1. Changes nothing that training reads: no parameter,
  // optimizer state, data position, counter or random stream of training.
  std::vector<int32_t> sample(const std::vector<int32_t>& prompt, const SampleSettings& settings,
                              int64_t vocab);
  // Every parameter in global order, on rank 0 of comm (empty elsewhere).
  std::vector<float> gather_parameters();

  const Schedule& schedule() const { return run_->schedules.train; }
  // The first step run with schedule() (0 unless pipeline.schedule_times =
  // "measured" placed it again), and the (stages) F, B, W seconds it was
  // placed at (empty before).
  int64_t schedule_first_step() const { return run_->schedules.first_step; }
  const StageActionTimes& placement_times() const { return run_->schedules.placed_at; }
  // A run rebuilt in a new plan at a re-planning switch runs schedule() from
  // 0-based step `step` on (what schedule_first_step() then reports).
  void runs_schedule_from(int64_t step) { run_->schedules.first_step = step; }
  const ScheduleReport& schedule_report() const { return run_->schedules.report; }
  // This rank's first stage, and all of them (ascending).
  const StageModel& stage() const { return run_->stages.front(); }
  const std::vector<StageModel>& stages() const { return run_->stages; }
  // This rank's parameters, its stages in order (values and optimizer
  // state), for checkpoints.
  std::vector<Param*> params() { return run_->params(); }
  // Optimizer updates applied (AdamW's bias-correction count) and the fp16
  // loss scaler (null unless training.precision = "fp16"), for checkpoints.
  Optimizer& optimizer() { return *run_->optimizer; }
  LossScaler* loss_scaler() { return run_->scaler.get(); }
  // Collective (output.trace): every rank's events on rank 0, on rank 0's clock.
  std::vector<std::vector<TraceEvent>> gather_trace();
  const ClockAlignment& clock_alignment() const { return run_->clocks; }
  // This rank's event recorder (records nothing unless output.trace), for
  // events outside a step: an asynchronous checkpoint's staging and waits.
  Tracer& tracer() { return *run_->tracer; }
  // Every stage's recompute policy, on every rank (stage order).
  const std::vector<RecomputeChoice>& recompute_choices() const {
    return run_->recompute.choices;
  }
  int rank() const { return run_->place.rank; }  // in the pipeline
  int replica() const { return run_->place.replica; }
  int replicas() const { return run_->place.replica_count; }
  // The data-parallel reduction (its buckets); inactive at D = 1 with "replica".
  const GradientReducer& reducer() const { return *run_->engine.reducer; }

  // Dynamic rebalancing (docs/rebalance.md; one stage per rank). Decisions
  // scale the unit times of `profile` (the run's start-up profile) by each
  // stage's measured speed.
  void enable_rebalance(const ModelProfile& profile);
  bool rebalancing() const { return rebalancer_ != nullptr; }
  // Collective, after step `step`: a check when one is due (or the test hook
  // PIPETRAIN_TEST_REBALANCE asks for a move), and the move it decides.
  RebalanceCheck rebalance_after(int64_t step);
  // Collective: the stages hold `counts` units from now on. Each unit that
  // changes stage is sent by its old rank to its new one (values and
  // optimizer state); nothing else changes, so training continues bitwise
  // as it would have. Returns what moved.
  MoveReport repartition(const std::vector<int64_t>& counts, int64_t step);
  // Units per stage in use now.
  const std::vector<int64_t>& partition() const { return run_->partition; }

 private:
  const RebalanceConfig rebalance_config_;  // the deck's, for enable_rebalance
  std::unique_ptr<RunParts> run_;  // everything build_run built
  std::unique_ptr<Rebalancer> rebalancer_;  // null unless enable_rebalance
};

}  // namespace pt
