// executor.cpp: runs one rank's action list for one step, action by action,
// handing each compute to the StageRunner of its stage.
#include "pipetrain/runtime/executor.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/message_check.hpp"

namespace pt {

namespace {
constexpr int kActivation = 0;  // direction in message tags
constexpr int kGradient = 1;
constexpr int kEnvelopeTag = 2;  // an envelope's tag: its payload's + 2 (check_messages)

std::vector<StageRunner> make_runners(const std::vector<StageModel*>& stages,
                                      const std::vector<RecomputePolicy>& policies,
                                      const ExecutorConfig& config, Backend& backend,
                                      Tracer* tracer) {
  PT_CHECK(!stages.empty() && stages.size() == policies.size(),
           "an executor needs a policy for each of its stages");
  std::vector<StageRunner> runners;
  for (size_t i = 0; i < stages.size(); ++i)
    runners.emplace_back(*stages[i], policies[i], config, backend, tracer);
  return runners;
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

int timed_kind(EventKind kind) {
  return kind == EventKind::F ? 0 : kind == EventKind::B ? 1 : kind == EventKind::W ? 2 : -1;
}
}  // namespace

Executor::Executor(const ExecutorConfig& config, std::vector<StageModel*> stages,
                   std::vector<RecomputePolicy> policies, Transport& transport, Backend& backend,
                   Tracer* tracer)
    : config_(config), runners_(make_runners(stages, policies, config, backend, tracer)),
      transport_(transport), be_(backend), tracer_(tracer), regions_(backend) {}

StageRunner* Executor::runner_of(int stage) {
  for (StageRunner& r : runners_)
    if (r.stage() == stage) return &r;
  return nullptr;
}

StageRunner& Executor::runner_for(int stage) {
  StageRunner* r = runner_of(stage);
  if (!r) PT_FAIL("action for stage " + std::to_string(stage) + ", which this rank does not own");
  return *r;
}

Executor::Receives& Executor::receives(const StageRunner& runner, int mb) {
  const int index = static_cast<int>(&runner - runners_.data());
  return receives_[mb * static_cast<int>(runners_.size()) + index];
}

// With check_messages each (micro-batch, stage) has four tags: activation,
// gradient, and their envelopes.
int Executor::tag(int dst_stage, int direction, int mb) const {
  const int kinds = config_.check_messages ? 4 : 2;
  return (mb * schedule_->num_stages + dst_stage) * kinds + direction;
}

StepOutcome Executor::run(const Schedule& schedule, const Dataset& data, int64_t step, Pass pass,
                          float loss_scale) {
  begin_pass(schedule, data, step, pass, loss_scale);
  const double start_us = clock().now_us();
  last_end_us_ = start_us;
  const std::vector<Action>& list = schedule.ranks[transport_.rank()];
  for (action_index_ = 0; action_index_ < list.size(); ++action_index_) {
    const Action& a = list[action_index_];
    run_action(a, runner_for(a.stage));
    reap_sends(false);
    poll_receives();
    if (config_.reduction.progress) config_.reduction.progress();
  }
  wait_for_ordered_receives();
  reap_sends(true);
  return end_pass(start_us);
}

void Executor::begin_pass(const Schedule& schedule, const Dataset& data, int64_t step, Pass pass,
                          float loss_scale) {
  PT_CHECK(schedule.forward_only == (pass == Pass::Evaluate),
           "an evaluation pass runs a forward-only schedule, training a full one");
  schedule_ = &schedule;
  PT_CHECK(tag(schedule.num_stages - 1, kGradient, schedule.num_micro_batches - 1) +
                   (config_.check_messages ? kEnvelopeTag : 0) <=
               transport_.max_tag(),
           "micro-batch count too large for MPI tags");
  pass_ = PassContext();
  pass_.data = &data;
  pass_.step = step;
  pass_.pass = pass;
  pass_.micro_batches = schedule.num_micro_batches;
  pass_.split = pass == Pass::Train && splits_backward(schedule);
  pass_.step_weight_grads = pass_.split && schedule.step_weight_grads;
  pass_.loss_scale = loss_scale;
  if (pass == Pass::Train) fault_point("step", step);
  for (StageRunner& r : runners_) r.begin_pass(pass_);
  receives_.clear();
  ordered_receives_.clear();  // left by a pass that failed
  regions_.restart();
  if (send_order_.ranks != schedule.ranks || send_order_.placement != schedule.placement) {
    send_order_.finish_first = std::move(sends_finished_before(schedule)[transport_.rank()]);
    send_order_.ranks = schedule.ranks;  // peers' lists too
    send_order_.placement = schedule.placement;
  }
}

StepOutcome Executor::end_pass(double start_us) {
  for (auto& [k, rx] : receives_)
    PT_CHECK(!rx.forward && !rx.backward,
             "micro-batch " + std::to_string(k / static_cast<int>(runners_.size())) +
                 " has a receive nobody consumed");
  receives_.clear();
  StepOutcome outcome;
  for (StageRunner& r : runners_) {
    r.end_pass();  // the last stage reads its losses here, once
    if (r.model().is_last()) {
      outcome.loss_sum = r.loss_sum();
      outcome.micro_batch_losses = r.micro_batch_losses();
    }
  }
  double compute_s = 0.0;
  for (double s : regions_.read()) compute_s += s;
  outcome.compute_us = compute_s * 1e6;
  // The read waited for the last kernels: on a GPU the span ends there, not
  // at the last launch, so compute never exceeds span.
  last_end_us_ = std::max(last_end_us_, clock().now_us());
  outcome.span_us = last_end_us_ - start_us;
  return outcome;
}

void Executor::run_action(const Action& a, StageRunner& runner) {
  switch (a.kind) {
    case ActionKind::F: forward(runner, a.mb); break;
    case ActionKind::B: backward(runner, a.mb); break;
    case ActionKind::W: weights(runner, a.mb); break;
    case ActionKind::RECV_F:
    case ActionKind::RECV_B: post_recv(a, runner); break;
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: post_send(a, runner); break;
  }
}

void Executor::forward(StageRunner& runner, int mb) {
  const double start = clock().now_us();
  receive_forward_input(runner, mb);
  const EventKind kind = pass_.pass == Pass::Train ? EventKind::F : EventKind::EvalF;
  const double compute_start = compute_begin(kind, runner, mb);
  runner.forward(mb, forward_input(runner, mb));
  compute_end(runner, kind, mb, start, compute_start);
}

// F's input from a peer: waits for its RECV_F (outside F's timed region),
// on the host or, where the transport can, on the compute stream.
void Executor::receive_forward_input(StageRunner& runner, int mb) {
  if (runner.model().is_first() || runner_of(runner.stage() - 1)) return;
  Receives& rx = receives(runner, mb);
  PT_CHECK(rx.forward, "F of micro-batch " + std::to_string(mb) + " without RECV_F");
  const int64_t arrived = await_receive(rx.forward);
  if (config_.check_messages)
    verify_receive(runner, mb, kActivation, rx.forward_envelope, rx.forward_envelope_buf, rx.input,
                   arrived);
  else
    check_length({runner.stage(), ActionKind::RECV_F, mb}, arrived, rx.input);
  finish_sends_first();
}

Tensor Executor::forward_input(StageRunner& runner, int mb) {
  if (runner.model().is_first()) return runner.data_input(mb);
  if (StageRunner* prev = runner_of(runner.stage() - 1)) {  // ran here: a local handoff
    MicroBatchState& from = prev->state(mb);
    PT_CHECK(from.output.defined(), "F of micro-batch " + std::to_string(mb) + " on stage " +
                                        std::to_string(runner.stage()) +
                                        " before the previous stage's F");
    if (config_.check_messages) check_output(*prev, mb, "F", from.output);
    return std::move(from.output);
  }
  return std::move(receives(runner, mb).input);  // received by receive_forward_input
}

void Executor::backward(StageRunner& runner, int mb) {
  MicroBatchState& state = runner.forwarded(mb);
  const double start = clock().now_us();
  if (runner.model().is_last()) {
    // the loss gradient, from F
  } else if (StageRunner* next = runner_of(runner.stage() + 1)) {  // ran here: local
    MicroBatchState& from = next->state(mb);
    PT_CHECK(from.grad_input.defined(), "B of micro-batch " + std::to_string(mb) + " on stage " +
                                            std::to_string(runner.stage()) +
                                            " before the next stage's B");
    if (config_.check_messages) check_output(*next, mb, "B", from.grad_input);
    state.grad_output = std::move(from.grad_input);
  } else {
    Receives& rx = receives(runner, mb);
    PT_CHECK(rx.backward, "B of micro-batch " + std::to_string(mb) + " without RECV_B");
    const int64_t arrived = await_receive(rx.backward);
    if (config_.check_messages)
      verify_receive(runner, mb, kGradient, rx.backward_envelope, rx.backward_envelope_buf,
                     state.grad_output, arrived);
    else
      check_length({runner.stage(), ActionKind::RECV_B, mb}, arrived, state.grad_output);
    finish_sends_first();
  }
  const double compute_start = compute_begin(EventKind::B, runner, mb);
  runner.backward(mb, std::move(state.grad_output));
  compute_end(runner, EventKind::B, mb, start, compute_start);
}

// W: the weight gradients B deferred; with per-step weight gradients one
// pass for all micro-batches, at W of micro-batch 0.
void Executor::weights(StageRunner& runner, int mb) {
  const int count = runner.weight_pass_size(mb);
  if (count == 0) return;
  const double start = clock().now_us();
  const double compute_start = compute_begin(EventKind::W, runner, mb);
  runner.weights(mb);
  compute_end(runner, EventKind::W, mb, start, compute_start, count);
}

double Executor::compute_begin(EventKind kind, const StageRunner& runner, int mb) {
  if (slowed()) settle_compute("before", kind, runner, mb);
  regions_.begin();
  return clock().now_us();
}

void Executor::compute_end(const StageRunner& runner, EventKind kind, int mb, double start_us,
                           double compute_start_us, int count) {
  if (tracer_ && tracer_->enabled()) be_.synchronize();  // GPU: a trace event ends with its kernels
  if (slowed()) {
    settle_compute("of", kind, runner, mb);
    slow_down(compute_start_us);
  }
  regions_.end({runner.stage(), timed_kind(kind), count});
  const double end_us = clock().now_us();
  last_end_us_ = end_us;
  const double slice_us = (end_us - start_us) / count;
  if (!tracer_) return;
  for (int i = 0; i < count; ++i)
    tracer_->record(kind, pass_.step, runner.stage(), mb + i, start_us + i * slice_us,
                    i + 1 == count ? end_us : start_us + (i + 1) * slice_us);
}

// Fault injection ([slowdown]): a slowed rank's F, B and W each
// take factor x as long. What is stretched is the action's compute alone,
// from compute_begin to its end, never a wait for a peer's message before it.
// A backend that computes asynchronously (CUDA) returns from a kernel launch
// at once, so the host clock alone would see the launches, and the sleep
// would stretch whatever the host waits for next instead. So while the
// slowdown is on, the backend is synchronised before the compute starts (the
// work queued before it, from earlier actions or a reduction, is not
// counted) and before its time is read (its kernels have run). On the CPU,
// which computes synchronously, both synchronisations do nothing. Runs without
// a slowdown never synchronise here, and nothing computed changes either way.
bool Executor::slowed() const {
  return pass_.pass == Pass::Train && config_.slowdown.factor_at(pass_.step) > 1.0;
}

void Executor::settle_compute(const char* when, EventKind kind, const StageRunner& runner,
                              int mb) {
  const char* action = kind == EventKind::W ? "W" : kind == EventKind::B ? "B" : "F";
  DeadlineScope deadline(std::string("the slowdown's wait for the backend's work ") + when + " " +
                         action + " of micro-batch " + std::to_string(mb) + " on stage " +
                         std::to_string(runner.stage()));
  be_.synchronize();
}

// Sleeps (factor - 1) x the compute's time since compute_start_us.
void Executor::slow_down(double compute_start_us) {
  const double factor = config_.slowdown.factor_at(pass_.step);
  const double spent_us = clock().now_us() - compute_start_us;
  std::this_thread::sleep_for(std::chrono::duration<double, std::micro>((factor - 1.0) * spent_us));
}

void Executor::post_recv(const Action& a, StageRunner& runner) {
  Receives& rx = receives(runner, a.mb);
  const StageModel& stage = runner.model();
  if (a.kind == ActionKind::RECV_F) {
    PT_CHECK(!rx.forward, "second " + to_string(a));
    rx.input = Tensor::empty(stage.input_shape(config_.rows), stage.input_dtype,
                             MemCategory::Workspace, be_.device());
    rx.forward = posted(a, transport_.irecv(rx.input, peer_rank(a.stage - 1),
                                            tag(a.stage, kActivation, a.mb)));
    if (config_.check_messages)
      rx.forward_envelope =
          post_envelope_recv(a, peer_rank(a.stage - 1),
                             tag(a.stage, kActivation, a.mb) + kEnvelopeTag, rx.forward_envelope_buf);
  } else {
    PT_CHECK(!rx.backward, "second " + to_string(a));
    Tensor& grad_output = runner.state(a.mb).grad_output;
    grad_output = Tensor::empty(stage.output_shape(config_.rows), DType::F32,
                                MemCategory::Workspace, be_.device());
    rx.backward = posted(a, transport_.irecv(grad_output, peer_rank(a.stage + 1),
                                             tag(a.stage, kGradient, a.mb)));
    if (config_.check_messages)
      rx.backward_envelope =
          post_envelope_recv(a, peer_rank(a.stage + 1),
                             tag(a.stage, kGradient, a.mb) + kEnvelopeTag, rx.backward_envelope_buf);
  }
}

void Executor::post_send(const Action& a, StageRunner& runner) {
  MicroBatchState& state = runner.state(a.mb);
  const bool forward_dir = a.kind == ActionKind::SEND_F;
  Tensor& produced = forward_dir ? state.output : state.grad_input;
  PT_CHECK(produced.defined(), to_string(a) + (forward_dir ? " before its F" : " before its B"));
  const int peer_stage = forward_dir ? a.stage + 1 : a.stage - 1;
  const int direction = forward_dir ? kActivation : kGradient;
  const int message_tag = tag(peer_stage, direction, a.mb);
  // The fault injection's damage (PIPETRAIN_TEST_MESSAGE_FAULT), with or
  // without the check: a NaN is the stage's own output, the rest happens in flight.
  const std::string fault = pass_.pass == Pass::Train ? message_fault_due(pass_.step) : "";
  if (fault == "nan") produced = damage_payload(fault, produced);
  Send send;
  send.buffer = std::move(produced);
  const Tensor payload = send.buffer;  // what the stage produced
  if (fault == "bitflip" || fault == "truncate") send.buffer = damage_payload(fault, payload);
  send.pending = posted(a, transport_.isend(send.buffer, peer_rank(peer_stage), message_tag));
  sends_.push_back(std::move(send));
  if (config_.check_messages) {
    const PayloadDigest digest = check_output(runner, a.mb, forward_dir ? "F" : "B", payload);
    post_envelope_send(a, payload, digest, peer_rank(peer_stage), message_tag + kEnvelopeTag,
                       fault);
  }
}

Executor::Pending Executor::posted(const Action& a, std::unique_ptr<PendingTransfer> transfer) {
  Pending p;
  p.transfer = std::move(transfer);
  p.action = a;
  p.posted_us = clock().now_us();
  return p;
}

bool Executor::poll(Pending& p) {
  if (p.done) return true;
  if (!p.transfer->test()) return false;
  p.done = true;
  if (traces_communication() && p.traced) {
    const bool send = p.action.kind == ActionKind::SEND_F || p.action.kind == ActionKind::SEND_B;
    tracer_->record(send ? EventKind::Send : EventKind::Recv, pass_.step, p.action.stage,
                    p.action.mb, p.posted_us, tracer_->now_us());
  }
  return true;
}

void Executor::poll_receives() {
  for (auto& [k, rx] : receives_) {
    if (rx.forward) poll(rx.forward);
    if (rx.backward) poll(rx.backward);
    if (rx.forward_envelope) poll(rx.forward_envelope);
    if (rx.backward_envelope) poll(rx.backward_envelope);
  }
  const auto done = [&](Pending& p) { return poll(p); };
  ordered_receives_.erase(
      std::remove_if(ordered_receives_.begin(), ordered_receives_.end(), done),
      ordered_receives_.end());
}

// Receives are ordered on the device only while no compute is synchronised
// on the host anyway: a trace (each event ends with its kernels) or a
// slowdown would then wait for the transfer inside F or B, and the timeline
// would show it as compute; there the host waits, and the wait is a WAIT.
// With check_messages the host reads every envelope and payload digest, so
// it waits for the receive itself.
bool Executor::orders_receives_on_device() const {
  return !(tracer_ && tracer_->enabled()) && !slowed() && !config_.check_messages;
}

int64_t Executor::await_receive(Pending& p) {
  int64_t arrived = -1;
  if (!p.done && orders_receives_on_device() && p.transfer->order_before_compute()) {
    ordered_receives_.push_back(std::move(p));
  } else {
    wait_for(p);
    arrived = p.transfer->received_bytes();
  }
  p = Pending();
  return arrived;
}

// The compute stream has waited for these; the host sees them complete
// (their RECV events, the NCCL ledger) before the pass ends, within the
// timeout, so a peer that never sends is named with the receive's action.
void Executor::wait_for_ordered_receives() {
  for (Pending& p : ordered_receives_) wait_for(p);
  ordered_receives_.clear();
}

// The sends the running compute finishes before it starts
// (sends_finished_before): their receiver is taking them now, so the wait is
// one message's copy, and the compute's memory never holds their buffers.
void Executor::finish_sends_first() {
  const std::vector<int>& first_of = send_order_.finish_first;
  if (action_index_ >= first_of.size() || first_of[action_index_] < 0) return;
  const Action& first = schedule_->ranks[transport_.rank()][first_of[action_index_]];
  // Taken out of sends_ first: the wait reaps sends_, which moves its entries.
  auto it = std::find_if(sends_.begin(), sends_.end(),
                         [&](const Send& send) { return send.pending.action == first; });
  if (it != sends_.end()) {
    Send send = std::move(*it);
    sends_.erase(it);
    wait_for(send.pending);
  }
  reap_sends(false);
}

void Executor::reap_sends(bool wait_all) {
  reaping_ = true;
  size_t kept = 0;
  for (size_t i = 0; i < sends_.size(); ++i) {
    if (wait_all) wait_for(sends_[i].pending);
    if (!poll(sends_[i].pending)) sends_[kept++] = std::move(sends_[i]);
  }
  sends_.resize(kept);
  reaping_ = false;
}

// Polls with a short spin, then yields the core between polls: the latency
// stays a few microseconds when cores are free, and an oversubscribed node
// gives the core to a rank that computes. Time spent blocked is a WAIT event
// (nested in the F or B that waits, or at the end of the step).
void Executor::wait_for(Pending& p) {
  if (poll(p)) return;
  const double start_us = clock().now_us();
  // While a receive is awaited, sends that complete free their buffers at
  // once rather than after the action: a stage far ahead of its successor
  // (GPipe's forwards) does not hold its finished messages through the wait.
  const auto progress = [&] {
    if (!reaping_) reap_sends(false);
    return poll(p);
  };
  if (!poll_until(progress, config_.timeout_s)) throw TimeoutError(describe(p.action));
  if (!reaping_) reap_sends(false);
  const double end_us = clock().now_us();
  last_end_us_ = std::max(last_end_us_, end_us);
  if (traces_communication())
    tracer_->record(EventKind::Wait, pass_.step, p.action.stage, p.action.mb, start_us, end_us);
}

// An evaluation pass is traced as its EVAL_F events only: its step is the
// evaluation batch, not a training step, and its messages and waits would
// otherwise stretch the span of the training step of that number
// (docs/outputs.md, "Measured bubble").
bool Executor::traces_communication() const { return tracer_ && pass_.pass == Pass::Train; }

std::string Executor::describe(const Action& a) const {
  const bool is_send = a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B;
  const bool forward_dir = a.kind == ActionKind::SEND_F || a.kind == ActionKind::RECV_F;
  const int peer_stage = (forward_dir == is_send) ? a.stage + 1 : a.stage - 1;
  const char* what = forward_dir ? "activation" : "gradient";
  // The driver's phase ("in step 812", "in the evaluation after step 800");
  // the executor's own step and pass when it runs without one (tests).
  const std::string phase = wait_phase().empty()
                                ? (pass_.pass == Pass::Train ? "in step " : "in evaluation batch ") +
                                      std::to_string(pass_.step)
                                : wait_phase();
  return "stage " + std::to_string(a.stage) + " timed out after " +
         format_seconds(config_.timeout_s) + " s " + phase + " waiting on " + to_string(a) +
         ": the " + what + " of micro-batch " + std::to_string(a.mb) +
         (is_send ? " to" : " from") + " rank " + std::to_string(peer_rank(peer_stage)) +
         " (stage " + std::to_string(peer_stage) + "); see pipeline.timeout_s";
}

}  // namespace pt
