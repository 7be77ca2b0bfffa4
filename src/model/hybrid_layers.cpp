// hybrid_layers.cpp: the patch tokens and the token-pooling classification
// head of the hybrid family (hybrid_layers.hpp). Both are written from the
// existing layers and kernels: a Linear, the conv group's image <-> token
// transposes and global average pooling, the transformer group's LayerNorm.
#include "pipetrain/model/hybrid_layers.hpp"

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/gpt.hpp"
#include "pipetrain/tensor/conv_kernels.hpp"

namespace pt {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // as the GPT blocks'
constexpr float kPositionStd = 0.02f;   // as the GPT's position embedding

ConvKernels& conv_kernels(Backend& be, const std::string& layer) {
  return require_kernels<ConvKernels>(be, "layer \"" + layer + "\"");
}

Tensor workspace(Backend& be, const Shape& shape) {
  return Tensor::empty(shape, DType::F32, MemCategory::Workspace, be.device());
}

// saved: [0] the tokens before the projection (N, T, C).
class PatchTokens final : public Layer {
 public:
  PatchTokens(const std::string& name, int64_t channels, int64_t side, int64_t d_model,
              uint64_t seed, uint64_t stream, ParamInit init)
      : name_(name), channels_(channels), side_(side), d_model_(d_model),
        proj_(make_linear(name + ".proj", channels, d_model, seed, stream, 1.f, init)),
        pos_(new_param(name + ".pos", {side * side, d_model})) {
    if (init == ParamInit::FromSeed) fill_normal(pos_.value, kPositionStd, seed, stream + 1);
  }
  std::string kind() const override { return "patch_tokens"; }
  Shape output_shape(const Shape& input) const override {
    PT_CHECK(input.size() == 4 && input[1] == channels_ && input[2] == side_ && input[3] == side_,
             "patch tokens \"" + name_ + "\": input " + shape_string(input) + " must be (N, " +
                 std::to_string(channels_) + ", " + std::to_string(side_) + ", " +
                 std::to_string(side_) + ")");
    return {input[0], side_ * side_, d_model_};
  }
  std::vector<Param*> params() override {
    std::vector<Param*> out = proj_->params();
    out.push_back(&pos_);
    return out;
  }

  // x (N, C, S, S) -> y (N, T, d).
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    const Shape out = output_shape(x.shape());
    Tensor tokens = workspace(be, {out[0], out[1], channels_});  // (N, T, C)
    conv_kernels(be, name_).image_to_tokens(x, tokens);
    saved = {tokens};
    std::vector<Tensor> none;
    Tensor y = proj_->forward(be, tokens, none);  // (N, T, d)
    Tensor rows = y.reshaped({out[0], out[1] * d_model_});
    be.add_bias(rows, pos_.value.reshaped({out[1] * d_model_}));
    return y;
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool need_dx) override {
    PT_CHECK(saved.size() == 1, "patch tokens backward needs forward's tokens");
    Tensor dpos = pos_.grad.reshaped({pos_.grad.numel()});  // (T d), pos_'s storage
    be.accumulate_bias_grad(dy.reshaped({dy.dim(0), pos_.grad.numel()}), dpos);
    Tensor dtokens = proj_->backward(be, saved[0], {}, dy, need_dx);  // (N, T, C)
    if (!need_dx) return Tensor();
    Tensor dx = workspace(be, x.shape());
    conv_kernels(be, name_).tokens_to_image(dtokens, dx);
    return dx;
  }

 private:
  std::string name_;
  int64_t channels_, side_, d_model_;
  std::unique_ptr<Layer> proj_;  // Linear (d, C)
  Param pos_;                    // (T, d)
};

// saved: [0] ln(x) (N, T, d), [1] row means (N T), [2] row 1/std (N T),
// [3] pooled (N, d).
class TokenPoolHead final : public Layer {
 public:
  TokenPoolHead(const std::string& name, int64_t tokens, int64_t d_model, int64_t classes,
                uint64_t seed, uint64_t stream)
      : name_(name), tokens_(tokens), d_model_(d_model),
        ln_weight_(new_param(name + ".ln.weight", {d_model})),
        ln_bias_(new_param(name + ".ln.bias", {d_model})),
        fc_(make_linear(name + ".fc", d_model, classes, seed, stream, 1.f)) {
    fill_constant(ln_weight_.value, 1.f);
    fill_constant(ln_bias_.value, 0.f);
  }
  std::string kind() const override { return "token_pool_head"; }
  Shape output_shape(const Shape& input) const override {
    PT_CHECK(input.size() == 3 && input[1] == tokens_ && input[2] == d_model_,
             "token pooling head \"" + name_ + "\": input " + shape_string(input) + " must be (N, " +
                 std::to_string(tokens_) + ", " + std::to_string(d_model_) + ")");
    return fc_->output_shape({input[0], d_model_});
  }
  std::vector<Param*> params() override {
    std::vector<Param*> out = {&ln_weight_, &ln_bias_};
    for (Param* p : fc_->params()) out.push_back(p);
    return out;
  }

  // x (N, T, d) -> logits (N, classes).
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    output_shape(x.shape());
    const int64_t n = x.dim(0);
    Tensor ln = workspace(be, x.shape()), mean = workspace(be, {x.rows()}),
           rstd = workspace(be, {x.rows()});
    gpt_kernels(be).layernorm_forward(x, ln_weight_.value, ln_bias_.value, kLayerNormEps, ln,
                                      mean, rstd);
    // The tokens as an image (N, d, T, 1): their mean is its global average.
    Tensor image = workspace(be, {n, d_model_, tokens_, 1});
    ConvKernels& k = conv_kernels(be, name_);
    k.tokens_to_image(ln, image);
    Tensor pooled = workspace(be, {n, d_model_});  // (N, d)
    k.global_avg_pool_forward(image, pooled);
    saved = {ln, mean, rstd, pooled};
    std::vector<Tensor> none;
    return fc_->forward(be, pooled, none);
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool need_dx) override {
    PT_CHECK(saved.size() == 4, "token pooling head backward needs forward's saved tensors");
    const int64_t n = x.dim(0);
    Tensor dpooled = fc_->backward(be, saved[3], {}, dy, true);  // (N, d)
    Tensor dimage = workspace(be, {n, d_model_, tokens_, 1});
    ConvKernels& k = conv_kernels(be, name_);
    k.global_avg_pool_backward(dpooled, dimage);
    Tensor dln = workspace(be, x.shape());  // (N, T, d)
    k.image_to_tokens(dimage, dln);
    Tensor dx = workspace(be, x.shape());
    gpt_kernels(be).layernorm_backward(x, ln_weight_.value, saved[1], saved[2], dln, dx,
                                       ln_weight_.grad, ln_bias_.grad);
    return need_dx ? dx : Tensor();
  }

 private:
  std::string name_;
  int64_t tokens_, d_model_;
  Param ln_weight_, ln_bias_;  // (d)
  std::unique_ptr<Layer> fc_;  // Linear (classes, d)
};

}  // namespace

std::unique_ptr<Layer> make_patch_tokens(const std::string& name, int64_t channels, int64_t side,
                                         int64_t d_model, uint64_t seed, uint64_t stream,
                                         ParamInit init) {
  return std::make_unique<PatchTokens>(name, channels, side, d_model, seed, stream, init);
}

std::unique_ptr<Layer> make_token_pool_head(const std::string& name, int64_t tokens,
                                            int64_t d_model, int64_t classes, uint64_t seed,
                                            uint64_t stream) {
  return std::make_unique<TokenPoolHead>(name, tokens, d_model, classes, seed, stream);
}

}  // namespace pt
