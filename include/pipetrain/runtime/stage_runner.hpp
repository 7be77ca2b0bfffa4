// stage_runner.hpp: one stage of a rank, computed micro-batch by micro-batch.
//
// A StageRunner holds all that a pass changes on one stage: each
// micro-batch's kept tensors (layer inputs, saved tensors, with a split
// backward the weight products' inputs deferred to W), the stage's recompute
// policy and, on the last stage, the loss. It computes and never
// communicates or times: the Executor (executor.hpp) hands it inputs and
// output gradients, from a peer or from the runner of the neighbouring stage
// on the same rank, and times each of its F, B and W.
//
// With per-step weight gradients a stage's W of micro-batch 0 runs the
// weights of every micro-batch: each deferred tensor is stacked over the
// micro-batches (a Workspace copy; each piece is freed as it is copied) and
// the layer's backward_weights runs once on the stacks, so each
// weight-gradient product is one GEMM over all the step's rows; its W of the
// other micro-batches find their work done.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "pipetrain/model/data.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/executor_config.hpp"
#include "pipetrain/runtime/recompute.hpp"
#include "pipetrain/runtime/trace.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

enum class Pass { Train, Evaluate };

// One micro-batch on one stage, from its F to its W.
struct MicroBatchState {
  std::vector<Tensor> layer_inputs;              // (layers) input of each layer, when kept
  std::vector<std::vector<Tensor>> layer_saved;  // (layers) extra saved tensors
  Tensor output;                                 // (rows, out) stage output, until sent
  Tensor grad_output;                            // (rows, out) dL/d output
  Tensor grad_input;                             // (rows, in) dL/d input, until sent
  std::vector<std::vector<Tensor>> deferred;     // (layers) split backward: W's inputs
  bool forward_done = false;
  bool backward_done = false;
};

// The pass being run: the same for every stage of the rank.
struct PassContext {
  const Dataset* data = nullptr;
  int64_t step = 0;                // the batch
  Pass pass = Pass::Train;
  int micro_batches = 0;           // of the schedule
  bool split = false;              // B defers the weight gradients to W
  bool step_weight_grads = false;  // ... and W runs once per stage, for every micro-batch
  float loss_scale = 1.f;          // fp16: the loss gradient's factor; 1 otherwise
  bool probing = false;            // StageProbe: the recompute is timed apart from F
};

class StageRunner {
 public:
  // `tracer` (may be null) records the recompute events.
  StageRunner(StageModel& stage, RecomputePolicy policy, const ExecutorConfig& config,
              Backend& backend, Tracer* tracer);

  StageModel& model() const { return stage_; }
  int stage() const { return stage_.stage; }
  const RecomputePolicy& policy() const { return policy_; }

  // Starts a pass, forgetting the micro-batches of the last one, and rounds
  // again every low-precision weight copy of the stage whose master changed
  // since it was made (model/weight_copies.hpp: the invariant's last guard).
  void begin_pass(const PassContext& pass);
  // Reads the pass's micro-batch losses (last stage: one wait for all of
  // them) and checks them; throws on a non-finite one unless fp16 loss
  // scaling handles it.
  void end_pass();
  MicroBatchState& state(int mb) { return mbs_[mb]; }  // made on first use
  MicroBatchState& forwarded(int mb);  // whose F ran, for its B
  // First stage: micro-batch `mb`'s inputs, on the backend's device.
  Tensor data_input(int mb) const;

  // F from input `x`: keeps what B needs under the policy; the last stage
  // also computes the loss and its gradient.
  void forward(int mb, Tensor x);
  // B from output gradient `dy`, recomputing what the policy dropped; leaves
  // the input gradient in state(mb).grad_input.
  void backward(int mb, Tensor dy);
  // Micro-batches W of `mb` computes: 1; with per-step weight gradients all of
  // them for micro-batch 0 and none (the pass of 0 did it) for the others.
  // Throws when its B has not run.
  int weight_pass_size(int mb);
  void weights(int mb);

  // Last stage, this pass: summed loss terms, and each micro-batch's.
  double loss_sum() const { return loss_sum_; }
  const std::vector<double>& micro_batch_losses() const { return mb_losses_; }
  // The recompute inside the last backward (0 unless it recomputed).
  double recompute_seconds() const { return recompute_us_ * 1e-6; }

 private:
  void compute_loss(int mb, MicroBatchState& state, const Tensor& y);
  void recompute_segment(MicroBatchState& state, size_t begin, size_t end);
  void recompute_timed(MicroBatchState& state, int mb, size_t begin, size_t end);
  Tensor layer_backward(MicroBatchState& state, size_t i, Tensor dy, bool need_dx);
  void weights_of_step();
  std::vector<Tensor> stacked_deferred(const std::vector<MicroBatchState*>& states, size_t layer);
  void weights_done(int mb, size_t layer);  // the reduction hook, when training
  double now_us() const { return tracer_ ? tracer_->now_us() : local_clock_.now_us(); }

  StageModel& stage_;
  RecomputePolicy policy_;
  ExecutorConfig config_;
  Backend& be_;
  Tracer* tracer_;
  Tracer local_clock_{false};      // times the recompute when no tracer is given
  PassContext pass_;
  std::map<int, MicroBatchState> mbs_;  // by micro-batch
  double loss_sum_ = 0.0;
  std::vector<double> mb_losses_;  // (micro-batches) last stage
  std::unique_ptr<ScalarBatch> loss_slots_;  // (micro-batches) on the device, read at end_pass
  std::vector<int> loss_order_;    // micro-batches in the order their losses were computed
  double recompute_us_ = 0.0;
};

}  // namespace pt
