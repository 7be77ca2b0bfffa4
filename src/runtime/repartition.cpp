// repartition.cpp: the Trainer's side of dynamic rebalancing -- the checks
// after a step, and moving units between running stages (docs/rebalance.md).
//
// A move rebuilds this rank's stage for the new partition (rebuild_stage):
// the layers of units that stay are kept as they are (values and optimizer
// state untouched, no copy), only the layers of arriving units are
// constructed, on the stage's device and without initial values, and the
// optimizer takes the new parameter list (state for the arriving ones,
// unfilled). A unit that changes stage is then sent by its old rank and
// received by its new one, tensor by tensor (param_state: value, then the
// optimizer state), all posted at once and each waited for with a timed
// wait naming the move. The executor and the gradient reducer are then
// rebuilt over the new stage by the constructor's factory (build_engine); the transport, data and schedule do not
// depend on the partition and stay.
#include <chrono>
#include <cstdio>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "pipetrain/runtime/unit_mover.hpp"

namespace pt {

namespace {

// "auto" recomputation anywhere: every rank decides again after a move.
bool uses_auto_recompute(const Deck& deck) { return any_auto_recompute(deck.pipeline); }

}  // namespace

void Trainer::enable_rebalance(const ModelProfile& profile) {
  std::vector<PlanRecompute> policies;
  for (const RecomputeChoice& c : recompute_) policies.push_back(PlanRecompute::parse(c.policy));
  rebalancer_ = std::make_unique<Rebalancer>(deck_, profile,
                                             partition_setup_for(deck_, schedule_, policies));
}

RebalanceCheck Trainer::rebalance_after(int64_t step) {
  RebalanceCheck check;
  const std::vector<int64_t> forced = forced_rebalance(step);
  if (!forced.empty()) {
    check.checked = check.forced = true;
    check.decision.from = partition_;
    check.decision.to = forced;
    check.decision.move = true;
    check.decision.reason = fault_hook_info(FaultHook::Rebalance).variable;
  } else if (rebalancer_ && rebalancer_->due(step)) {
    check.checked = true;
    check.window_steps = rebalancer_->window_steps();
    check.decision = rebalancer_->decide(partition_, comm_);
  } else {
    return check;
  }
  if (!check.decision.move) return check;
  check.move = repartition(check.decision.to, step);
  if (rebalancer_) rebalancer_->record_move(check.decision);
  return check;
}

MoveReport Trainer::repartition(const std::vector<int64_t>& counts, int64_t step) {
  const std::vector<int64_t> to = partition_units(model_units(deck_.model), size_, counts);
  MoveReport report;
  report.from = partition_;
  report.to = to;
  if (to == partition_) return report;
  const auto start = std::chrono::steady_clock::now();
  const double trace_start = tracer_->now_us();
  set_wait_phase("in the rebalancing move after step " + std::to_string(step) + " (partition " +
                 counts_text(partition_) + " -> " + counts_text(to) + ")");
  fault_point("rebalance", step);
  PT_CHECK(stages_.size() == 1, "rebalancing needs one stage per rank (checked with the deck)");
  StageModel& current = stages_.front();
  executor_.reset();  // both hold the stage's layers
  reducer_.reset();
  be_.release_cached_memory();  // the move's tensors have new sizes; nothing is in flight
  DefaultDeviceGuard on_device(be_.device());  // arriving layers are made there
  StageModel next = rebuild_stage(deck_.model, to, current);  // `current` keeps the leaving layers
  optimizer_->replace_params(next.params());
  const MoveTotals moved = exchange_units(current, next, partition_, to, model_units(deck_.model), comm_);
  current = std::move(next);  // frees the layers that left
  partition_ = to;
  if (uses_auto_recompute(deck_)) policies_ = {resolve_recompute_one()};
  build_engine();  // as the constructor built them, over the new stage
  double totals[2] = {static_cast<double>(moved.tensors_sent), moved.bytes_sent};
  timed_allreduce(MPI_IN_PLACE, totals, 2, MPI_DOUBLE, MPI_SUM, comm_,
                  "the rebalancing move's totals all-reduce");
  report.tensors_sent = static_cast<int64_t>(totals[0]);
  report.bytes_sent = totals[1];
  tracer_->record(EventKind::Rebalance, step, current.stage, -1, trace_start, tracer_->now_us());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace pt
