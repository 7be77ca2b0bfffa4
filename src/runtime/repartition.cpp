// repartition.cpp: dynamic rebalancing of a running pipeline -- the
// Trainer's checks after a step, and moving units between running stages
// (repartition_run; docs/rebalance.md).
//
// A move rebuilds this rank's stage for the new partition (rebuild_stage):
// the layers of units that stay are kept as they are (values and optimizer
// state untouched, no copy), only the layers of arriving units are
// constructed, on the stage's device and without initial values, and the
// optimizer takes the new parameter list (state for the arriving ones,
// unfilled). A unit that changes stage is then sent by its old rank and
// received by its new one (unit_mover.hpp). "auto" recomputation is decided
// again for the new stage (recompute_choice.hpp), and the executor and the
// gradient reducer are rebuilt over it by the run's engine factory
// (build_engine); the transport, data and schedule do not depend on the
// partition and stay.
#include <chrono>
#include <cstdio>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "pipetrain/runtime/unit_mover.hpp"

namespace pt {

void Trainer::enable_rebalance(const ModelProfile& profile) {
  std::vector<PlanRecompute> policies;
  for (const RecomputeChoice& c : run_->recompute.choices) policies.push_back(PlanRecompute::parse(c.policy));
  rebalancer_ = std::make_unique<Rebalancer>(
      rebalance_config_, profile,
      partition_setup_for(rebalance_config_.memory_budget_bytes, run_->schedules.train, policies));
}

RebalanceCheck Trainer::rebalance_after(int64_t step) {
  RebalanceCheck check;
  const std::vector<int64_t> forced = forced_rebalance(step);
  if (!forced.empty()) {
    check.checked = check.forced = true;
    check.decision.from = run_->partition;
    check.decision.to = forced;
    check.decision.move = true;
    check.decision.reason = fault_hook_info(FaultHook::Rebalance).variable;
  } else if (rebalancer_ && rebalancer_->due(step)) {
    check.checked = true;
    check.window_steps = rebalancer_->window_steps();
    check.decision = rebalancer_->decide(run_->partition, run_->place.pipeline);
  } else {
    return check;
  }
  if (!check.decision.move) return check;
  check.move = repartition(check.decision.to, step);
  if (rebalancer_) rebalancer_->record_move(check.decision);
  return check;
}

MoveReport Trainer::repartition(const std::vector<int64_t>& counts, int64_t step) {
  return repartition_run(*run_, counts, step);
}

namespace {

// This rank's one stage rebuilt for `to` and the units that change stage
// exchanged; the engine was released (it holds the stage's layers).
MoveTotals move_stage(RunParts& run, const std::vector<int64_t>& to) {
  StageModel& current = run.stages.front();
  // `current` keeps the leaving layers; the arriving ones are placed on the backend's device.
  StageModel next = rebuild_stage(run.settings.model, to, current, run.backend.device());
  run.optimizer->replace_params(next.params());
  const MoveTotals moved = exchange_units(current, next, run.partition, to,
                                          model_units(run.settings.model), run.place.pipeline);
  current = std::move(next);  // frees the layers that left
  run.partition = to;
  make_run_gemm_copies(run);  // for the arriving units, filled now
  return moved;
}

}  // namespace

MoveReport repartition_run(RunParts& run, const std::vector<int64_t>& counts, int64_t step) {
  const std::vector<int64_t> to = partition_units(model_units(run.settings.model), run.place.ranks, counts);
  MoveReport report;
  report.from = run.partition;
  report.to = to;
  if (to == run.partition) return report;
  const auto start = std::chrono::steady_clock::now();
  const double trace_start = run.tracer->now_us();
  set_wait_phase("in the rebalancing move after step " + std::to_string(step) + " (partition " +
                 counts_text(run.partition) + " -> " + counts_text(to) + ")");
  fault_point("rebalance", step);
  PT_CHECK(run.stages.size() == 1, "rebalancing needs one stage per rank (checked with the deck)");
  run.engine.executor.reset();  // both hold the stage's layers
  run.engine.reducer.reset();
  run.backend.release_cached_memory();  // the move's tensors have new sizes; nothing is in flight
  const MoveTotals moved = move_stage(run, to);
  if (run.settings.recompute.any_auto)
    run.recompute = choose_recompute(run.settings.recompute, probe_site_of(run), run.place.pipeline);
  run.engine = build_engine(run);  // as build_run built it, over the new stage
  double totals[2] = {static_cast<double>(moved.tensors_sent), moved.bytes_sent};
  timed_allreduce(MPI_IN_PLACE, totals, 2, MPI_DOUBLE, MPI_SUM, run.place.pipeline,
                  "the rebalancing move's totals all-reduce");
  report.tensors_sent = static_cast<int64_t>(totals[0]);
  report.bytes_sent = totals[1];
  run.tracer->record(EventKind::Rebalance, step, run.stages.front().stage, -1, trace_start,
                     run.tracer->now_us());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace pt
