// repartition.cpp: the Trainer's side of dynamic rebalancing -- the checks
// after a step, and moving units between running stages (docs/rebalance.md).
//
// A move builds this rank's stage for the new partition (model construction,
// as at start-up), a fresh optimizer over it, and fills both from the old
// stage: a unit that stays on this rank hands its tensors over locally; one
// that changes stage is sent by its old rank and received by its new one,
// tensor by tensor (param_state: value, then the optimizer state), all
// posted at once and each waited for with a timed wait naming the move.
// The executor is then rebuilt over the new stage; the transport, data and
// schedule do not depend on the partition and stay.
#include <chrono>
#include <cstdio>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

namespace {

constexpr int kMoveTag = 30000;  // below MPI's guaranteed tag bound (32767)

// The stage that holds unit `u` under `counts`.
int owner_of(const std::vector<int64_t>& counts, int64_t u) {
  int64_t end = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    end += counts[s];
    if (u < end) return static_cast<int>(s);
  }
  PT_FAIL("unit " + std::to_string(u) + " beyond the partition");
}

std::string counts_text(const std::vector<int64_t>& counts) {
  std::string text = "[";
  for (size_t i = 0; i < counts.size(); ++i) text += (i ? ", " : "") + std::to_string(counts[i]);
  return text + "]";
}

// "auto" recomputation anywhere: every rank decides again after a move.
bool uses_auto_recompute(const Deck& deck) {
  bool any = deck.pipeline.recompute == "auto";
  for (const std::string& s : deck.pipeline.recompute_stages) any = any || s == "auto";
  return any;
}

}  // namespace

double Trainer::slowdown_at(int64_t step) const {
  const PipelineConfig& p = deck_.pipeline;
  return p.slowdown_rank == rank_ && step >= p.slowdown_from_step ? p.slowdown_factor : 1.0;
}

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
    check.decision.reason = "PIPETRAIN_TEST_REBALANCE";
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
  StageModel next = build_stage(deck_.model, to, rank_);
  move_parameters(next, be_.device());
  DefaultDeviceGuard on_device(be_.device());
  auto optimizer = std::make_unique<Optimizer>(deck_.training, next.params());
  optimizer->set_updates(optimizer_->updates());
  const auto [tensors, bytes] = exchange_units(current, next, partition_, to);
  const RecomputePolicy policy = executor_->policy();
  executor_.reset();
  reducer_.reset();
  optimizer_ = std::move(optimizer);
  current = std::move(next);
  partition_ = to;
  deck_.pipeline.partition = to;
  const bool automatic = uses_auto_recompute(deck_);
  executor_ = std::make_unique<Executor>(current, *transport_, deck_, be_,
                                         automatic ? resolve_recompute_one() : policy, tracer_.get());
  connect_reducer();  // the old one points into the layers just replaced
  double totals[2] = {static_cast<double>(tensors), bytes};
  timed_allreduce(MPI_IN_PLACE, totals, 2, MPI_DOUBLE, MPI_SUM, comm_,
                  "the rebalancing move's totals all-reduce");
  report.tensors_sent = static_cast<int64_t>(totals[0]);
  report.bytes_sent = totals[1];
  tracer_->record(EventKind::Rebalance, step, current.stage, -1, trace_start, tracer_->now_us());
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

std::pair<int64_t, double> Trainer::exchange_units(StageModel& from, StageModel& to,
                                                   const std::vector<int64_t>& old_counts,
                                                   const std::vector<int64_t>& new_counts) {
  struct Transfer {
    MPI_Request request = MPI_REQUEST_NULL;
    Tensor host;              // what is sent, or where a receive lands
    Tensor* target = nullptr; // receives: the new stage's tensor
    std::string what;
  };
  std::vector<Transfer> transfers;
  int64_t sent = 0;
  double bytes = 0.0;
  const std::string move = counts_text(old_counts) + " -> " + counts_text(new_counts);
  // Unit -1: the pinned layers (GPT embedding, head), which never change rank.
  for (int64_t u = -1; u < model_units(deck_.model); ++u) {
    const int a = u < 0 ? rank_ : owner_of(old_counts, u), b = u < 0 ? rank_ : owner_of(new_counts, u);
    if (a != rank_ && b != rank_) continue;
    const std::vector<Param*> mine = (a == rank_ ? from : to).unit_params(u);
    const std::vector<Param*> kept = a == b ? to.unit_params(u) : std::vector<Param*>{};
    PT_CHECK(a != b || kept.size() == mine.size(), "rebalance: unit " + std::to_string(u) +
                                                       " has other parameters after the move");
    for (size_t i = 0; i < mine.size(); ++i) {
      std::vector<ParamState> states = param_state(*mine[i]);
      for (size_t k = 0; k < states.size(); ++k) {
        Tensor& t = *states[k].tensor;
        if (a == b) {  // stays on this rank: hand the tensor over
          *param_state(*kept[i])[k].tensor = std::move(t);
          continue;
        }
        Transfer x;
        x.what = "the rebalancing " + std::string(a == rank_ ? "send" : "receive") + " of " +
                 mine[i]->name + "/" + states[k].name + (a == rank_ ? " to rank " : " from rank ") +
                 std::to_string(a == rank_ ? b : a) + " (move " + move + ")";
        PT_CHECK(t.numel() <= (int64_t{1} << 31) - 1, x.what + ": tensor too large for one message");
        const int count = static_cast<int>(t.numel());
        if (a == rank_) {
          x.host = t.to(Device::CPU);
          MPI_CHECK(MPI_Isend(x.host.raw(), count, MPI_FLOAT, b, kMoveTag, comm_, &x.request));
          ++sent;
          bytes += static_cast<double>(x.host.bytes());
        } else {
          x.host = Tensor::empty(t.shape(), DType::F32, t.category(), Device::CPU);
          x.target = &t;
          MPI_CHECK(MPI_Irecv(x.host.raw(), count, MPI_FLOAT, a, kMoveTag, comm_, &x.request));
        }
        transfers.push_back(std::move(x));
      }
    }
  }
  for (Transfer& x : transfers) {
    timed_wait(x.request, comm_, x.what);
    if (x.target == nullptr) continue;
    if (x.target->device() == Device::CPU) *x.target = x.host;
    else copy_tensor(x.host, *x.target);
  }
  return {sent, bytes};
}

}  // namespace pt
