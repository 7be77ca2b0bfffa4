// stage_runner.cpp: F, B and W of one stage under its recompute policy.
#include "pipetrain/runtime/stage_runner.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/forward_context.hpp"
#include "pipetrain/model/weight_copies.hpp"

namespace pt {

StageRunner::StageRunner(StageModel& stage, RecomputePolicy policy, const ExecutorConfig& config,
                         Backend& backend, Tracer* tracer)
    : stage_(stage), policy_(std::move(policy)), config_(config), be_(backend), tracer_(tracer) {}

void StageRunner::begin_pass(const PassContext& pass) {
  pass_ = pass;
  mbs_.clear();
  loss_sum_ = 0.0;
  mb_losses_.assign(static_cast<size_t>(pass.micro_batches), 0.0);
  loss_order_.clear();
  const int slots = std::max(1, pass.micro_batches);  // a probe's pass has none: micro-batch 0
  if (stage_.is_last() && (!loss_slots_ || loss_slots_->size() != slots))
    loss_slots_ = be_.make_scalar_batch(slots);
  // Weights change only between passes; a weight copy that fell behind (a
  // checkpoint load, a move) is rounded again before any GEMM reads it.
  refresh_weight_copies(be_, stage_.params());
}

// The losses come back in one read; they are added in the order they were
// computed (ascending micro-batches), as when each was read at once.
void StageRunner::end_pass() {
  mbs_.clear();
  if (loss_order_.empty()) return;
  const std::vector<double> losses = loss_slots_->read();
  for (int mb : loss_order_) {
    const double loss = losses[static_cast<size_t>(mb)];
    // With fp16 loss scaling an overflow is the scaler's to handle: the step
    // is skipped and the scale backs off (LossScaler::finish_backward).
    if (!std::isfinite(loss) && !config_.loss_scaling)
      throw Error("non-finite loss at step " + std::to_string(pass_.step) + ", stage " +
                  std::to_string(stage_.stage) + ", micro-batch " +
                  std::to_string(config_.global_micro_batch(mb)));
    loss_sum_ += loss;
    if (static_cast<size_t>(mb) < mb_losses_.size()) mb_losses_[static_cast<size_t>(mb)] = loss;
  }
  loss_order_.clear();
}

MicroBatchState& StageRunner::forwarded(int mb) {
  auto it = mbs_.find(mb);
  PT_CHECK(it != mbs_.end() && it->second.forward_done,
           "B of micro-batch " + std::to_string(mb) + " before its F");
  return it->second;
}

Tensor StageRunner::data_input(int mb) const {
  return pass_.data->inputs(config_.first_sample(pass_.step, mb), config_.rows).to(be_.device());
}

void StageRunner::forward(int mb, Tensor x) {
  MicroBatchState& state = mbs_[mb];
  const size_t n = stage_.layers.size();
  const bool stash = pass_.pass == Pass::Train;
  // Batch normalisation keeps a training forward's statistics by micro-batch;
  // a probe's forward (the profiler's) computes as training but keeps none.
  const ForwardPurpose purpose = !stash         ? ForwardPurpose::Eval
                                 : pass_.probing ? ForwardPurpose::Recompute
                                                 : ForwardPurpose::Train;
  const ForwardScope scope({purpose, mb});
  state.layer_inputs.assign(n, Tensor());
  state.layer_saved.assign(n, {});
  for (size_t i = 0; i < n; ++i) {
    x = stage_.layers[i]->input_operand(be_, x);  // with activation copies, maybe rounded
    Tensor y = stage_.layers[i]->forward(be_, x, state.layer_saved[i]);
    if (stash && policy_.keeps_input(i)) {
      x.retag(MemCategory::Activations);  // kept for the backward
      state.layer_inputs[i] = std::move(x);
    }
    if (stash && policy_.keeps_saved()) {
      if (policy_.kind == RecomputePolicy::Kind::Selective)
        stage_.layers[i]->drop_recomputable(state.layer_saved[i]);
      for (Tensor& t : state.layer_saved[i]) t.retag(MemCategory::Activations);
    } else {
      state.layer_saved[i].clear();
    }
    x = std::move(y);
  }
  state.forward_done = true;
  if (stage_.is_last()) compute_loss(mb, state, x);
  else state.output = std::move(x);
}

// The last stage: the loss of the micro-batch and its gradient, scaled so
// that the micro-batches' gradients add up to the batch mean's.
void StageRunner::compute_loss(int mb, MicroBatchState& state, const Tensor& y) {
  const int64_t terms = stage_.loss_terms_per_sample;
  Tensor target = pass_.data->targets(config_.first_sample(pass_.step, mb), config_.rows)
                      .to(be_.device());
  state.grad_output = Tensor::empty(y.shape(), DType::F32, MemCategory::Workspace, y.device());
  const float grad_scale =
      static_cast<float>(pass_.loss_scale / static_cast<double>(config_.batch_size * terms));
  stage_.loss->forward_backward_to(be_, y, target, grad_scale, state.grad_output, *loss_slots_, mb);
  loss_order_.push_back(mb);  // read and checked at end_pass
  if (pass_.pass == Pass::Train) state.grad_output.retag(MemCategory::Activations);
  else state.grad_output = Tensor();
}

// Re-runs the forward of layers [begin, end) from the kept input of `begin`,
// keeping every input and saved tensor (as workspace) for the backward that
// follows at once. The last layer's output is not needed: it only refills
// its saved tensors.
void StageRunner::recompute_segment(MicroBatchState& state, size_t begin, size_t end) {
  Tensor x = state.layer_inputs[begin];  // as the forward kept it (input_operand)
  for (size_t i = begin; i + 1 < end; ++i) {
    Tensor y = stage_.layers[i]->forward(be_, x, state.layer_saved[i]);
    state.layer_inputs[i] = std::move(x);
    x = stage_.layers[i + 1]->input_operand(be_, y);
  }
  stage_.layers[end - 1]->recompute_saved(be_, x, state.layer_saved[end - 1]);
  state.layer_inputs[end - 1] = std::move(x);
}

// The recompute of one segment, timed (and traced as a Recompute event).
void StageRunner::recompute_timed(MicroBatchState& state, int mb, size_t begin, size_t end) {
  if (pass_.probing) be_.synchronize();  // GPU: the forward's kernels are not the recompute's
  const double start_us = now_us();
  const ForwardScope purpose({ForwardPurpose::Recompute, mb});  // reproduces, records nothing
  recompute_segment(state, begin, end);
  if (pass_.probing) be_.synchronize();
  const double end_us = now_us();
  recompute_us_ += end_us - start_us;
  if (tracer_) tracer_->record(EventKind::Recompute, pass_.step, stage_.stage, mb, start_us, end_us);
}

void StageRunner::backward(int mb, Tensor dy) {
  MicroBatchState& state = mbs_[mb];
  recompute_us_ = 0.0;
  if (pass_.split) state.deferred.assign(stage_.layers.size(), {});
  // Segments in reverse: recompute a segment's forward when the policy
  // dropped it, then run its backward, releasing the stash as it goes.
  for (size_t end = stage_.layers.size(); end > 0;) {
    const size_t begin = policy_.segment_start(end - 1);
    if (!policy_.keeps_saved()) recompute_timed(state, mb, begin, end);
    for (size_t i = end; i-- > begin;) {
      const bool need_dx = i > 0 || !stage_.is_first();
      Tensor dx = layer_backward(state, i, std::move(dy), need_dx);
      if (!pass_.split) weights_done(mb, i);
      state.layer_inputs[i] = Tensor();
      state.layer_saved[i].clear();
      dy = std::move(dx);
    }
    end = begin;
  }
  // Parameter gradients are checked once per step, by the gradient norm
  // (StepCollectives::global_grad_norm): a pass over every gradient after each
  // micro-batch cost 7% of an MLP step.
  state.grad_input = std::move(dy);
  state.backward_done = true;
}

// One layer's backward: fused, or (split) the input gradient, keeping what
// W needs as activations.
Tensor StageRunner::layer_backward(MicroBatchState& state, size_t i, Tensor dy, bool need_dx) {
  Layer& layer = *stage_.layers[i];
  if (!pass_.split)
    return layer.backward(be_, state.layer_inputs[i], state.layer_saved[i], dy, need_dx);
  Tensor dx = layer.backward_input(be_, state.layer_inputs[i], state.layer_saved[i], dy, need_dx,
                                   state.deferred[i]);
  for (Tensor& t : state.deferred[i]) t.retag(MemCategory::Activations);
  return dx;
}

int StageRunner::weight_pass_size(int mb) {
  if (pass_.step_weight_grads && mb == 0) {
    for (int m = 0; m < pass_.micro_batches; ++m) {
      auto it = mbs_.find(m);
      PT_CHECK(it != mbs_.end() && it->second.backward_done && !it->second.deferred.empty(),
               "the weight-gradient pass of stage " + std::to_string(stage_.stage) +
                   " before B of micro-batch " + std::to_string(m));
    }
    return pass_.micro_batches;
  }
  auto it = mbs_.find(mb);
  if (pass_.step_weight_grads) {  // the pass of micro-batch 0 did it
    PT_CHECK(it != mbs_.end() && it->second.backward_done && it->second.deferred.empty(),
             "W of micro-batch " + std::to_string(mb) + " of stage " +
                 std::to_string(stage_.stage) + " without the stage's pass of weight gradients");
    return 0;
  }
  PT_CHECK(it != mbs_.end() && it->second.backward_done && !it->second.deferred.empty(),
           "W of micro-batch " + std::to_string(mb) + " before its B");
  return 1;
}

// W: the weight gradients B deferred, layer by layer as B ran them.
void StageRunner::weights(int mb) {
  if (pass_.step_weight_grads) return weights_of_step();
  MicroBatchState& state = mbs_.at(mb);
  for (size_t i = state.deferred.size(); i-- > 0;) {
    stage_.layers[i]->backward_weights(be_, state.deferred[i]);
    state.deferred[i].clear();
    weights_done(mb, i);
  }
  state.deferred.clear();
}

// Per-step weight gradients: layer by layer in reverse, the deferred tensors
// of all micro-batches stacked in micro-batch order, one backward_weights.
void StageRunner::weights_of_step() {
  const int n = pass_.micro_batches;
  std::vector<MicroBatchState*> states;
  for (int mb = 0; mb < n; ++mb) states.push_back(&mbs_.at(mb));
  for (size_t i = states.front()->deferred.size(); i-- > 0;) {
    const std::vector<Tensor> stacked = stacked_deferred(states, i);
    stage_.layers[i]->backward_weights(be_, stacked);
    for (int mb = 0; mb < n; ++mb) weights_done(mb, i);
  }
  for (MicroBatchState* state : states) state->deferred.clear();
}

// Layer `layer`'s deferred tensors of `states`, each stacked along dim 0 in
// micro-batch order; each piece is freed once copied.
std::vector<Tensor> StageRunner::stacked_deferred(const std::vector<MicroBatchState*>& states,
                                                  size_t layer) {
  std::vector<Tensor> stacked(states.front()->deferred[layer].size());
  for (size_t j = 0; j < stacked.size(); ++j) {
    const Tensor& first = states.front()->deferred[layer][j];
    Shape shape = first.shape();
    shape[0] *= static_cast<int64_t>(states.size());
    stacked[j] = Tensor::empty(shape, first.dtype(), MemCategory::Workspace, first.device());
    int64_t row = 0;
    for (MicroBatchState* state : states) {
      Tensor& piece = state->deferred[layer][j];
      copy_rows_into(piece, stacked[j], row);
      row += piece.dim(0);
      piece = Tensor();
    }
  }
  return stacked;
}

void StageRunner::weights_done(int mb, size_t layer) {
  if (config_.reduction.layer_done && pass_.pass == Pass::Train && !pass_.probing)
    config_.reduction.layer_done(stage_.stage, mb, layer);
}

}  // namespace pt
