// layers.cpp: parameter construction (counted), Linear, ReLU, GELU and the
// losses (MSE, softmax cross-entropy).
#include "pipetrain/model/layers.hpp"

#include <atomic>
#include <cmath>
#include <optional>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/model/activation_copies.hpp"
#include "pipetrain/model/weight_copies.hpp"

namespace pt {

void settle_grad(Backend& be, Param& p) {
  if (!p.grad_zero_pending) return;
  be.fill(p.grad, 0.f);
  p.grad_zero_pending = false;
}

std::vector<ParamState> param_state(Param& p) {
  std::vector<ParamState> state{{"value", &p.value}};
  if (p.state1.defined()) state.push_back({"state1", &p.state1});
  if (p.state2.defined()) state.push_back({"state2", &p.state2});
  return state;
}

namespace {

// layer_build_counts(), counted by the Layer constructor and the fills.
std::atomic<int64_t> layers_built{0}, random_filled{0}, constant_filled{0};

// The values of a parameter being initialised, which happens on the host.
float* host_values(Tensor& t) {
  PT_CHECK(t.device() == Device::CPU, "initial parameter values are written on the host");
  return t.f32();
}

}  // namespace

Layer::Layer() { layers_built.fetch_add(1, std::memory_order_relaxed); }

Tensor Layer::kept_gemm_operand(Backend& be, const Tensor& x) const {
  return activation_copies() ? gemm_operand_copy(be, x) : x;
}

LayerBuildCounts layer_build_counts() {
  LayerBuildCounts c;
  c.layers = layers_built.load();
  c.random_elements = random_filled.load();
  c.constant_elements = constant_filled.load();
  return c;
}

Param new_param(const std::string& name, const Shape& shape) {
  Param p;
  p.name = name;
  p.value = Tensor::empty(shape, DType::F32, MemCategory::Parameters, Device::CPU);
  p.grad = Tensor::zeros(shape, DType::F32, MemCategory::Gradients, Device::CPU);
  return p;
}

void fill_uniform(Tensor& t, float bound, uint64_t seed, uint64_t stream) {
  float* p = host_values(t);
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    p[i] = (2.f * uniform01(seed, stream, static_cast<uint64_t>(i)) - 1.f) * bound;
  random_filled.fetch_add(t.numel(), std::memory_order_relaxed);
}

void fill_normal(Tensor& t, float std, uint64_t seed, uint64_t stream) {
  float* p = host_values(t);
  for (int64_t i = 0, n = t.numel(); i < n; ++i)
    p[i] = std * normal01(seed, stream, static_cast<uint64_t>(i));
  random_filled.fetch_add(t.numel(), std::memory_order_relaxed);
}

void fill_constant(Tensor& t, float value) {
  float* p = host_values(t);
  for (int64_t i = 0, n = t.numel(); i < n; ++i) p[i] = value;
  constant_filled.fetch_add(t.numel(), std::memory_order_relaxed);
}

namespace {

Shape with_last(const Shape& shape, int64_t last) {
  Shape out = shape;
  out.back() = last;
  return out;
}

class Linear final : public Layer {
 public:
  Linear(const std::string& name, int64_t in, int64_t out, uint64_t seed, uint64_t stream,
         float gain, ParamInit init)
      : in_(in), out_(out), weight_(new_param(name + ".weight", {out, in})),
        bias_(new_param(name + ".bias", {out})) {
    weight_.zero_by_overwrite = true;
    weight_.gemm_weight = true;
    if (init == ParamInit::Uninitialised) return;
    fill_uniform(weight_.value, gain * std::sqrt(3.f / static_cast<float>(in)), seed, stream);
    fill_constant(bias_.value, 0.f);
  }
  std::string kind() const override { return "linear"; }
  Shape output_shape(const Shape& input) const override {
    PT_CHECK(!input.empty() && input.back() == in_, "linear input " + shape_string(input));
    return with_last(input, out_);
  }
  std::vector<Param*> params() override { return {&weight_, &bias_}; }
  // Every GEMM reads x as an operand and nothing else reads it: with
  // activation copies the layer is handed, and the executor keeps, x rounded.
  Tensor input_operand(Backend& be, const Tensor& x) const override {
    return kept_gemm_operand(be, x);
  }
  // Backward needs only x, which the executor keeps: nothing to recompute.
  void recompute_saved(Backend&, const Tensor&, std::vector<Tensor>& saved) override {
    saved.clear();
  }

  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>&) override {
    Tensor y = Tensor::empty(output_shape(x.shape()), DType::F32, MemCategory::Workspace,
                             be.device());
    be.linear_forward(x, weight_operand(be, weight_), &bias_.value, y);  // (rows, in) x (in, out) + bias
    return y;
  }

  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>&, const Tensor& dy,
                  bool need_dx) override {
    add_weight_grads(be, x, dy);
    return need_dx ? input_grad(be, x, dy) : Tensor();
  }
  // deferred: x (rows, in), dy (rows, out).
  Tensor backward_input(Backend& be, const Tensor& x, const std::vector<Tensor>&, const Tensor& dy,
                        bool need_dx, std::vector<Tensor>& deferred) override {
    deferred = {x, dy};
    return need_dx ? input_grad(be, x, dy) : Tensor();
  }
  void backward_weights(Backend& be, const std::vector<Tensor>& deferred) override {
    PT_CHECK(deferred.size() == 2, "linear weight gradients need backward_input's x and dy");
    add_weight_grads(be, deferred[0], deferred[1]);
  }

 private:
  void add_weight_grads(Backend& be, const Tensor& x, const Tensor& dy) {
    // dW += dy^T x: (out, in); the step's first one overwrites (0 + v == v exactly).
    const float beta = weight_.grad_zero_pending ? 0.f : 1.f;
    weight_.grad_zero_pending = false;
    be.matmul(dy, true, x, false, weight_.grad, 1.f, beta);
    be.accumulate_bias_grad(dy, bias_.grad);
  }
  Tensor input_grad(Backend& be, const Tensor& x, const Tensor& dy) {
    Tensor dx = Tensor::empty(x.shape(), DType::F32, MemCategory::Workspace, be.device());
    be.matmul(dy, false, weight_operand(be, weight_), false, dx, 1.f, 0.f);  // (rows, out) x (out, in)
    return dx;
  }

  int64_t in_, out_;
  Param weight_;  // (out, in)
  Param bias_;    // (out)
};

class Activation final : public Layer {
 public:
  explicit Activation(bool gelu) : gelu_(gelu) {}
  std::string kind() const override { return gelu_ ? "gelu" : "relu"; }
  Shape output_shape(const Shape& input) const override { return input; }
  void recompute_saved(Backend&, const Tensor&, std::vector<Tensor>& saved) override {
    saved.clear();
  }
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>&) override {
    Tensor y = Tensor::empty(x.shape(), DType::F32, MemCategory::Workspace, be.device());
    if (gelu_) be.gelu_forward(x, y);
    else be.relu_forward(x, y);
    return y;
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>&, const Tensor& dy,
                  bool need_dx) override {
    if (!need_dx) return Tensor();
    Tensor dx = Tensor::empty(x.shape(), DType::F32, MemCategory::Workspace, be.device());
    if (gelu_) be.gelu_backward(x, dy, dx);
    else be.relu_backward(x, dy, dx);
    return dx;
  }

 private:
  bool gelu_;
};

class MseLoss final : public Loss {
 public:
  std::string kind() const override { return "mse"; }
  double forward_backward(Backend& be, const Tensor& pred, const Tensor& target,
                          float grad_scale, Tensor& dpred) override {
    return be.mse_loss(pred, target, grad_scale, dpred);
  }
  void forward_backward_to(Backend& be, const Tensor& pred, const Tensor& target,
                           float grad_scale, Tensor& dpred, ScalarBatch& batch,
                           int64_t slot) override {
    be.mse_loss_to(pred, target, grad_scale, dpred, batch, slot);
  }
};

// Over the first classes_ columns of pred, or every column when unset.
class CrossEntropyLoss final : public Loss {
 public:
  explicit CrossEntropyLoss(std::optional<int64_t> classes) : classes_(classes) {}
  std::string kind() const override { return "cross_entropy"; }
  double forward_backward(Backend& be, const Tensor& pred, const Tensor& target,
                          float grad_scale, Tensor& dpred) override {
    return be.softmax_cross_entropy(pred, target, classes(pred), grad_scale, dpred);
  }
  void forward_backward_to(Backend& be, const Tensor& pred, const Tensor& target,
                           float grad_scale, Tensor& dpred, ScalarBatch& batch,
                           int64_t slot) override {
    be.softmax_cross_entropy_to(pred, target, classes(pred), grad_scale, dpred, batch, slot);
  }

 private:
  int64_t classes(const Tensor& pred) const { return classes_ ? *classes_ : pred.cols(); }

  std::optional<int64_t> classes_;  // real classes; pred's columns after them are padding
};

}  // namespace

std::unique_ptr<Layer> make_linear(const std::string& name, int64_t in, int64_t out,
                                   uint64_t seed, uint64_t stream, float gain, ParamInit init) {
  return std::make_unique<Linear>(name, in, out, seed, stream, gain, init);
}
std::unique_ptr<Layer> make_relu() { return std::make_unique<Activation>(false); }
std::unique_ptr<Layer> make_gelu() { return std::make_unique<Activation>(true); }

std::unique_ptr<Layer> make_activation(ActivationKind kind) {
  return kind == ActivationKind::Relu ? make_relu() : make_gelu();
}

std::unique_ptr<Loss> make_loss(LossKind kind) {
  if (kind == LossKind::Mse) return std::make_unique<MseLoss>();
  return std::make_unique<CrossEntropyLoss>(std::nullopt);
}

std::unique_ptr<Loss> make_cross_entropy_loss(int64_t classes) {
  return std::make_unique<CrossEntropyLoss>(classes);
}

}  // namespace pt
