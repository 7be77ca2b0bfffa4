// layers.hpp: layers with forward and backward, written against a Backend.
//
// A layer maps x (rows, in) to y (rows, out). Forward may save tensors that
// backward needs besides x; backward adds parameter gradients into Param::grad
// (gradient accumulation over micro-batches) and returns dx.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/base/deck_kinds.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

struct Param {
  std::string name;  // "unit3.linear.weight"
  Tensor value;      // shape of the parameter, e.g. (out, in)
  Tensor grad;       // same shape: accumulated over the micro-batches of a step
  Tensor state1;     // same shape: SGD momentum, or AdamW first moment
  Tensor state2;     // same shape: AdamW second moment (unused by SGD)
  // Zeroing this gradient may be left to its first accumulation (a GEMM with
  // beta = 0 overwrites it), which saves a pass over it every step. Set by
  // the layer that owns it (Linear's weight); see Optimizer::zero_grad.
  bool zero_by_overwrite = false;
  // The gradient reads as zero whatever its buffer holds: zero_grad set it,
  // the first accumulation clears it.
  bool grad_zero_pending = false;
  // A GEMM weight (a Linear's, a GPT dense layer's, the LM head's): matmul
  // reads it in the forward and in the input-gradient backward. In bf16 and
  // fp16 it may keep a low-precision copy (model/weight_copies.hpp). Set by
  // the layer that owns it.
  bool gemm_weight = false;
  // Not a trained weight but a running statistic its layer keeps (batch
  // normalisation's running mean and variance, conv_layers.hpp): its
  // gradient stays zero, the optimizer neither updates it nor keeps state
  // for it, and the layer writes `value` in Layer::end_step. Checkpoints,
  // rebalancing moves and digests carry it as any parameter's value.
  bool running_statistic = false;
  Tensor copy;                // same shape, BF16 or F16: value rounded; undefined: none
  uint64_t version = 1;       // of value: advanced by every write (note_value_written)
  uint64_t copy_version = 0;  // the version of value that `copy` was rounded from
};

// Makes p.grad hold what it reads as: zeros it when its zeroing is still
// pending. Everything that reads gradients outside the layers calls it first.
void settle_grad(Backend& be, Param& p);

// Everything a parameter carries from one step to the next, by name: "value",
// then "state1" and "state2" when defined (the gradient is zeroed every
// step). Checkpoints store these under params/<name>/<state name>, and
// dynamic rebalancing sends them when a unit changes stage.
struct ParamState {
  const char* name;
  Tensor* tensor;
};
std::vector<ParamState> param_state(Param& p);

// Every replica's step statistics (Layer::pack_step_statistics), gathered:
// `replicas` blocks of `block` doubles, replica r's at data + r * block,
// each holding that replica's `micro_batches` training forwards' values.
struct GatheredStatistics {
  const double* data = nullptr;
  int64_t replicas = 1;
  size_t block = 0;
  int64_t micro_batches = 0;
};

class Layer {
 public:
  Layer();  // counted in layer_build_counts()
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;
  virtual Shape output_shape(const Shape& input) const = 0;
  virtual std::vector<Param*> params() { return {}; }
  // Activation copies (training.activation_copies, model/activation_copies.hpp):
  // when on, what this layer keeps for its backward only as a GEMM operand
  // is kept rounded to the backend's GEMM precision (BF16 / F16), which its
  // GEMMs read as they are. Off until the run turns it on.
  void set_activation_copies(bool on) { activation_copies_ = on; }
  bool activation_copies() const { return activation_copies_; }
  // The input as this layer is handed it, and as the executor keeps it for
  // backward and recomputation: x itself, or, for a layer that reads its
  // input only as a GEMM operand (Linear), with activation copies on, x
  // rounded to the GEMM precision. forward, backward and recompute_saved
  // on the result give bitwise what they give on x.
  virtual Tensor input_operand(Backend& /*be*/, const Tensor& x) const { return x; }
  // y = f(x); `saved` receives what backward needs besides x.
  virtual Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) = 0;
  // Returns dx (undefined when !need_dx); adds into Param::grad.
  virtual Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                          const Tensor& dy, bool need_dx) = 0;
  // Selective recomputation: releases the saved tensors that are large and
  // cheap to recompute (attention scores and softmax); backward then
  // recomputes them, bitwise equal. Layers without such tensors keep all.
  virtual void drop_recomputable(std::vector<Tensor>& /*saved*/) {}
  // Split backward (zero-bubble schedules): backward_input is backward
  // without the weight-gradient products of the layer's dense parts (and the
  // whole gradient of an embedding, which has no input gradient); it appends
  // what they need (each product's input and output gradient) to `deferred`.
  // backward_weights(deferred) then adds exactly what backward would have
  // added, with the same calls on the same tensors, so the bits are equal.
  // Layers with nothing to defer do their whole backward in backward_input.
  virtual Tensor backward_input(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                                const Tensor& dy, bool need_dx, std::vector<Tensor>& deferred) {
    (void)deferred;
    return backward(be, x, saved, dy, need_dx);
  }
  virtual void backward_weights(Backend& /*be*/, const std::vector<Tensor>& /*deferred*/) {}
  // Recomputation of the last layer of a segment: refills `saved` exactly as
  // forward would, skipping work whose only use is the output y.
  virtual void recompute_saved(Backend& be, const Tensor& x, std::vector<Tensor>& saved) {
    forward(be, x, saved);
  }
  // Once per training step, after the optimizer step, on every layer of
  // every stage: commits what the step's training forwards accumulated
  // (batch normalisation's running statistics). Most layers keep nothing.
  virtual void end_step(Backend& /*be*/) {}
  // Data parallelism: what end_step will commit, shared among the replicas
  // before it, so that every replica commits the statistics of the global
  // batch (runtime/training_step.cpp). pack_step_statistics appends this
  // replica's values (a fixed layout, the same length on every replica);
  // unpack_step_statistics reads, from `all`, each replica's values at
  // `offset` within its block and replaces its own by them, its micro-batch
  // k of replica r becoming micro-batch r * micro_batches + k (the global
  // micro-batch, ExecutorConfig::global_micro_batch); it advances `offset`
  // past its values. Most layers keep nothing.
  virtual void pack_step_statistics(std::vector<double>& /*out*/) const {}
  virtual void unpack_step_statistics(const GatheredStatistics& /*all*/, size_t& /*offset*/) {}

  // x, kept for the backward only as a GEMM operand: its copy in be's GEMM
  // precision with activation copies on (gemm_operand_copy), else x.
  Tensor kept_gemm_operand(Backend& be, const Tensor& x) const;

 private:
  bool activation_copies_ = false;
};

// How a new layer's parameters start: with their initial values (drawn from
// the seed, or constants, as each layer documents), or allocated on the
// host and left unfilled, for the caller to place and fill (a rebalancing
// move receives an arriving unit's values and optimizer state from the stage
// that held it). Gradients start at zero either way.
enum class ParamInit { FromSeed, Uninitialised };

// What layer construction did in this process since it started: layers
// constructed, and parameter elements given initial values drawn from the
// RNG or set to a constant. Tests read them around a rebalancing move.
struct LayerBuildCounts {
  int64_t layers = 0;
  int64_t random_elements = 0;
  int64_t constant_elements = 0;
};
LayerBuildCounts layer_build_counts();

// Parameter construction shared by the layers (layers.cpp, gpt.cpp). A new
// parameter: value allocated on the host (where initial values are written)
// and not filled, gradient zeros of the same shape; move_parameters
// (model.hpp) places them on the backend's device.
Param new_param(const std::string& name, const Shape& shape);
// Initial values, written on the host element by element (each a function of
// (seed, stream, element), so independent of the partition) and counted:
// uniform in [-bound, bound), N(0, std^2), or a constant.
void fill_uniform(Tensor& t, float bound, uint64_t seed, uint64_t stream);
void fill_normal(Tensor& t, float std, uint64_t seed, uint64_t stream);
void fill_constant(Tensor& t, float value);

// y = x W^T + b. W: (out, in) uniform with standard deviation gain/sqrt(in)
// (gain sqrt(2) before a ReLU/GELU keeps the activation scale through deep
// stacks, gain 1 for the output layer), drawn from (seed, stream) so the values
// do not depend on the partition; b: (out) zeros.
std::unique_ptr<Layer> make_linear(const std::string& name, int64_t in, int64_t out,
                                   uint64_t seed, uint64_t stream, float gain,
                                   ParamInit init = ParamInit::FromSeed);
std::unique_ptr<Layer> make_relu();
std::unique_ptr<Layer> make_gelu();
std::unique_ptr<Layer> make_activation(ActivationKind kind);

// A loss at the end of the last stage. The gradient is scaled by
// grad_scale (1 / elements of the whole batch), so that accumulating over
// micro-batches gives the full-batch gradient.
class Loss {
 public:
  virtual ~Loss() = default;
  virtual std::string kind() const = 0;
  // Returns the summed (unnormalised) loss of these rows; writes dpred.
  virtual double forward_backward(Backend& be, const Tensor& pred, const Tensor& target,
                                  float grad_scale, Tensor& dpred) = 0;
  // The same, the loss left in `slot` of `batch` (Backend's ScalarBatch):
  // nothing waits for it until the batch is read.
  virtual void forward_backward_to(Backend& be, const Tensor& pred, const Tensor& target,
                                   float grad_scale, Tensor& dpred, ScalarBatch& batch,
                                   int64_t slot) = 0;
};
// Over every column of the predictions (for cross-entropy, every column a class).
std::unique_ptr<Loss> make_loss(LossKind kind);
// Softmax cross-entropy over the first `classes` columns of the predictions;
// the columns after them are padding (a GPT's padded vocabulary): they take
// no probability and get a gradient of exactly 0.
std::unique_ptr<Loss> make_cross_entropy_loss(int64_t classes);

}  // namespace pt
