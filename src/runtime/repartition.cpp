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
// rebuilt over the new stage; the transport, data and schedule do not
// depend on the partition and stay.
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
  const RecomputePolicy policy = executor_->policy();
  executor_.reset();  // both hold the stage's layers
  reducer_.reset();
  be_.release_cached_memory();  // the move's tensors have new sizes; nothing is in flight
  DefaultDeviceGuard on_device(be_.device());  // arriving layers are made there
  StageModel next = rebuild_stage(deck_.model, to, current);  // `current` keeps the leaving layers
  optimizer_->replace_params(next.params());
  const auto [tensors, bytes] = exchange_units(current, next, partition_, to);
  current = std::move(next);  // frees the layers that left
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

std::pair<int64_t, double> Trainer::exchange_units(StageModel& leaving, StageModel& next,
                                                   const std::vector<int64_t>& old_counts,
                                                   const std::vector<int64_t>& new_counts) {
  struct Transfer {
    MPI_Request request = MPI_REQUEST_NULL;
    Tensor host;              // what is sent, or where a receive for a device tensor lands
    Tensor* target = nullptr; // receives into a device tensor: the new stage's tensor
    std::string what;
  };
  std::vector<Transfer> transfers;
  int64_t sent = 0;
  double bytes = 0.0;
  const std::string move = counts_text(old_counts) + " -> " + counts_text(new_counts);
  // Units that stay (and the pinned layers) are already in `next`.
  for (int64_t u = 0; u < model_units(deck_.model); ++u) {
    const int a = owner_of(old_counts, u), b = owner_of(new_counts, u);
    if (a == b || (a != rank_ && b != rank_)) continue;
    for (Param* p : (a == rank_ ? leaving : next).unit_params(u)) {
      for (const ParamState& state : param_state(*p)) {
        Tensor& t = *state.tensor;
        Transfer x;
        x.what = "the rebalancing " + std::string(a == rank_ ? "send" : "receive") + " of " +
                 p->name + "/" + state.name + (a == rank_ ? " to rank " : " from rank ") +
                 std::to_string(a == rank_ ? b : a) + " (move " + move + ")";
        PT_CHECK(t.numel() <= (int64_t{1} << 31) - 1, x.what + ": tensor too large for one message");
        const int count = static_cast<int>(t.numel());
        if (a == rank_) {
          x.host = t.to(Device::CPU);
          MPI_CHECK(MPI_Isend(x.host.raw(), count, MPI_FLOAT, b, kMoveTag, comm_, &x.request));
          ++sent;
          bytes += static_cast<double>(x.host.bytes());
        } else if (t.device() == Device::CPU) {  // lands in place
          MPI_CHECK(MPI_Irecv(t.raw(), count, MPI_FLOAT, a, kMoveTag, comm_, &x.request));
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
    if (x.target != nullptr) copy_tensor(x.host, *x.target);
  }
  return {sent, bytes};
}

}  // namespace pt
