// conv_layers.cpp: the convolutional layers (conv_layers.hpp): Conv2d,
// normalisation, pooling, the residual block and the classification head.
// Two building blocks, a convolution and a normalisation with their
// parameters, serve both the single layers and the residual block, which
// calls them directly and keeps its intermediate tensors in `saved`.
#include "pipetrain/model/conv_layers.hpp"

#include <cmath>
#include <map>
#include <utility>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/forward_context.hpp"

namespace pt {

namespace {

ConvKernels& conv_kernels(Backend& be, const std::string& layer) {
  return require_kernels<ConvKernels>(be, "convolutional layer \"" + layer + "\"");
}

Tensor new_like(Backend& be, const Shape& shape) {
  return Tensor::empty(shape, DType::F32, MemCategory::Workspace, be.device());
}

// A K x K convolution's weight (out, in, K, K), optional bias (out), geometry.
class ConvUnit {
 public:
  ConvUnit(const std::string& name, int64_t in, int64_t out, int64_t kernel, Conv2dGeometry g,
           bool bias, uint64_t seed, uint64_t stream, float gain, ParamInit init)
      : name_(name), g_(g), weight_(new_param(name + ".weight", {out, in, kernel, kernel})) {
    if (bias) bias_ = new_param(name + ".bias", {out});
    if (init == ParamInit::Uninitialised) return;
    const float fan_in = static_cast<float>(in * kernel * kernel);
    fill_uniform(weight_.value, gain * std::sqrt(3.f / fan_in), seed, stream);
    if (bias) fill_constant(bias_.value, 0.f);
  }
  void add_params(std::vector<Param*>& out) {
    out.push_back(&weight_);
    if (has_bias()) out.push_back(&bias_);
  }
  Shape output_shape(const Shape& x) const { return conv2d_output_shape(x, weight_.value.shape(), g_); }

  Tensor forward(Backend& be, const Tensor& x) {
    Tensor y = new_like(be, output_shape(x.shape()));
    conv_kernels(be, name_).conv2d_forward(x, weight_.value, has_bias() ? &bias_.value : nullptr,
                                           g_, y);
    return y;
  }
  // Adds the parameter gradients; returns dx (undefined unless need_dx).
  Tensor backward(Backend& be, const Tensor& x, const Tensor& dy, bool need_dx) {
    ConvKernels& k = conv_kernels(be, name_);
    k.conv2d_backward_weights(x, dy, g_, weight_.grad, has_bias() ? &bias_.grad : nullptr);
    if (!need_dx) return Tensor();
    Tensor dx = new_like(be, x.shape());
    k.conv2d_backward_data(dy, weight_.value, g_, dx);
    return dx;
  }

 private:
  bool has_bias() const { return bias_.value.defined(); }

  std::string name_;
  Conv2dGeometry g_;
  Param weight_;  // (out, in, K, K)
  Param bias_;    // (out), or undefined
};

// A running statistic of batch normalisation (conv_layers.hpp, NormSpec):
// `value` starts at zeros (mean) or ones (variance).
Param running_statistic(const std::string& name, int64_t channels, float start, ParamInit init) {
  Param p = new_param(name, {channels});
  p.running_statistic = true;
  if (init == ParamInit::FromSeed) fill_constant(p.value, start);
  return p;
}

// A host (C) vector of float: a micro-batch's statistics, as the layer keeps them.
Tensor host_vector(int64_t C) {
  return Tensor::empty({C}, DType::F32, MemCategory::Workspace, Device::CPU);
}

// A normalisation over `channels` channels: gamma, beta (C); batch
// normalisation also running_mean, running_var (C) and the statistics of
// the step's training forwards, by micro-batch, until end_step.
class NormUnit {
 public:
  NormUnit(const std::string& name, int64_t channels, NormSpec spec, ParamInit init)
      : name_(name), spec_(spec), gamma_(new_param(name + ".gamma", {channels})),
        beta_(new_param(name + ".beta", {channels})) {
    PT_CHECK(spec.kind == NormKind::Batch || (spec.groups >= 1 && channels % spec.groups == 0),
             "normalisation \"" + name + "\": " + std::to_string(spec.groups) +
                 " groups do not divide its " + std::to_string(channels) + " channels");
    if (batch()) {
      running_mean_ = running_statistic(name + ".running_mean", channels, 0.f, init);
      running_var_ = running_statistic(name + ".running_var", channels, 1.f, init);
    }
    if (init == ParamInit::Uninitialised) return;
    fill_constant(gamma_.value, 1.f);
    fill_constant(beta_.value, 0.f);
  }
  void add_params(std::vector<Param*>& out) {
    out.push_back(&gamma_);
    out.push_back(&beta_);
    if (!batch()) return;
    out.push_back(&running_mean_);
    out.push_back(&running_var_);
  }
  // Appends mean and rstd (the statistics backward needs) to `saved`; an
  // evaluation forward of batch normalisation, which has no backward,
  // appends two undefined tensors in their place.
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) {
    const int64_t stats = batch() ? x.dim(1) : x.dim(0) * spec_.groups;
    Tensor y = new_like(be, x.shape()), mean = new_like(be, {stats}), rstd = new_like(be, {stats});
    ConvKernels& k = conv_kernels(be, name_);
    const ForwardContext& context = forward_context();
    if (!batch()) {
      k.group_norm_forward(x, gamma_.value, beta_.value, spec_.groups, spec_.eps, y, mean, rstd);
    } else if (context.purpose == ForwardPurpose::Eval) {
      k.batch_norm_inference(x, gamma_.value, beta_.value, running_mean_.value,
                             running_var_.value, spec_.eps, y);
      mean = rstd = Tensor();
    } else {
      Tensor var = new_like(be, {stats});
      k.batch_norm_forward(x, gamma_.value, beta_.value, spec_.eps, y, mean, rstd, &var);
      if (context.purpose == ForwardPurpose::Train)
        step_stats_[context.micro_batch] = {mean.to(Device::CPU), var.to(Device::CPU),
                                            x.dim(0) * x.dim(2) * x.dim(3)};
    }
    saved.push_back(mean);
    saved.push_back(rstd);
    return y;
  }
  // Batch normalisation: the step's micro-batches, in ascending order, as
  // one batch (its mean, and its variance made unbiased) move the running
  // statistics by `momentum`; in double, each value rounded once.
  void end_step() {
    if (step_stats_.empty()) return;
    const int64_t C = gamma_.value.numel();
    double count = 0.0;
    for (const auto& [mb, s] : step_stats_) count += static_cast<double>(s.count);
    Tensor mean = running_mean_.value.to(Device::CPU, MemCategory::Workspace);
    Tensor var = running_var_.value.to(Device::CPU, MemCategory::Workspace);
    const double m = spec_.momentum;
    for (int64_t c = 0; c < C; ++c) {
      double step_mean = 0.0, step_var = 0.0;
      for (const auto& [mb, s] : step_stats_) step_mean += s.count * static_cast<double>(s.mean.f32()[c]);
      step_mean /= count;
      for (const auto& [mb, s] : step_stats_) {
        const double d = s.mean.f32()[c] - step_mean;
        step_var += s.count * (s.var.f32()[c] + d * d);
      }
      step_var = count > 1.0 ? step_var / (count - 1.0) : step_var / count;
      mean.f32()[c] = static_cast<float>((1.0 - m) * mean.f32()[c] + m * step_mean);
      var.f32()[c] = static_cast<float>((1.0 - m) * var.f32()[c] + m * step_var);
    }
    copy_tensor(mean, running_mean_.value);
    copy_tensor(var, running_var_.value);
    step_stats_.clear();
  }
  // Data parallelism (Layer::pack_step_statistics): per micro-batch, in
  // ascending order, its count, then its C means and C variances.
  void pack_step_statistics(std::vector<double>& out) const {
    if (!batch()) return;
    for (const auto& [mb, s] : step_stats_) {
      out.push_back(static_cast<double>(s.count));
      for (const Tensor* t : {&s.mean, &s.var})
        for (int64_t c = 0; c < t->numel(); ++c) out.push_back(t->f32()[c]);
    }
  }
  // Every replica's micro-batches in place of this one's, keyed by their
  // global micro-batch (Layer::unpack_step_statistics).
  void unpack_step_statistics(const GatheredStatistics& all, size_t& offset) {
    if (!batch()) return;
    const int64_t C = gamma_.value.numel(), local = static_cast<int64_t>(step_stats_.size());
    PT_CHECK(local == all.micro_batches,
             "normalisation \"" + name_ + "\": statistics of " + std::to_string(local) +
                 " micro-batches kept, the step had " + std::to_string(all.micro_batches));
    const size_t per = static_cast<size_t>(1 + 2 * C);
    std::map<int, MicroBatchStats> global;
    for (int64_t r = 0; r < all.replicas; ++r) {
      const double* block = all.data + static_cast<size_t>(r) * all.block + offset;
      for (int64_t k = 0; k < local; ++k) {
        const double* v = block + static_cast<size_t>(k) * per;
        MicroBatchStats s{host_vector(C), host_vector(C), static_cast<int64_t>(v[0])};
        for (int64_t c = 0; c < C; ++c) {
          s.mean.f32()[c] = static_cast<float>(v[1 + c]);  // exact: packed from floats
          s.var.f32()[c] = static_cast<float>(v[1 + C + c]);
        }
        global[static_cast<int>(r * local + k)] = std::move(s);
      }
    }
    step_stats_ = std::move(global);
    offset += static_cast<size_t>(local) * per;
  }
  // mean, rstd: forward's. Adds dgamma, dbeta; returns dx.
  Tensor backward(Backend& be, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                  const Tensor& dy) {
    Tensor dx = new_like(be, x.shape());
    ConvKernels& k = conv_kernels(be, name_);
    if (spec_.kind == NormKind::Group)
      k.group_norm_backward(x, gamma_.value, mean, rstd, spec_.groups, dy, dx, gamma_.grad,
                            beta_.grad);
    else
      k.batch_norm_backward(x, gamma_.value, mean, rstd, dy, dx, gamma_.grad, beta_.grad);
    return dx;
  }

 private:
  bool batch() const { return spec_.kind == NormKind::Batch; }

  // One training forward's batch statistics: mean and biased variance (C),
  // on the host, over `count` values per channel.
  struct MicroBatchStats {
    Tensor mean, var;
    int64_t count = 0;
  };

  std::string name_;
  NormSpec spec_;
  Param gamma_;  // (C)
  Param beta_;   // (C)
  Param running_mean_;  // (C), batch only
  Param running_var_;   // (C), batch only: unbiased
  std::map<int, MicroBatchStats> step_stats_;  // by micro-batch, until end_step
};

class Conv2d final : public Layer {
 public:
  explicit Conv2d(ConvUnit unit) : unit_(std::move(unit)) {}
  std::string kind() const override { return "conv2d"; }
  Shape output_shape(const Shape& input) const override { return unit_.output_shape(input); }
  std::vector<Param*> params() override {
    std::vector<Param*> out;
    unit_.add_params(out);
    return out;
  }
  void recompute_saved(Backend&, const Tensor&, std::vector<Tensor>& saved) override {
    saved.clear();  // backward needs only x
  }
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>&) override {
    return unit_.forward(be, x);
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>&, const Tensor& dy,
                  bool need_dx) override {
    return unit_.backward(be, x, dy, need_dx);
  }

 private:
  ConvUnit unit_;
};

// saved: mean, rstd.
class Norm final : public Layer {
 public:
  Norm(NormUnit unit, NormKind kind) : unit_(std::move(unit)), kind_(kind) {}
  std::string kind() const override {
    return kind_ == NormKind::Group ? "group_norm" : "batch_norm";
  }
  Shape output_shape(const Shape& input) const override { return input; }
  std::vector<Param*> params() override {
    std::vector<Param*> out;
    unit_.add_params(out);
    return out;
  }
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    saved.clear();
    return unit_.forward(be, x, saved);
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool) override {
    PT_CHECK(saved.size() == 2, "normalisation backward needs forward's mean and rstd");
    return unit_.backward(be, x, saved[0], saved[1], dy);  // dgamma, dbeta need it anyway
  }
  void end_step(Backend&) override { unit_.end_step(); }
  void pack_step_statistics(std::vector<double>& out) const override {
    unit_.pack_step_statistics(out);
  }
  void unpack_step_statistics(const GatheredStatistics& all, size_t& offset) override {
    unit_.unpack_step_statistics(all, offset);
  }

 private:
  NormUnit unit_;
  NormKind kind_;
};

// saved: max pooling's workspace (I32), nothing for average pooling.
class Pool2d final : public Layer {
 public:
  explicit Pool2d(Pool2dGeometry g) : g_(g) {}
  std::string kind() const override { return g_.kind == PoolKind::Max ? "max_pool" : "avg_pool"; }
  Shape output_shape(const Shape& input) const override { return pool2d_output_shape(input, g_); }
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    ConvKernels& k = conv_kernels(be, kind());
    Tensor y = new_like(be, output_shape(x.shape()));
    saved.clear();
    if (g_.kind == PoolKind::Max)
      saved.push_back(Tensor::empty({k.pool2d_workspace_numel(x.shape(), g_)}, DType::I32,
                                    MemCategory::Workspace, be.device()));
    k.pool2d_forward(x, g_, y, saved.empty() ? nullptr : &saved[0]);
    return y;
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool need_dx) override {
    if (!need_dx) return Tensor();
    Tensor dx = new_like(be, x.shape());
    conv_kernels(be, kind()).pool2d_backward(dy, g_, saved.empty() ? nullptr : &saved[0], dx);
    return dx;
  }

 private:
  Pool2dGeometry g_;
};

// The residual block of conv_layers.hpp. saved, in order: a1 (conv1's
// output), mean1, rstd1, the first activation's tensor (relu: its output h,
// positive exactly where its input is; gelu: its input n1, from which the
// backward recomputes h for conv2's weight gradient rather than keep both),
// a2, mean2, rstd2, s (the sum before the last activation), then with a
// projection ap, meanp, rstdp.
class ResidualBlock final : public Layer {
 public:
  ResidualBlock(const std::string& name, int64_t in, int64_t out, int64_t stride, NormSpec norm,
                uint64_t seed, uint64_t stream, ParamInit init, ActivationKind activation)
      : name_(name), activation_(activation), act_(make_activation(activation)),
        conv1_(name + ".conv1", in, out, 3, {stride, 1}, false, seed, stream, std::sqrt(2.f), init),
        norm1_(name + ".norm1", out, norm, init),
        conv2_(name + ".conv2", out, out, 3, {1, 1}, false, seed, stream + 1, std::sqrt(2.f), init),
        norm2_(name + ".norm2", out, norm, init) {
    if (in == out && stride == 1) return;
    proj_conv_ = std::make_unique<ConvUnit>(name + ".proj", in, out, 1, Conv2dGeometry{stride, 0},
                                            false, seed, stream + 2, 1.f, init);
    proj_norm_ = std::make_unique<NormUnit>(name + ".proj_norm", out, norm, init);
  }
  std::string kind() const override { return "residual_block"; }
  Shape output_shape(const Shape& input) const override {
    return conv2_.output_shape(conv1_.output_shape(input));
  }
  std::vector<Param*> params() override {
    std::vector<Param*> out;
    conv1_.add_params(out);
    norm1_.add_params(out);
    conv2_.add_params(out);
    norm2_.add_params(out);
    if (proj_conv_) {
      proj_conv_->add_params(out);
      proj_norm_->add_params(out);
    }
    return out;
  }

  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    saved.clear();
    const Tensor a1 = conv1_.forward(be, x);                 // (N, out, OH, OW)
    saved.push_back(a1);
    const Tensor n1 = norm1_.forward(be, a1, saved);         // appends mean1, rstd1
    std::vector<Tensor> none;  // the activation keeps nothing
    const Tensor h = act_->forward(be, n1, none);
    saved.push_back(activation_ == ActivationKind::Relu ? h : n1);
    const Tensor a2 = conv2_.forward(be, h);
    saved.push_back(a2);
    Tensor s = norm2_.forward(be, a2, saved);                // appends mean2, rstd2
    be.add(s, skip_forward(be, x, saved), s);
    saved.insert(saved.begin() + kS, s);                     // s, before the projection's
    return act_->forward(be, s, none);
  }

  void end_step(Backend&) override {
    norm1_.end_step();
    norm2_.end_step();
    if (proj_norm_) proj_norm_->end_step();
  }
  void pack_step_statistics(std::vector<double>& out) const override {
    norm1_.pack_step_statistics(out);
    norm2_.pack_step_statistics(out);
    if (proj_norm_) proj_norm_->pack_step_statistics(out);
  }
  void unpack_step_statistics(const GatheredStatistics& all, size_t& offset) override {
    norm1_.unpack_step_statistics(all, offset);
    norm2_.unpack_step_statistics(all, offset);
    if (proj_norm_) proj_norm_->unpack_step_statistics(all, offset);
  }

  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool need_dx) override {
    PT_CHECK(saved.size() == (proj_conv_ ? 11u : 8u),
             "residual block \"" + name_ + "\" backward needs forward's saved tensors");
    const Tensor ds = act_->backward(be, saved[kS], {}, dy, true);  // the gradient of s, shared by both paths
    Tensor da2 = norm2_.backward(be, saved[kA2], saved[kA2 + 1], saved[kA2 + 2], ds);
    // relu: h itself; gelu: h again from n1, as the forward computed it.
    std::vector<Tensor> none;
    const Tensor h = activation_ == ActivationKind::Relu ? saved[kH] : act_->forward(be, saved[kH], none);
    Tensor dh = conv2_.backward(be, h, da2, true);
    // From the activation's input n1; relu's from its output h, positive exactly where n1 is.
    const Tensor dn1 = act_->backward(be, saved[kH], {}, dh, true);
    Tensor da1 = norm1_.backward(be, saved[kA1], saved[kA1 + 1], saved[kA1 + 2], dn1);
    Tensor dx = conv1_.backward(be, x, da1, need_dx);
    if (proj_conv_) {
      Tensor dap = proj_norm_->backward(be, saved[kP], saved[kP + 1], saved[kP + 2], ds);
      Tensor dx_skip = proj_conv_->backward(be, x, dap, need_dx);
      if (need_dx) be.add(dx, dx_skip, dx);
    } else if (need_dx) {
      be.add(dx, ds, dx);
    }
    return dx;
  }

 private:
  // Indices into saved.
  static constexpr size_t kA1 = 0, kH = 3, kA2 = 4, kS = 7, kP = 8;

  // x itself, or the projection's output (appending ap, meanp, rstdp).
  Tensor skip_forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) {
    if (!proj_conv_) return x;
    Tensor ap = proj_conv_->forward(be, x);
    saved.push_back(ap);
    return proj_norm_->forward(be, ap, saved);
  }

  std::string name_;
  ActivationKind activation_;  // model.activation: which of n1, h is kept
  std::unique_ptr<Layer> act_;  // make_activation(activation_): keeps nothing itself
  ConvUnit conv1_;  // 3x3, stride
  NormUnit norm1_;
  ConvUnit conv2_;  // 3x3
  NormUnit norm2_;
  std::unique_ptr<ConvUnit> proj_conv_;  // 1x1, stride; null for the identity skip
  std::unique_ptr<NormUnit> proj_norm_;
};

// saved: pooled (N, C), the Linear's input.
class ClassifierHead final : public Layer {
 public:
  ClassifierHead(const std::string& name, int64_t channels, int64_t classes, uint64_t seed,
                 uint64_t stream, ParamInit init)
      : name_(name), channels_(channels),
        linear_(make_linear(name + ".fc", channels, classes, seed, stream, 1.f, init)) {}
  std::string kind() const override { return "classifier_head"; }
  Shape output_shape(const Shape& input) const override {
    PT_CHECK(input.size() == 4 && input[1] == channels_,
             "classifier head \"" + name_ + "\": input " + shape_string(input) + " must be (N, " +
                 std::to_string(channels_) + ", H, W)");
    return linear_->output_shape({input[0], input[1]});
  }
  std::vector<Param*> params() override { return linear_->params(); }
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    Tensor pooled = new_like(be, {x.dim(0), x.dim(1)});  // (N, C)
    conv_kernels(be, name_).global_avg_pool_forward(x, pooled);
    saved = {pooled};
    std::vector<Tensor> none;
    return linear_->forward(be, pooled, none);
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool need_dx) override {
    PT_CHECK(saved.size() == 1, "classifier head backward needs forward's pooled input");
    Tensor dpooled = linear_->backward(be, saved[0], {}, dy, need_dx);
    if (!need_dx) return Tensor();
    Tensor dx = new_like(be, x.shape());
    conv_kernels(be, name_).global_avg_pool_backward(dpooled, dx);
    return dx;
  }

 private:
  std::string name_;
  int64_t channels_;
  std::unique_ptr<Layer> linear_;  // (C -> classes)
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(const std::string& name, int64_t in, int64_t out,
                                   int64_t kernel, Conv2dGeometry g, bool bias, uint64_t seed,
                                   uint64_t stream, float gain, ParamInit init) {
  return std::make_unique<Conv2d>(ConvUnit(name, in, out, kernel, g, bias, seed, stream, gain, init));
}

std::unique_ptr<Layer> make_norm(const std::string& name, int64_t channels, NormSpec spec,
                                 ParamInit init) {
  return std::make_unique<Norm>(NormUnit(name, channels, spec, init), spec.kind);
}

std::unique_ptr<Layer> make_pool2d(Pool2dGeometry g) { return std::make_unique<Pool2d>(g); }

std::unique_ptr<Layer> make_residual_block(const std::string& name, int64_t in, int64_t out,
                                           int64_t stride, NormSpec norm, uint64_t seed,
                                           uint64_t stream, ParamInit init, ActivationKind activation) {
  return std::make_unique<ResidualBlock>(name, in, out, stride, norm, seed, stream, init, activation);
}

std::unique_ptr<Layer> make_classifier_head(const std::string& name, int64_t channels,
                                            int64_t classes, uint64_t seed, uint64_t stream,
                                            ParamInit init) {
  return std::make_unique<ClassifierHead>(name, channels, classes, seed, stream, init);
}

}  // namespace pt
