// executor.cpp: runs one rank's action list for one training step.
#include "pipetrain/runtime/executor.hpp"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cmath>
#include <cstdio>
#include <thread>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {
constexpr int kActivation = 0;  // direction in message tags
constexpr int kGradient = 1;

std::vector<StageModel*> checked_stages(std::vector<StageModel*> stages, size_t policies) {
  PT_CHECK(!stages.empty() && stages.size() == policies,
           "an executor needs a policy for each of its stages");
  return stages;
}

std::string format_seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}
}  // namespace

Executor::Executor(StageModel& stage, Transport& transport, const Deck& deck, Backend& backend,
                   RecomputePolicy policy, Tracer* tracer)
    : Executor(std::vector<StageModel*>{&stage}, transport, deck, backend,
               std::vector<RecomputePolicy>{policy}, tracer) {}

Executor::Executor(std::vector<StageModel*> stages, Transport& transport, const Deck& deck,
                   Backend& backend, std::vector<RecomputePolicy> policies, Tracer* tracer)
    : stages_(checked_stages(std::move(stages), policies.size())),
      policies_(std::move(policies)), stage_(*stages_.front()), transport_(transport),
      deck_(deck), be_(backend), policy_(policies_.front()), tracer_(tracer),
      timer_(backend.make_timer()),
      rows_(deck.training.batch_size / (deck.pipeline.micro_batches * data_parallel_size(deck))) {}

void Executor::weights_done(int mb, size_t layer) {
  if (reduction_.layer_done && pass_ == Pass::Train && !probing_)
    reduction_.layer_done(cur().stage, mb, layer);
}

bool Executor::owns(int stage) const {
  for (const StageModel* s : stages_)
    if (s->stage == stage) return true;
  return false;
}

void Executor::select(int stage) {
  for (size_t i = 0; i < stages_.size(); ++i)
    if (stages_[i]->stage == stage) {
      cur_ = i;
      return;
    }
  PT_FAIL("action for stage " + std::to_string(stage) + ", which this rank does not own");
}

Executor::MicroBatch& Executor::local_state(int stage, int mb) {
  const size_t keep = cur_;
  select(stage);
  MicroBatch& state = mbs_[key(mb)];
  cur_ = keep;
  return state;
}

int Executor::tag(int dst_stage, int direction, int mb) const {
  return (mb * schedule_->num_stages + dst_stage) * 2 + direction;
}

StepOutcome Executor::run(const Schedule& schedule, const Dataset& data, int64_t step,
                          Pass pass) {
  PT_CHECK(schedule.forward_only == (pass == Pass::Evaluate),
           "an evaluation pass runs a forward-only schedule, training a full one");
  schedule_ = &schedule;
  PT_CHECK(tag(schedule.num_stages - 1, kGradient, schedule.num_micro_batches - 1) <=
               transport_.max_tag(),
           "micro-batch count too large for MPI tags");
  data_ = &data;
  pass_ = pass;
  step_ = step;
  split_ = pass == Pass::Train && splits_backward(schedule);
  step_weight_grads_ = split_ && schedule.step_weight_grads;
  if (pass == Pass::Train) fault_point("step", step);
  loss_sum_ = 0.0;
  mb_losses_.assign(static_cast<size_t>(schedule.num_micro_batches), 0.0);
  mbs_.clear();
  restart_timer();
  const double start_us = clock().now_us();
  last_end_us_ = start_us;
  const std::vector<Action>& list = schedule.ranks[transport_.rank()];
  if (finish_rule_for_ != schedule.ranks || finish_placement_for_ != schedule.placement) {  // peers' lists too
    finish_first_ = std::move(sends_finished_before(schedule)[transport_.rank()]);
    finish_rule_for_ = schedule.ranks;
    finish_placement_for_ = schedule.placement;
  }
  for (action_index_ = 0; action_index_ < list.size(); ++action_index_) {
    const Action& a = list[action_index_];
    select(a.stage);
    run_action(a);
    reap_sends(false);
    poll_receives();
    if (reduction_.progress) reduction_.progress();
  }
  reap_sends(true);
  for (auto& [k, state] : mbs_)
    PT_CHECK(!state.recv_f && !state.recv_b,
             "micro-batch " + std::to_string(k / static_cast<int>(stages_.size())) +
                 " has a receive nobody consumed");
  mbs_.clear();
  cur_ = 0;
  StepOutcome outcome;
  outcome.loss_sum = loss_sum_;
  for (const StageModel* st : stages_)
    if (st->is_last()) outcome.micro_batch_losses = mb_losses_;
  outcome.compute_us = read_compute_times() * 1e6;
  // The read waited for the last kernels: on a GPU the span ends there, not
  // at the last launch, so compute never exceeds span.
  last_end_us_ = std::max(last_end_us_, clock().now_us());
  outcome.span_us = last_end_us_ - start_us;
  return outcome;
}

const Tracer& Executor::clock() const { return tracer_ ? *tracer_ : local_clock_; }

double Executor::compute_begin() { return clock().now_us(); }

// The timed region of an F, B or W: its kernels, after its waits for peers.
void Executor::start_timing() {
  timer_->begin();
  ++unread_regions_;
  timing_open_ = true;
}

void Executor::stop_timing() {
  timer_->end();
  timing_open_ = false;
}

// A run or probe that threw left regions unread: start over with a new timer.
void Executor::restart_timer() {
  if (timing_open_ || unread_regions_ > 0) timer_ = be_.make_timer();
  unread_regions_ = 0;
  timing_open_ = false;
  timed_.clear();
  action_times_.clear();
}

// The step's one read of the timer: every F, B and W's seconds on the
// backend's clock (GPU: kernel time, not launch time). Returns their sum and
// fills action_times_ when asked to.
double Executor::read_compute_times() {
  const std::vector<double> seconds = timer_->read();
  unread_regions_ = 0;
  PT_CHECK(seconds.size() == timed_.size(), "the compute timer returned " +
                                                std::to_string(seconds.size()) + " times for " +
                                                std::to_string(timed_.size()) + " regions");
  double total = 0.0;
  for (size_t i = 0; i < seconds.size(); ++i) {
    const TimedRegion& r = timed_[i];
    total += seconds[i];
    if (!time_actions_ || r.kind < 0) continue;
    for (int k = 0; k < r.count; ++k) action_times_.push_back({r.stage, r.kind, seconds[i] / r.count});
  }
  timed_.clear();
  return total;
}

void Executor::compute_end(EventKind kind, int mb, double start_us, int count) {
  if (tracer_ && tracer_->enabled()) be_.synchronize();  // GPU: a trace event ends with its kernels
  if (slowdown_ > 1.0) {
    be_.synchronize();
    const double spent_us = clock().now_us() - start_us;
    std::this_thread::sleep_for(std::chrono::duration<double, std::micro>((slowdown_ - 1.0) * spent_us));
  }
  stop_timing();
  const int code = kind == EventKind::F ? 0 : kind == EventKind::B ? 1 : kind == EventKind::W ? 2 : -1;
  timed_.push_back({cur().stage, code, count});
  const double end_us = clock().now_us();
  last_end_us_ = end_us;
  const double slice_us = (end_us - start_us) / count;
  if (!tracer_) return;
  for (int i = 0; i < count; ++i)
    tracer_->record(kind, step_, cur().stage, mb + i, start_us + i * slice_us,
                    i + 1 == count ? end_us : start_us + (i + 1) * slice_us);
}

void Executor::run_action(const Action& a) {
  PT_CHECK(a.stage == cur().stage, "action " + to_string(a) + " is not for stage " +
                                       std::to_string(cur().stage));
  switch (a.kind) {
    case ActionKind::F: forward(a.mb); break;
    case ActionKind::B: backward(a.mb); break;
    case ActionKind::W: weights(a.mb); break;
    case ActionKind::RECV_F:
    case ActionKind::RECV_B: post_recv(a); break;
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: post_send(a); break;
  }
}

void Executor::forward(int mb) {
  const double start = compute_begin();
  receive_forward_input(mb);
  start_timing();
  run_forward(mb, forward_input(mb));
  compute_end(pass_ == Pass::Train ? EventKind::F : EventKind::EvalF, mb, start);
}

// F's input from a peer: waits for its RECV_F (outside F's timed region).
void Executor::receive_forward_input(int mb) {
  if (cur().is_first() || owns(cur().stage - 1)) return;
  MicroBatch& state = mbs_[key(mb)];
  PT_CHECK(state.recv_f, "F of micro-batch " + std::to_string(mb) + " without RECV_F");
  wait_for(state.recv_f);
  state.recv_f = Pending();
  finish_sends_first();
}

Tensor Executor::forward_input(int mb) {
  if (cur().is_first())
    return data_->inputs(micro_batch_first_sample(deck_, step_, global_mb(mb)), rows_).to(be_.device());
  if (owns(cur().stage - 1)) {  // the previous stage ran here: a local handoff
    MicroBatch& prev = local_state(cur().stage - 1, mb);
    PT_CHECK(prev.output.defined(), "F of micro-batch " + std::to_string(mb) + " on stage " +
                                        std::to_string(cur().stage) + " before the previous stage's F");
    return std::move(prev.output);
  }
  return std::move(mbs_[key(mb)].recv_input);  // received by receive_forward_input
}

void Executor::run_forward(int mb, Tensor x) {
  MicroBatch& state = mbs_[key(mb)];
  StageModel& stage = cur();
  const RecomputePolicy& policy = cur_policy();
  const size_t n = stage.layers.size();
  const bool stash = pass_ == Pass::Train;
  state.layer_inputs.assign(n, Tensor());
  state.layer_saved.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    Tensor y = stage.layers[i]->forward(be_, x, state.layer_saved[i]);
    if (stash && policy.keeps_input(i)) state.layer_inputs[i] = stashed(std::move(x));
    if (stash && policy.keeps_saved()) {
      if (policy.kind == RecomputePolicy::Kind::Selective)
        stage.layers[i]->drop_recomputable(state.layer_saved[i]);
      for (Tensor& t : state.layer_saved[i]) t.retag(MemCategory::Activations);
    } else {
      state.layer_saved[i].clear();
    }
    x = std::move(y);
  }
  state.forward_done = true;
  if (!stage.is_last()) {
    state.output = std::move(x);
    return;
  }
  const int64_t batch = deck_.training.batch_size;
  const int64_t terms = stage.loss_terms_per_sample;
  Tensor target =
      data_->targets(micro_batch_first_sample(deck_, step_, global_mb(mb)), rows_).to(be_.device());
  state.grad_output = Tensor::empty(x.shape(), DType::F32, MemCategory::Workspace);
  const float grad_scale = static_cast<float>(loss_scale_ / static_cast<double>(batch * terms));
  double loss = stage.loss->forward_backward(be_, x, target, grad_scale, state.grad_output);
  // With fp16 loss scaling an overflow is the scaler's to handle: the step
  // is skipped and the scale backs off (LossScaler::finish_backward).
  if (!std::isfinite(loss) && !loss_scaling_)
    throw Error("non-finite loss at step " + std::to_string(step_) + ", stage " +
                std::to_string(stage.stage) + ", micro-batch " + std::to_string(global_mb(mb)));
  loss_sum_ += loss;
  if (static_cast<size_t>(mb) < mb_losses_.size()) mb_losses_[static_cast<size_t>(mb)] = loss;
  if (stash) state.grad_output.retag(MemCategory::Activations);
  else state.grad_output = Tensor();
}

// One micro-batch through this stage alone (no communication): a zero input
// (data on the first stage), forward, then backward from a zero output
// gradient (the loss gradient on the last stage). Gradients it adds are
// cleared by the next step's zero_grad.
MicroBatchProbe Executor::probe_micro_batch(const Dataset& data,
                                            const std::function<MemoryStats()>& stats,
                                            const std::function<void()>& reset_peaks,
                                            const std::function<void()>& before_each_pass) {
  data_ = &data;
  pass_ = Pass::Train;
  step_ = 0;
  loss_sum_ = 0.0;
  mbs_.clear();
  MicroBatchProbe probe;
  // Data that caches itself on first use (synthetic) does so before measuring.
  fill_data_cache(data, rows_, stage_.is_first(), stage_.is_last());
  const MemoryStats empty = stats();  // before the input and output-gradient buffers
  restart_timer();
  // Timed regions, read at the end: the input fetch (first stage), F, B.
  const size_t fetched = stage_.is_first() ? 1 : 0;
  if (fetched) start_timing();
  Tensor x = stage_.is_first()
                 ? data.inputs(0, rows_).to(be_.device())
                 : Tensor::zeros(stage_.input_shape(rows_), stage_.input_dtype, MemCategory::Workspace);
  if (fetched) stop_timing();
  Tensor dy;
  if (!stage_.is_last()) dy = Tensor::zeros(stage_.output_shape(rows_), DType::F32, MemCategory::Workspace);
  const MemoryStats before = stats();
  reset_memory_peaks();
  if (reset_peaks) reset_peaks();
  probing_ = true;
  if (before_each_pass) before_each_pass();
  start_timing();
  run_forward(0, std::move(x));
  stop_timing();
  const int act = static_cast<int>(MemCategory::Activations);
  probe.stash_bytes = stats().live[act] - before.live[act];
  if (stage_.is_last()) dy = std::move(mbs_[0].grad_output);
  const MemoryStats after_forward = stats();  // its peak is the forward's
  reset_memory_peaks();
  if (reset_peaks) reset_peaks();
  if (before_each_pass) before_each_pass();
  start_timing();
  run_backward(0, std::move(dy));
  stop_timing();
  const std::vector<double> seconds = timer_->read();
  unread_regions_ = 0;
  PT_CHECK(seconds.size() == fetched + 2, "the probe's compute timer lost a region");
  probe.forward_s = seconds[fetched] + (fetched ? seconds[0] : 0.0);
  probe.backward_s = seconds[fetched + 1];
  probe.recompute_s = recompute_us_ * 1e-6;
  probing_ = false;
  const MemoryStats after = stats();
  // Signed: a stage whose input is larger than all it allocates has a
  // transient below its stash.
  const auto above = [&](size_t peak, size_t base) {
    const double bytes = static_cast<double>(peak) - static_cast<double>(base) -
                         static_cast<double>(probe.stash_bytes);
    return static_cast<size_t>(std::max(0.0, bytes));
  };
  const size_t peak = std::max(after_forward.peak_total, after.peak_total);
  probe.transient_bytes = above(peak, before.live_total);
  probe.workspace_bytes = above(peak, empty.live_total);
  probe.backward_workspace_bytes = above(after.peak_total, empty.live_total);
  mbs_.clear();
  return probe;
}

Tensor Executor::stashed(Tensor t) {
  t.retag(MemCategory::Activations);
  return t;
}

// Re-runs the forward of layers [begin, end) from the kept input of `begin`,
// keeping every input and saved tensor (as workspace) for the backward that
// follows at once. The last layer's output is not needed: it only refills
// its saved tensors.
void Executor::recompute_segment(MicroBatch& state, size_t begin, size_t end) {
  Tensor x = state.layer_inputs[begin];
  for (size_t i = begin; i + 1 < end; ++i) {
    Tensor y = cur().layers[i]->forward(be_, x, state.layer_saved[i]);
    state.layer_inputs[i] = std::move(x);
    x = std::move(y);
  }
  cur().layers[end - 1]->recompute_saved(be_, x, state.layer_saved[end - 1]);
  state.layer_inputs[end - 1] = std::move(x);
}

void Executor::backward(int mb) {
  auto it = mbs_.find(key(mb));
  PT_CHECK(it != mbs_.end() && it->second.forward_done,
           "B of micro-batch " + std::to_string(mb) + " before its F");
  MicroBatch& state = it->second;
  const double start = compute_begin();
  if (!cur().is_last() && owns(cur().stage + 1)) {  // the next stage ran here: local
    MicroBatch& next = local_state(cur().stage + 1, mb);
    PT_CHECK(next.grad_input.defined(), "B of micro-batch " + std::to_string(mb) + " on stage " +
                                            std::to_string(cur().stage) + " before the next stage's B");
    state.grad_output = std::move(next.grad_input);
  } else if (!cur().is_last()) {
    PT_CHECK(state.recv_b, "B of micro-batch " + std::to_string(mb) + " without RECV_B");
    wait_for(state.recv_b);
    state.recv_b = Pending();
    finish_sends_first();
  }
  start_timing();
  run_backward(mb, std::move(state.grad_output));
  state.backward_done = true;
  compute_end(EventKind::B, mb, start);
}

// W: the weight gradients B deferred, layer by layer as B ran them.
void Executor::weights(int mb) {
  if (step_weight_grads_ && mb == 0) return weights_of_step();
  auto it = mbs_.find(key(mb));
  if (step_weight_grads_) {  // the pass of micro-batch 0 did it
    PT_CHECK(it != mbs_.end() && it->second.backward_done && it->second.deferred.empty(),
             "W of micro-batch " + std::to_string(mb) + " of stage " + std::to_string(cur().stage) +
                 " without the stage's pass of weight gradients");
    return;
  }
  PT_CHECK(it != mbs_.end() && it->second.backward_done && !it->second.deferred.empty(),
           "W of micro-batch " + std::to_string(mb) + " before its B");
  MicroBatch& state = it->second;
  const double start = compute_begin();
  start_timing();
  for (size_t i = state.deferred.size(); i-- > 0;) {
    cur().layers[i]->backward_weights(be_, state.deferred[i]);
    state.deferred[i].clear();
    weights_done(mb, i);
  }
  state.deferred.clear();
  compute_end(EventKind::W, mb, start);
}

// Per-step weight gradients: layer by layer in reverse, the deferred tensors
// of all micro-batches stacked in micro-batch order, one backward_weights.
void Executor::weights_of_step() {
  const int n = schedule_->num_micro_batches;
  std::vector<MicroBatch*> states;
  for (int mb = 0; mb < n; ++mb) {
    auto it = mbs_.find(key(mb));
    PT_CHECK(it != mbs_.end() && it->second.backward_done && !it->second.deferred.empty(),
             "the weight-gradient pass of stage " + std::to_string(cur().stage) +
                 " before B of micro-batch " + std::to_string(mb));
    states.push_back(&it->second);
  }
  const double start = compute_begin();
  start_timing();
  for (size_t i = states.front()->deferred.size(); i-- > 0;) {
    const std::vector<Tensor> stacked = stacked_deferred(states, i);
    cur().layers[i]->backward_weights(be_, stacked);
    for (int mb = 0; mb < n; ++mb) weights_done(mb, i);
  }
  for (MicroBatch* state : states) state->deferred.clear();
  compute_end(EventKind::W, 0, start, n);
}

// Layer `layer`'s deferred tensors of `states`, each stacked along dim 0 in
// micro-batch order; each piece is freed once copied.
std::vector<Tensor> Executor::stacked_deferred(const std::vector<MicroBatch*>& states,
                                               size_t layer) {
  std::vector<Tensor> stacked(states.front()->deferred[layer].size());
  for (size_t j = 0; j < stacked.size(); ++j) {
    const Tensor& first = states.front()->deferred[layer][j];
    Shape shape = first.shape();
    shape[0] *= static_cast<int64_t>(states.size());
    stacked[j] = Tensor::empty(shape, first.dtype(), MemCategory::Workspace, first.device());
    int64_t row = 0;
    for (MicroBatch* state : states) {
      Tensor& piece = state->deferred[layer][j];
      copy_rows_into(piece, stacked[j], row);
      row += piece.dim(0);
      piece = Tensor();
    }
  }
  return stacked;
}

// One layer's backward: fused, or (split) the input gradient, keeping what
// W needs as activations.
Tensor Executor::layer_backward(MicroBatch& state, size_t i, Tensor dy, bool need_dx) {
  Layer& layer = *cur().layers[i];
  if (!split_) return layer.backward(be_, state.layer_inputs[i], state.layer_saved[i], dy, need_dx);
  Tensor dx = layer.backward_input(be_, state.layer_inputs[i], state.layer_saved[i], dy, need_dx,
                                   state.deferred[i]);
  for (Tensor& t : state.deferred[i]) t.retag(MemCategory::Activations);
  return dx;
}

void Executor::run_backward(int mb, Tensor dy) {
  MicroBatch& state = mbs_[key(mb)];
  StageModel& stage = cur();
  const RecomputePolicy& policy = cur_policy();
  recompute_us_ = 0.0;
  if (split_) state.deferred.assign(stage.layers.size(), {});
  // Segments in reverse: recompute a segment's forward when the policy
  // dropped it, then run its backward, releasing the stash as it goes.
  for (size_t end = stage.layers.size(); end > 0;) {
    const size_t begin = policy.segment_start(end - 1);
    if (!policy.keeps_saved()) {
      if (probing_) be_.synchronize();  // GPU: the forward's kernels are not the recompute's
      const double start = clock().now_us();
      recompute_segment(state, begin, end);
      if (probing_) be_.synchronize();
      const double end_us = clock().now_us();
      recompute_us_ += end_us - start;
      if (tracer_) tracer_->record(EventKind::Recompute, step_, stage.stage, mb, start, end_us);
    }
    for (size_t i = end; i-- > begin;) {
      const bool need_dx = i > 0 || !stage.is_first();
      Tensor dx = layer_backward(state, i, std::move(dy), need_dx);
      if (!split_) weights_done(mb, i);
      state.layer_inputs[i] = Tensor();
      state.layer_saved[i].clear();
      dy = std::move(dx);
    }
    end = begin;
  }
  // Parameter gradients are checked once per step, by the gradient norm
  // (Trainer::global_grad_norm): a pass over every gradient after each
  // micro-batch cost 7% of an MLP step.
  state.grad_input = std::move(dy);
}

void Executor::post_recv(const Action& a) {
  MicroBatch& state = mbs_[key(a.mb)];
  if (a.kind == ActionKind::RECV_F) {
    PT_CHECK(!state.recv_f, "second " + to_string(a));
    state.recv_input = Tensor::empty(cur().input_shape(rows_), cur().input_dtype,
                                     MemCategory::Workspace);
    state.recv_f = posted(a, transport_.irecv(state.recv_input, peer_rank(a.stage - 1),
                                              tag(a.stage, kActivation, a.mb)));
  } else {
    PT_CHECK(!state.recv_b, "second " + to_string(a));
    state.grad_output = Tensor::empty(cur().output_shape(rows_), DType::F32,
                                      MemCategory::Workspace);
    state.recv_b = posted(a, transport_.irecv(state.grad_output, peer_rank(a.stage + 1),
                                              tag(a.stage, kGradient, a.mb)));
  }
}

void Executor::post_send(const Action& a) {
  MicroBatch& state = mbs_[key(a.mb)];
  Send send;
  if (a.kind == ActionKind::SEND_F) {
    PT_CHECK(state.output.defined(), to_string(a) + " before its F");
    send.buffer = std::move(state.output);
    send.pending = posted(a, transport_.isend(send.buffer, peer_rank(a.stage + 1),
                                              tag(a.stage + 1, kActivation, a.mb)));
  } else {
    PT_CHECK(state.grad_input.defined(), to_string(a) + " before its B");
    send.buffer = std::move(state.grad_input);
    send.pending = posted(a, transport_.isend(send.buffer, peer_rank(a.stage - 1),
                                              tag(a.stage - 1, kGradient, a.mb)));
  }
  sends_.push_back(std::move(send));
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
  if (tracer_) {
    const bool send = p.action.kind == ActionKind::SEND_F || p.action.kind == ActionKind::SEND_B;
    tracer_->record(send ? EventKind::Send : EventKind::Recv, step_, p.action.stage, p.action.mb,
                    p.posted_us, tracer_->now_us());
  }
  return true;
}

void Executor::poll_receives() {
  for (auto& [mb, state] : mbs_) {
    if (state.recv_f) poll(state.recv_f);
    if (state.recv_b) poll(state.recv_b);
  }
}

// The sends the running compute finishes before it starts
// (sends_finished_before): their receiver is taking them now, so the wait is
// one message's copy, and the compute's memory never holds their buffers.
void Executor::finish_sends_first() {
  if (action_index_ >= finish_first_.size() || finish_first_[action_index_] < 0) return;
  const Action& first = schedule_->ranks[transport_.rank()][finish_first_[action_index_]];
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
  if (!poll_until(progress, deck_.pipeline.timeout_s))
    throw TimeoutError(describe(p.action));
  if (!reaping_) reap_sends(false);
  const double end_us = clock().now_us();
  last_end_us_ = std::max(last_end_us_, end_us);
  if (tracer_) tracer_->record(EventKind::Wait, step_, p.action.stage, p.action.mb, start_us, end_us);
}

std::string Executor::describe(const Action& a) const {
  const bool is_send = a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B;
  const bool forward_dir = a.kind == ActionKind::SEND_F || a.kind == ActionKind::RECV_F;
  const int peer_stage = (forward_dir == is_send) ? a.stage + 1 : a.stage - 1;
  const char* what = forward_dir ? "activation" : "gradient";
  // The driver's phase ("in step 812", "in the evaluation after step 800");
  // the executor's own step and pass when it runs without one (tests).
  const std::string phase = wait_phase().empty()
                                ? (pass_ == Pass::Train ? "in step " : "in evaluation batch ") +
                                      std::to_string(step_)
                                : wait_phase();
  return "stage " + std::to_string(a.stage) + " timed out after " +
         format_seconds(deck_.pipeline.timeout_s) + " s " + phase + " waiting on " +
         to_string(a) + ": the " +
         what + " of micro-batch " + std::to_string(a.mb) + (is_send ? " to" : " from") +
         " rank " + std::to_string(peer_rank(peer_stage)) + " (stage " +
         std::to_string(peer_stage) + "); see pipeline.timeout_s";
}

}  // namespace pt
