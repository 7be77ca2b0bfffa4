// gpt.cpp: the GPT layers: token + position embedding, the pre-LayerNorm
// transformer block with causal multi-head attention, and the head (final
// LayerNorm + LM head). All compute goes through the Backend: its core kernels
// and its transformer group (gpt_kernels), and for fused attention its fused
// attention group (gpt_fused_attention).
#include "pipetrain/model/gpt.hpp"

#include <algorithm>
#include <cmath>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/weight_copies.hpp"

namespace pt {

namespace {

constexpr float kLayerNormEps = 1e-5f;  // as torch.nn.LayerNorm
constexpr float kInitStd = 0.02f;

// ---- parameters and initialisation ----

// The RNG stream of a parameter: FNV-1a of its name, so the values depend on
// (seed, name, element) only, not on the partition or construction order.
uint64_t name_stream(const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : name) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

// N(0, std^2) drawn from (seed, name_stream(name), element index); left
// unfilled with ParamInit::Uninitialised.
Param normal_param(const std::string& name, const Shape& shape, float std, uint64_t seed,
                   ParamInit init) {
  Param p = new_param(name, shape);
  if (init == ParamInit::FromSeed) fill_normal(p.value, std, seed, name_stream(name));
  return p;
}

Param constant_param(const std::string& name, const Shape& shape, float value, ParamInit init) {
  Param p = new_param(name, shape);
  if (init == ParamInit::FromSeed) fill_constant(p.value, value);
  return p;
}

// Zeroes the rows of a (Vp, C) vocabulary parameter past the V real ones
// (GptDims::padded_vocab), on the host where parameters are made. The loss
// gives their logits zero gradient, so they stay zero.
void zero_padded_rows(Param& p, const GptDims& dims) {
  float* v = p.value.f32();
  std::fill(v + dims.vocab_size * p.value.cols(), v + p.value.numel(), 0.f);
}

Shape with_last(const Shape& shape, int64_t last) {
  Shape out = shape;
  out.back() = last;
  return out;
}

// A workspace tensor on the backend's device.
Tensor activation(const Backend& be, const Shape& shape) {
  return Tensor::empty(shape, DType::F32, MemCategory::Workspace, be.device());
}

// ---- building blocks shared by the layers ----

// y = x W^T + b, W: (out, in), b: (out) or absent. W is a GEMM weight: the
// forward and input-gradient GEMMs read its low-precision copy when it has a
// current one (model/weight_copies.hpp).
struct Dense {
  Param weight;
  Param bias;  // value undefined when the layer has no bias

  Dense(const std::string& name, int64_t in, int64_t out, float std, uint64_t seed, bool has_bias,
        ParamInit init)
      : weight(normal_param(name + ".weight", {out, in}, std, seed, init)) {
    weight.gemm_weight = true;
    if (has_bias) bias = constant_param(name + ".bias", {out}, 0.f, init);
  }
  bool has_bias() const { return bias.value.defined(); }
  int64_t out() const { return weight.value.dim(0); }

  // With `gelu`, also gelu = GELU(y) (the backend may fuse it: cuBLASLt).
  Tensor forward(Backend& be, const Tensor& x, Tensor* gelu = nullptr) {
    Tensor y = activation(be, with_last(x.shape(), out()));  // (rows, out)
    if (gelu) *gelu = activation(be, y.shape());               // (rows, out)
    be.linear_forward(x, weight_operand(be, weight), has_bias() ? &bias.value : nullptr, y, gelu);
    return y;
  }
  // Adds dW = dy^T x and db = column sums of dy, or, with `defer`, appends
  // x and dy to it for weights(); returns dx (rows, in). When x = GELU(u),
  // `gelu_input` = u (rows, in) makes it return the gradient at u instead
  // (the backend may fuse GELU's backward into the GEMM: cuBLASLt).
  Tensor backward(Backend& be, const Tensor& x, const Tensor& dy,
                  std::vector<Tensor>* defer = nullptr, const Tensor* gelu_input = nullptr) {
    if (defer) {
      defer->push_back(x);
      defer->push_back(dy);
    } else {
      weights(be, x, dy);
    }
    Tensor dx = activation(be, x.shape());
    be.linear_backward_input(dy, weight_operand(be, weight), dx, gelu_input);
    return dx;
  }
  void weights(Backend& be, const Tensor& x, const Tensor& dy) {
    be.matmul(dy, true, x, false, weight.grad, 1.f, 1.f);
    if (has_bias()) be.accumulate_bias_grad(dy, bias.grad);
  }
};

// The deferred (x, dy) pairs of a split backward, consumed in the order the
// backward appended them.
class DeferredPairs {
 public:
  explicit DeferredPairs(const std::vector<Tensor>& deferred, size_t pairs) : d_(deferred) {
    PT_CHECK(d_.size() == 2 * pairs, "weight gradients need backward_input's deferred tensors");
  }
  void next(Backend& be, Dense& dense) {
    dense.weights(be, d_[i_], d_[i_ + 1]);
    i_ += 2;
  }

 private:
  const std::vector<Tensor>& d_;
  size_t i_ = 0;
};

struct LayerNorm {
  Param weight, bias;  // gamma, beta: (C)

  LayerNorm(const std::string& name, int64_t C, ParamInit init)
      : weight(constant_param(name + ".weight", {C}, 1.f, init)),
        bias(constant_param(name + ".bias", {C}, 0.f, init)) {}

  // Appends y, mean, rstd to `saved` and returns y. Only the GEMM that
  // follows reads y (backward reads x), so y is as `owner` keeps a GEMM
  // operand (Layer::kept_gemm_operand: rounded with activation copies).
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved, const Layer& owner) {
    Tensor normed = activation(be, x.shape());
    Tensor mean = activation(be, {x.rows()});
    Tensor rstd = activation(be, {x.rows()});
    gpt_kernels(be).layernorm_forward(x, weight.value, bias.value, kLayerNormEps, normed, mean,
                                      rstd);
    Tensor y = owner.kept_gemm_operand(be, normed);  // (rows, C): F32, or BF16 / F16
    saved.push_back(y);
    saved.push_back(mean);
    saved.push_back(rstd);
    return y;
  }
  // Adds dgamma, dbeta; returns dx.
  Tensor backward(Backend& be, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                  const Tensor& dy) {
    Tensor dx = activation(be, x.shape());
    gpt_kernels(be).layernorm_backward(x, weight.value, mean, rstd, dy, dx, weight.grad,
                                       bias.grad);
    return dx;
  }
};

void check_tokens_shape(const Shape& s, const GptDims& dims) {
  PT_CHECK(s.size() == 2 && s[1] >= 1 && s[1] <= dims.seq_len,
           "GPT tokens must be (mb, T <= " + std::to_string(dims.seq_len) +
               "): " + shape_string(s));
}

void check_hidden_shape(const Shape& s, const GptDims& dims) {
  PT_CHECK(s.size() == 3 && s[1] <= dims.seq_len && s[2] == dims.d_model,
           "GPT hidden state must be (mb, T, " + std::to_string(dims.d_model) +
               "): " + shape_string(s));
}

// ---- embedding ----

class GptEmbedding final : public Layer {
 public:
  GptEmbedding(const GptDims& dims, uint64_t seed)
      : dims_(dims),
        wte_(normal_param("embed.wte", {dims.padded_vocab(), dims.d_model}, kInitStd, seed,
                          ParamInit::FromSeed)),
        wpe_(normal_param("embed.wpe", {dims.seq_len, dims.d_model}, kInitStd, seed,
                          ParamInit::FromSeed)) {
    zero_padded_rows(wte_, dims);  // no token id reaches them: no gradient either
  }
  std::string kind() const override { return "gpt_embedding"; }
  Shape output_shape(const Shape& input) const override {
    check_tokens_shape(input, dims_);
    return {input[0], input[1], dims_.d_model};
  }
  std::vector<Param*> params() override { return {&wte_, &wpe_}; }
  // Backward needs only the tokens, which the executor keeps.
  void recompute_saved(Backend&, const Tensor&, std::vector<Tensor>& saved) override {
    saved.clear();
  }

  // x: tokens (mb, T) i32 -> (mb, T, C). Saves nothing.
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>&) override {
    Tensor y = activation(be, output_shape(x.shape()));
    gpt_kernels(be).embedding_forward(x, wte_.value, wpe_.value, y);
    return y;
  }
  // No dx: the input is integer tokens.
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>&, const Tensor& dy,
                  bool) override {
    gpt_kernels(be).embedding_backward(x, dy, wte_.grad, wpe_.grad);
    return Tensor();
  }
  // The whole gradient is a weight gradient. deferred: tokens (mb, T), dy (mb, T, C).
  Tensor backward_input(Backend&, const Tensor& x, const std::vector<Tensor>&, const Tensor& dy,
                        bool, std::vector<Tensor>& deferred) override {
    deferred = {x, dy};
    return Tensor();
  }
  void backward_weights(Backend& be, const std::vector<Tensor>& deferred) override {
    PT_CHECK(deferred.size() == 2, "embedding gradients need backward_input's tokens and dy");
    gpt_kernels(be).embedding_backward(deferred[0], deferred[1], wte_.grad, wpe_.grad);
  }

 private:
  GptDims dims_;
  Param wte_;  // (Vp, C): rows V..Vp-1 zero padding
  Param wpe_;  // (T, C)
};

// ---- transformer block ----

// What GptBlock::forward leaves in `saved`, by index. Everything is needed by
// backward. With activation copies (model/activation_copies.hpp) the tensors
// marked "GEMM operand", which backward reads only as the input of a weight
// gradient, are kept in the GEMM precision (BF16 / F16). With reference
// attention kSoftmax holds the probabilities, which backward recomputes from
// kQkv when it is left undefined (selective recomputation drops them: the
// only O(T^2) tensor). With fused attention it
// holds each row's log-sum-exp, O(T), which selective recomputation keeps:
// rebuilding it would rerun the whole attention forward to save H*T floats.
enum BlockSaved : size_t {
  kLn1Out = 0,  // ln1(x)              (mb, T, C)  GEMM operand (qkv)
  kLn1Mean,     // ln1 row means       (mb*T)
  kLn1Rstd,     // ln1 row 1/std       (mb*T)
  kQkv,         // fused q, k, v       (mb, T, 3C)
  kSoftmax,     // reference: attention probs (mb, H, T, T); fused: row log-sum-exp (mb, H, T)
  kAttn,        // attention output    (mb, T, C), before attn.proj; GEMM operand
                //   (attn.proj; the fused backward's row term reads its 16-bit values)
  kX1,          // x + attn branch     (mb, T, C)
  kLn2Out,      // ln2(x1)             (mb, T, C)  GEMM operand (mlp.fc)
  kLn2Mean,     // ln2 row means       (mb*T)
  kLn2Rstd,     // ln2 row 1/std       (mb*T)
  kFcOut,       // mlp.fc output       (mb, T, R*C), before GELU
  kGeluOut,     // GELU(fc output)     (mb, T, R*C)  GEMM operand (mlp.proj)
  kBlockSavedCount
};

class GptBlock final : public Layer {
 public:
  GptBlock(const GptDims& dims, int64_t index, uint64_t seed, ParamInit init)
      : dims_(dims),
        ln1_(prefix(index) + "ln1", dims.d_model, init),
        qkv_(prefix(index) + "attn.qkv", dims.d_model, 3 * dims.d_model, kInitStd, seed, true,
             init),
        attn_proj_(prefix(index) + "attn.proj", dims.d_model, dims.d_model, residual_std(dims),
                   seed, true, init),
        ln2_(prefix(index) + "ln2", dims.d_model, init),
        fc_(prefix(index) + "mlp.fc", dims.d_model, dims.mlp_ratio * dims.d_model, kInitStd,
            seed, true, init),
        mlp_proj_(prefix(index) + "mlp.proj", dims.mlp_ratio * dims.d_model, dims.d_model,
                  residual_std(dims), seed, true, init) {
    PT_CHECK(dims.heads >= 1 && dims.d_model % dims.heads == 0, "heads must divide d_model");
    PT_CHECK(dims.causal || dims.attention != AttentionKind::Fused,
             "fused attention is causal only (model.causal = false needs the reference kernels)");
  }
  std::string kind() const override { return "gpt_block"; }
  Shape output_shape(const Shape& input) const override {
    check_hidden_shape(input, dims_);
    return input;
  }
  std::vector<Param*> params() override {
    return {&ln1_.weight,      &ln1_.bias,       &qkv_.weight, &qkv_.bias,
            &attn_proj_.weight, &attn_proj_.bias, &ln2_.weight, &ln2_.bias,
            &fc_.weight,       &fc_.bias,        &mlp_proj_.weight, &mlp_proj_.bias};
  }

  void drop_recomputable(std::vector<Tensor>& saved) override {
    if (fused()) return;  // the row statistics are O(T): kept (BlockSaved)
    if (saved.size() == kBlockSavedCount) saved[kSoftmax] = Tensor();
  }

  // x (mb, T, C) -> y (mb, T, C); `saved` as in BlockSaved.
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    recompute_saved(be, x, saved);
    Tensor y = mlp_proj_.forward(be, saved[kGeluOut]);  // (mb, T, C)
    be.add(y, saved[kX1], y);                           // y = x1 + mlp(ln2(x1))
    return y;
  }

  // Everything backward needs; skips the MLP projection, whose output only
  // feeds the next layer.
  void recompute_saved(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    check_hidden_shape(x.shape(), dims_);
    saved.clear();
    Tensor ln1 = ln1_.forward(be, x, saved, *this);  // (mb, T, C)
    Tensor qkv = qkv_.forward(be, ln1);              // (mb, T, 3C)
    Tensor softmax;                                     // as kSoftmax
    Tensor attn = attention_forward(be, qkv, softmax);  // (mb, T, C)
    attn = kept_gemm_operand(be, attn);  // the fused backward reads it too: exact (16-bit y)
    Tensor x1 = attn_proj_.forward(be, attn);           // (mb, T, C)
    be.add(x1, x, x1);                                  // x1 = x + proj(attn)
    saved.push_back(qkv);
    saved.push_back(softmax);
    saved.push_back(attn);
    saved.push_back(x1);
    Tensor ln2 = ln2_.forward(be, x1, saved, *this);  // (mb, T, C)
    Tensor gelu;                                      // (mb, T, R*C)
    Tensor fc = fc_.forward(be, ln2, &gelu);          // (mb, T, R*C), GELU's input
    saved.push_back(fc);
    saved.push_back(kept_gemm_operand(be, gelu));
    PT_CHECK(saved.size() == kBlockSavedCount, "block saved layout");
  }

  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool need_dx) override {
    return block_backward(be, x, saved, dy, need_dx, nullptr);
  }
  // deferred: (x, dy) of mlp_proj, fc, attn_proj, qkv; the layer norms'
  // gradients stay in B (one kernel makes them with dx).
  Tensor backward_input(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                        const Tensor& dy, bool need_dx, std::vector<Tensor>& deferred) override {
    deferred.clear();
    return block_backward(be, x, saved, dy, need_dx, &deferred);
  }
  void backward_weights(Backend& be, const std::vector<Tensor>& deferred) override {
    DeferredPairs pairs(deferred, 4);
    for (Dense* dense : {&mlp_proj_, &fc_, &attn_proj_, &qkv_}) pairs.next(be, *dense);
  }

 private:
  Tensor block_backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                        const Tensor& dy, bool need_dx, std::vector<Tensor>* defer) {
    PT_CHECK(saved.size() == kBlockSavedCount, "block backward needs forward's saved tensors");
    const Tensor& x1 = saved[kX1];
    // MLP branch: y = x1 + mlp_proj(gelu(fc(ln2(x1)))).
    Tensor dfc = mlp_proj_.backward(be, saved[kGeluOut], dy, defer, &saved[kFcOut]);  // (mb, T, R*C)
    Tensor dln2 = fc_.backward(be, saved[kLn2Out], dfc, defer);  // (mb, T, C)
    Tensor dx1 = ln2_.backward(be, x1, saved[kLn2Mean], saved[kLn2Rstd], dln2);
    be.add(dx1, dy, dx1);  // + the residual path
    // Attention branch: x1 = x + attn_proj(attention(qkv(ln1(x)))).
    Tensor dattn = attn_proj_.backward(be, saved[kAttn], dx1, defer);  // (mb, T, C)
    Tensor softmax = softmax_state(be, saved);  // as kSoftmax; held to the end, as before #42
    Tensor dqkv = attention_backward(be, saved, softmax, dattn);       // (mb, T, 3C)
    Tensor dln1 = qkv_.backward(be, saved[kLn1Out], dqkv, defer);  // (mb, T, C)
    Tensor dx = ln1_.backward(be, x, saved[kLn1Mean], saved[kLn1Rstd], dln1);
    if (!need_dx) return Tensor();
    be.add(dx, dx1, dx);  // + the residual path
    return dx;
  }

  static std::string prefix(int64_t index) { return "block" + std::to_string(index) + "."; }
  static float residual_std(const GptDims& dims) {
    return kInitStd / std::sqrt(2.f * static_cast<float>(dims.blocks));
  }
  bool fused() const { return dims_.attention == AttentionKind::Fused; }
  AttentionMask mask() const { return dims_.causal ? AttentionMask::Causal : AttentionMask::None; }
  // probs (mb, H, T, T) of qkv (mb, T, 3C).
  Tensor attention_probs(Backend& be, const Tensor& qkv) const {
    Tensor probs = activation(be, {qkv.dim(0), dims_.heads, qkv.dim(1), qkv.dim(1)});
    gpt_kernels(be).attention_probs(qkv, dims_.heads, probs, mask());
    return probs;
  }
  // The attention output (mb, T, C) of qkv (mb, T, 3C); sets `softmax` to
  // what backward needs of the softmax (BlockSaved's kSoftmax).
  Tensor attention_forward(Backend& be, const Tensor& qkv, Tensor& softmax) const {
    const Shape out = {qkv.dim(0), qkv.dim(1), dims_.d_model};
    if (fused()) {
      Tensor attn = activation(be, out);
      softmax = activation(be, {qkv.dim(0), dims_.heads, qkv.dim(1)});
      gpt_fused_attention(be).forward(qkv, dims_.heads, attn, softmax);
      return attn;
    }
    softmax = attention_probs(be, qkv);
    Tensor attn = activation(be, out);
    gpt_kernels(be).attention_values(qkv, softmax, dims_.heads, attn);
    return attn;
  }
  // The saved kSoftmax, or the probabilities recomputed from qkv when
  // selective recomputation dropped them.
  Tensor softmax_state(Backend& be, const std::vector<Tensor>& saved) const {
    return saved[kSoftmax].defined() ? saved[kSoftmax] : attention_probs(be, saved[kQkv]);
  }
  // dqkv (mb, T, 3C) from dattn (mb, T, C), the gradient of the attention
  // output, and `softmax` (softmax_state).
  Tensor attention_backward(Backend& be, const std::vector<Tensor>& saved, const Tensor& softmax,
                            const Tensor& dattn) const {
    const Tensor& qkv = saved[kQkv];
    Tensor dqkv = Tensor::empty(qkv.shape(), DType::F32, MemCategory::Workspace, be.device());
    if (fused())
      gpt_fused_attention(be).backward(qkv, saved[kAttn], softmax, dattn, dims_.heads, dqkv);
    else
      gpt_kernels(be).attention_backward(qkv, softmax, dattn, dims_.heads, dqkv, mask());
    return dqkv;
  }

  GptDims dims_;
  LayerNorm ln1_;
  Dense qkv_;        // (3C, C)
  Dense attn_proj_;  // (C, C)
  LayerNorm ln2_;
  Dense fc_;        // (R*C, C)
  Dense mlp_proj_;  // (C, R*C)
};

// ---- head ----

// saved: [0] ln_f(x) (mb, T, C), the LM head's GEMM operand (BF16 / F16 with
// activation copies), [1] row means (mb*T), [2] row 1/std (mb*T).
class GptHead final : public Layer {
 public:
  GptHead(const GptDims& dims, uint64_t seed)
      : dims_(dims),
        ln_f_("head.ln_f", dims.d_model, ParamInit::FromSeed),
        lm_head_("head.lm_head", dims.d_model, dims.padded_vocab(), kInitStd, seed, false,
                 ParamInit::FromSeed) {
    zero_padded_rows(lm_head_.weight, dims);
  }
  std::string kind() const override { return "gpt_head"; }
  Shape output_shape(const Shape& input) const override {
    check_hidden_shape(input, dims_);
    return with_last(input, dims_.padded_vocab());
  }
  std::vector<Param*> params() override {
    return {&ln_f_.weight, &ln_f_.bias, &lm_head_.weight};
  }

  // x (mb, T, C) -> logits (mb, T, Vp); the loss reads the first V columns.
  Tensor forward(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    check_hidden_shape(x.shape(), dims_);
    saved.clear();
    Tensor ln = ln_f_.forward(be, x, saved, *this);  // (mb, T, C)
    return lm_head_.forward(be, ln);                 // (mb, T, V)
  }
  // Backward needs ln_f's output and statistics, not the logits.
  void recompute_saved(Backend& be, const Tensor& x, std::vector<Tensor>& saved) override {
    check_hidden_shape(x.shape(), dims_);
    saved.clear();
    ln_f_.forward(be, x, saved, *this);
  }
  Tensor backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                  const Tensor& dy, bool need_dx) override {
    return head_backward(be, x, saved, dy, need_dx, nullptr);
  }
  // deferred: (x, dy) of lm_head; ln_f's gradients stay in B.
  Tensor backward_input(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                        const Tensor& dy, bool need_dx, std::vector<Tensor>& deferred) override {
    deferred.clear();
    return head_backward(be, x, saved, dy, need_dx, &deferred);
  }
  void backward_weights(Backend& be, const std::vector<Tensor>& deferred) override {
    DeferredPairs(deferred, 1).next(be, lm_head_);
  }

 private:
  Tensor head_backward(Backend& be, const Tensor& x, const std::vector<Tensor>& saved,
                       const Tensor& dy, bool need_dx, std::vector<Tensor>* defer) {
    PT_CHECK(saved.size() == 3, "head backward needs forward's saved tensors");
    Tensor dln = lm_head_.backward(be, saved[0], dy, defer);  // (mb, T, C)
    Tensor dx = ln_f_.backward(be, x, saved[1], saved[2], dln);
    return need_dx ? dx : Tensor();
  }

  GptDims dims_;
  LayerNorm ln_f_;
  Dense lm_head_;  // (Vp, C), no bias; rows V..Vp-1 zero padding
};

}  // namespace

TransformerKernels& gpt_kernels(Backend& be) {
  return require_kernels<TransformerKernels>(be, "model family \"gpt\"");
}

FusedAttentionKernels& gpt_fused_attention(Backend& be) {
  return require_kernels<FusedAttentionKernels>(be, "model.attention = \"fused\"");
}

std::unique_ptr<Layer> make_gpt_embedding(const GptDims& dims, uint64_t seed) {
  return std::make_unique<GptEmbedding>(dims, seed);
}

std::unique_ptr<Layer> make_gpt_block(const GptDims& dims, int64_t index, uint64_t seed,
                                      ParamInit init) {
  return std::make_unique<GptBlock>(dims, index, seed, init);
}

std::unique_ptr<Layer> make_gpt_head(const GptDims& dims, uint64_t seed) {
  return std::make_unique<GptHead>(dims, seed);
}

double gpt_embedding_parameters(const GptDims& dims) {
  return static_cast<double>(dims.padded_vocab() + dims.seq_len) * static_cast<double>(dims.d_model);
}

double gpt_block_parameters(const GptDims& dims) {
  const double c = static_cast<double>(dims.d_model), hidden = static_cast<double>(dims.mlp_ratio) * c;
  const double norms = 2.0 * 2.0 * c;
  const double attention = (c + 1.0) * 3.0 * c + (c + 1.0) * c;
  const double mlp = (c + 1.0) * hidden + (hidden + 1.0) * c;
  return norms + attention + mlp;
}

double gpt_head_parameters(const GptDims& dims) {
  const double c = static_cast<double>(dims.d_model);
  return 2.0 * c + static_cast<double>(dims.padded_vocab()) * c;
}

}  // namespace pt
