// test_gpt_layers.cpp: the GPT kernels and layers against central finite
// differences, plus their structural properties (causality, parameter order,
// initialisation, determinism, backward from recomputed attention probs), and
// the split backward (B then W) of every layer kind, bitwise the fused one.
//
// As in test_layers.cpp: for y = f(x) and a fixed random r, L = sum(r * y)
// (in double) has dL/dx = backward(r). Each analytic gradient element is
// compared with (L(v + h) - L(v - h)) / 2h; the error is
// |numeric - analytic| / max(1, |numeric|). Tiny dims: mb=2, T=5, C=8, H=2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "pipetrain/model/gpt.hpp"
#include "fd_check.hpp"
#include "pipetrain/base/rng.hpp"

namespace pt {
namespace {

using test::dot;
using test::max_fd_error;
using test::random_tensor;

constexpr double kTol = 2e-3;

GptDims tiny_dims() {
  GptDims d;
  d.vocab_size = 11;
  d.seq_len = 5;
  d.d_model = 8;
  d.heads = 2;
  d.mlp_ratio = 4;
  d.blocks = 2;
  return d;
}

void fill_normal(Tensor& t, uint64_t stream, float std, float mean = 0.f) {
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = mean + std * normal01(99, stream, i);
}

// Tokens (mb, T) with repeats, so that gradient accumulation into wte is tested.
Tensor tokens(int64_t mb, int64_t T, int64_t vocab) {
  Tensor t = Tensor::empty({mb, T}, DType::I32);
  for (int64_t i = 0; i < mb * T; ++i) t.i32()[i] = static_cast<int32_t>((i * 7 + 3) % vocab);
  t.i32()[1] = t.i32()[0];
  return t;
}

void expect_fd(Tensor& value, const Tensor& grad, const std::function<double()>& loss,
               const std::string& label) {
  double err = max_fd_error(value, grad, loss);
  std::printf("  %-32s max rel error %.3e\n", label.c_str(), err);
  EXPECT_LT(err, kTol) << label;
}

// Replaces the GPT-scale init (std 0.02, LayerNorm 1/0) by O(1) random values,
// so that every path (attention pattern, LayerNorm affine, biases) matters.
void randomise_params(Layer& layer, uint64_t stream) {
  for (Param* p : layer.params()) {
    const bool layernorm = p->name.find(".ln") != std::string::npos;
    const bool bias = p->name.find(".bias") != std::string::npos;
    const int64_t fan_in = p->value.ndim() == 2 ? p->value.dim(1) : 1;
    if (layernorm && !bias) fill_normal(p->value, stream++, 0.2f, 1.f);
    else if (bias) fill_normal(p->value, stream++, 0.2f);
    else fill_normal(p->value, stream++, 1.f / std::sqrt(static_cast<float>(fan_in)));
  }
}

// FD check of a layer: dx (when `check_dx`) and every parameter gradient.
void check_layer(Layer& layer, Tensor x, bool check_dx, const char* label) {
  Backend& be = cpu_backend();
  std::vector<Tensor> saved;
  Tensor y = layer.forward(be, x, saved);
  Tensor r = random_tensor(y.shape(), 2);
  for (Param* p : layer.params()) be.fill(p->grad, 0.f);
  Tensor dx = layer.backward(be, x, saved, r, check_dx);
  auto loss = [&] {
    std::vector<Tensor> s;
    return dot(layer.forward(be, x, s), r);
  };
  if (check_dx) expect_fd(x, dx, loss, std::string(label) + " dx");
  for (Param* p : layer.params()) expect_fd(p->value, p->grad, loss, p->name);
}

// ---- kernels ----

TEST(GptKernels, LayerNormMatchesFiniteDifferences) {
  TransformerKernels& be = gpt_kernels(cpu_backend());
  const int64_t rows = 6, C = 8;
  Tensor x = random_tensor({rows, C}, 1, 2.f);
  Tensor gamma = Tensor::empty({C}), beta = random_tensor({C}, 4, 0.3f);
  fill_normal(gamma, 3, 0.3f, 1.f);
  Tensor y = Tensor::empty({rows, C}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  Tensor r = random_tensor({rows, C}, 2);
  Tensor dx = Tensor::empty({rows, C}), dgamma = Tensor::zeros({C}), dbeta = Tensor::zeros({C});
  be.layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  be.layernorm_backward(x, gamma, mean, rstd, r, dx, dgamma, dbeta);
  auto loss = [&] {
    Tensor yy = Tensor::empty({rows, C}), m = Tensor::empty({rows}), s = Tensor::empty({rows});
    be.layernorm_forward(x, gamma, beta, 1e-5f, yy, m, s);
    return dot(yy, r);
  };
  expect_fd(x, dx, loss, "layernorm dx");
  expect_fd(gamma, dgamma, loss, "layernorm dgamma");
  expect_fd(beta, dbeta, loss, "layernorm dbeta");
  // The saved statistics are the row mean and 1 / sqrt(biased variance + eps).
  for (int64_t rr = 0; rr < rows; ++rr) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < C; ++j) m += x.f32()[rr * C + j];
    m /= C;
    for (int64_t j = 0; j < C; ++j) v += (x.f32()[rr * C + j] - m) * (x.f32()[rr * C + j] - m);
    EXPECT_NEAR(mean.f32()[rr], m, 1e-5);
    EXPECT_NEAR(rstd.f32()[rr], 1.0 / std::sqrt(v / C + 1e-5), 1e-4);
  }
}

TEST(GptKernels, LayerNormBackwardAccumulatesParameterGrads) {
  TransformerKernels& be = gpt_kernels(cpu_backend());
  Tensor x = random_tensor({3, 4}, 1), gamma = random_tensor({4}, 2), beta = random_tensor({4}, 3);
  Tensor y = Tensor::empty({3, 4}), mean = Tensor::empty({3}), rstd = Tensor::empty({3});
  Tensor dy = random_tensor({3, 4}, 5), dx = Tensor::empty({3, 4});
  Tensor dgamma = Tensor::zeros({4}), dbeta = Tensor::zeros({4});
  be.layernorm_forward(x, gamma, beta, 1e-5f, y, mean, rstd);
  be.layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  Tensor g1 = dgamma.clone(MemCategory::Workspace), b1 = dbeta.clone(MemCategory::Workspace);
  be.layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  for (int j = 0; j < 4; ++j) {
    EXPECT_FLOAT_EQ(dgamma.f32()[j], 2.f * g1.f32()[j]);
    EXPECT_FLOAT_EQ(dbeta.f32()[j], 2.f * b1.f32()[j]);
  }
}

struct AttnCase {
  int64_t mb = 2, T = 5, C = 8, H = 2;
  AttentionMask mask = AttentionMask::Causal;
  Tensor run(TransformerKernels& be, const Tensor& qkv, Tensor* probs_out = nullptr) const {
    Tensor probs = Tensor::empty({mb, H, T, T});
    Tensor y = Tensor::empty({mb, T, C});
    be.attention_probs(qkv, H, probs, mask);
    be.attention_values(qkv, probs, H, y);
    if (probs_out) *probs_out = probs;
    return y;
  }
};

void expect_attention_fd(AttentionMask mask, const char* label) {
  TransformerKernels& be = gpt_kernels(cpu_backend());
  AttnCase c;
  c.mask = mask;
  Tensor qkv = random_tensor({c.mb, c.T, 3 * c.C}, 1);
  Tensor probs;
  Tensor y = c.run(be, qkv, &probs);
  Tensor r = random_tensor(y.shape(), 2);
  Tensor dqkv = Tensor::empty(qkv.shape());
  be.attention_backward(qkv, probs, r, c.H, dqkv, mask);
  expect_fd(qkv, dqkv, [&] { return dot(c.run(be, qkv), r); }, label);
}

TEST(GptKernels, AttentionMatchesFiniteDifferences) {
  expect_attention_fd(AttentionMask::Causal, "causal attention dqkv");
}

TEST(GptKernels, AttentionOverEveryTokenMatchesFiniteDifferences) {
  expect_attention_fd(AttentionMask::None, "attention over every token dqkv");
}

// Without the mask, every probability is positive and each row sums to 1;
// adding 1 to the values of the last position moves every position's output,
// in head h's channels, by its probability of attending to that position.
TEST(GptKernels, AttentionOverEveryTokenSeesEveryToken) {
  TransformerKernels& be = gpt_kernels(cpu_backend());
  AttnCase c;
  c.mask = AttentionMask::None;
  Tensor qkv = random_tensor({c.mb, c.T, 3 * c.C}, 1);
  Tensor probs;
  Tensor y0 = c.run(be, qkv, &probs);
  for (int64_t row = 0; row < c.mb * c.H * c.T; ++row) {
    double sum = 0.0;
    for (int64_t j = 0; j < c.T; ++j) {
      EXPECT_GT(probs.f32()[row * c.T + j], 0.f) << "row " << row << " key " << j;
      sum += probs.f32()[row * c.T + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  for (int64_t b = 0; b < c.mb; ++b)
    for (int64_t j = 2 * c.C; j < 3 * c.C; ++j) qkv.f32()[((b * c.T) + c.T - 1) * 3 * c.C + j] += 1.f;
  Tensor y1 = c.run(be, qkv);
  const int64_t D = c.C / c.H;
  for (int64_t b = 0; b < c.mb; ++b)
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t j = 0; j < c.C; ++j) {
        const int64_t i = (b * c.T + t) * c.C + j, h = j / D;
        const float p_last = probs.f32()[((b * c.H + h) * c.T + t) * c.T + c.T - 1];
        EXPECT_NEAR(y1.f32()[i] - y0.f32()[i], p_last, 1e-5) << "b " << b << " t " << t;
      }
}

TEST(GptKernels, AttentionProbsAreCausalRowStochastic) {
  TransformerKernels& be = gpt_kernels(cpu_backend());
  AttnCase c;
  Tensor qkv = random_tensor({c.mb, c.T, 3 * c.C}, 1, 3.f);
  Tensor probs;
  c.run(be, qkv, &probs);
  for (int64_t bh = 0; bh < c.mb * c.H; ++bh) {
    for (int64_t i = 0; i < c.T; ++i) {
      const float* row = probs.f32() + (bh * c.T + i) * c.T;
      double sum = 0.0;
      for (int64_t j = 0; j < c.T; ++j) {
        if (j > i) EXPECT_EQ(row[j], 0.f);
        else EXPECT_GT(row[j], 0.f);
        sum += row[j];
      }
      EXPECT_NEAR(sum, 1.0, 1e-6);
    }
  }
}

TEST(GptKernels, AttentionDoesNotSeeTheFuture) {
  TransformerKernels& be = gpt_kernels(cpu_backend());
  AttnCase c;
  Tensor qkv = random_tensor({c.mb, c.T, 3 * c.C}, 1);
  Tensor y0 = c.run(be, qkv);
  // Change q, k and v of the last position of every sequence.
  for (int64_t b = 0; b < c.mb; ++b)
    for (int64_t j = 0; j < 3 * c.C; ++j) qkv.f32()[((b * c.T) + c.T - 1) * 3 * c.C + j] += 1.f;
  Tensor y1 = c.run(be, qkv);
  for (int64_t b = 0; b < c.mb; ++b)
    for (int64_t t = 0; t + 1 < c.T; ++t)
      for (int64_t j = 0; j < c.C; ++j) {
        const int64_t i = (b * c.T + t) * c.C + j;
        EXPECT_EQ(y0.f32()[i], y1.f32()[i]) << "b " << b << " t " << t;
      }
}

TEST(GptKernels, ResidualAdd) {
  Backend& be = cpu_backend();
  Tensor a = random_tensor({2, 3}, 1), b = random_tensor({2, 3}, 2), out = Tensor::empty({2, 3});
  be.add(a, b, out);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(out.f32()[i], a.f32()[i] + b.f32()[i]);
  be.add(a, b, a);  // aliasing the output with an input is allowed
  for (int i = 0; i < 6; ++i) EXPECT_EQ(a.f32()[i], out.f32()[i]);
}

// ---- layers ----

TEST(GptLayers, EmbeddingMatchesFiniteDifferences) {
  GptDims d = tiny_dims();
  auto layer = make_gpt_embedding(d, 7);
  randomise_params(*layer, 10);
  check_layer(*layer, tokens(2, d.seq_len, d.vocab_size), false, "embedding");
}

TEST(GptLayers, EmbeddingLooksUpTokenPlusPosition) {
  Backend& be = cpu_backend();
  GptDims d = tiny_dims();
  auto layer = make_gpt_embedding(d, 7);
  Tensor tok = tokens(2, 3, d.vocab_size);  // T = 3 < seq_len is allowed
  std::vector<Tensor> saved;
  Tensor y = layer->forward(be, tok, saved);
  ASSERT_EQ(y.shape(), (Shape{2, 3, d.d_model}));
  const Tensor& wte = layer->params()[0]->value;
  const Tensor& wpe = layer->params()[1]->value;
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j < d.d_model; ++j)
      EXPECT_EQ(y.f32()[i * d.d_model + j],
                wte.f32()[tok.i32()[i] * d.d_model + j] + wpe.f32()[(i % 3) * d.d_model + j]);
}

TEST(GptLayers, BlockMatchesFiniteDifferences) {
  GptDims d = tiny_dims();
  auto layer = make_gpt_block(d, 1, 7);
  randomise_params(*layer, 20);
  check_layer(*layer, random_tensor({2, d.seq_len, d.d_model}, 1), true, "block");
}

TEST(GptLayers, HeadMatchesFiniteDifferences) {
  GptDims d = tiny_dims();
  auto layer = make_gpt_head(d, 7);
  randomise_params(*layer, 40);
  check_layer(*layer, random_tensor({2, d.seq_len, d.d_model}, 1), true, "head");
}

// Runs forward + backward; returns dx followed by every parameter gradient.
std::vector<Tensor> block_grads(Layer& layer, const Tensor& x, const Tensor& dy,
                                bool drop_probs) {
  Backend& be = cpu_backend();
  std::vector<Tensor> saved;
  layer.forward(be, x, saved);
  if (drop_probs) saved[4] = Tensor();  // index 4: attention probs (see gpt.cpp)
  for (Param* p : layer.params()) be.fill(p->grad, 0.f);
  std::vector<Tensor> out = {layer.backward(be, x, saved, dy, true)};
  for (Param* p : layer.params()) out.push_back(p->grad.clone(MemCategory::Workspace));
  return out;
}

void expect_bitwise_equal(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].bytes(), b[i].bytes());
    EXPECT_EQ(std::memcmp(a[i].raw(), b[i].raw(), a[i].bytes()), 0) << "tensor " << i;
  }
}

TEST(GptLayers, BlockIsDeterministicAndBackwardCanRecomputeProbs) {
  GptDims d = tiny_dims();
  auto layer = make_gpt_block(d, 0, 7);
  randomise_params(*layer, 20);
  Tensor x = random_tensor({2, d.seq_len, d.d_model}, 1);
  Tensor dy = random_tensor({2, d.seq_len, d.d_model}, 2);
  auto first = block_grads(*layer, x, dy, false);
  expect_bitwise_equal(first, block_grads(*layer, x, dy, false));
  expect_bitwise_equal(first, block_grads(*layer, x, dy, true));
}

TEST(GptLayers, ParamsInDocumentedOrderWithShapes) {
  GptDims d = tiny_dims();
  const int64_t C = d.d_model, V = d.vocab_size, R = d.mlp_ratio;
  auto names_shapes = [](Layer& l) {
    std::vector<std::pair<std::string, Shape>> v;
    for (Param* p : l.params()) v.emplace_back(p->name, p->value.shape());
    return v;
  };
  auto emb = make_gpt_embedding(d, 1);
  auto blk = make_gpt_block(d, 3, 1);
  auto head = make_gpt_head(d, 1);
  using V_ = std::vector<std::pair<std::string, Shape>>;
  EXPECT_EQ(names_shapes(*emb), (V_{{"embed.wte", {V, C}}, {"embed.wpe", {d.seq_len, C}}}));
  EXPECT_EQ(names_shapes(*blk),
            (V_{{"block3.ln1.weight", {C}},
                {"block3.ln1.bias", {C}},
                {"block3.attn.qkv.weight", {3 * C, C}},
                {"block3.attn.qkv.bias", {3 * C}},
                {"block3.attn.proj.weight", {C, C}},
                {"block3.attn.proj.bias", {C}},
                {"block3.ln2.weight", {C}},
                {"block3.ln2.bias", {C}},
                {"block3.mlp.fc.weight", {R * C, C}},
                {"block3.mlp.fc.bias", {R * C}},
                {"block3.mlp.proj.weight", {C, R * C}},
                {"block3.mlp.proj.bias", {C}}}));
  EXPECT_EQ(names_shapes(*head), (V_{{"head.ln_f.weight", {C}},
                                     {"head.ln_f.bias", {C}},
                                     {"head.lm_head.weight", {V, C}}}));
}

double sample_std(const Tensor& t) {
  double s = 0.0;
  for (int64_t i = 0; i < t.numel(); ++i) s += static_cast<double>(t.f32()[i]) * t.f32()[i];
  return std::sqrt(s / static_cast<double>(t.numel()));
}

TEST(GptLayers, InitialisationIsGpt2StyleAndKeyedByName) {
  GptDims d;  // default dims: enough elements for the statistics
  d.blocks = 8;
  auto blk = make_gpt_block(d, 5, 42);
  for (Param* p : blk->params()) {
    const std::string& n = p->name;
    const bool ln = n.find(".ln") != std::string::npos;
    const bool bias = n.find(".bias") != std::string::npos;
    if (ln || bias) {
      const float want = (ln && !bias) ? 1.f : 0.f;
      for (int64_t i = 0; i < p->value.numel(); ++i) EXPECT_EQ(p->value.f32()[i], want) << n;
      continue;
    }
    const bool residual = n.find(".proj.weight") != std::string::npos;
    const double want = residual ? 0.02 / std::sqrt(2.0 * d.blocks) : 0.02;
    EXPECT_NEAR(sample_std(p->value), want, 0.05 * want) << n;
  }
  // Same name and seed -> same values, whatever else was built; another
  // block index or another seed -> other values.
  auto again = make_gpt_block(d, 5, 42);
  auto other = make_gpt_block(d, 4, 42);
  auto reseeded = make_gpt_block(d, 5, 43);
  const Tensor& w = blk->params()[2]->value;
  EXPECT_EQ(std::memcmp(w.raw(), again->params()[2]->value.raw(), w.bytes()), 0);
  EXPECT_NE(std::memcmp(w.raw(), other->params()[2]->value.raw(), w.bytes()), 0);
  EXPECT_NE(std::memcmp(w.raw(), reseeded->params()[2]->value.raw(), w.bytes()), 0);
  auto emb = make_gpt_embedding(d, 42);
  auto head = make_gpt_head(d, 42);
  EXPECT_NEAR(sample_std(emb->params()[0]->value), 0.02, 0.001);
  EXPECT_NEAR(sample_std(head->params()[2]->value), 0.02, 0.001);
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// The split backward (backward_input, later backward_weights) of every
// layer kind gives bitwise the fused backward's dx and parameter gradients,
// over two accumulated micro-batches, with the weights of micro-batch 0 run
// after micro-batch 1's input gradient (as zero-bubble schedules do).
void expect_split_equals_fused(Layer& fused, Layer& split, const std::vector<Tensor>& xs,
                               const char* label) {
  Backend& be = cpu_backend();
  std::vector<std::vector<Tensor>> deferred(xs.size());
  for (size_t m = 0; m < xs.size(); ++m) {
    std::vector<Tensor> saved_a, saved_b;
    Tensor ya = fused.forward(be, xs[m], saved_a);
    split.forward(be, xs[m], saved_b);
    Tensor dy = random_tensor(ya.shape(), 10 + m);
    const bool need_dx = xs[m].dtype() == DType::F32;
    Tensor dxa = fused.backward(be, xs[m], saved_a, dy, need_dx);
    Tensor dxb = split.backward_input(be, xs[m], saved_b, dy, need_dx, deferred[m]);
    ASSERT_EQ(dxa.defined(), dxb.defined()) << label;
    if (dxa.defined()) {
      EXPECT_EQ(0, std::memcmp(dxa.f32(), dxb.f32(), sizeof(float) * dxa.numel())) << label << " dx";
    }
    if (m > 0) split.backward_weights(be, deferred[m - 1]);
  }
  split.backward_weights(be, deferred.back());
  const auto pa = fused.params(), pb = split.params();
  for (size_t i = 0; i < pa.size(); ++i)
    EXPECT_EQ(0, std::memcmp(pa[i]->grad.f32(), pb[i]->grad.f32(), sizeof(float) * pa[i]->grad.numel()))
        << label << " " << pa[i]->name;
}

TEST(SplitBackward, EveryLayerKindMatchesTheFusedBackwardBitwise) {
  GptDims d;
  d.vocab_size = 13;
  d.seq_len = 6;
  d.d_model = 8;
  d.heads = 2;
  d.mlp_ratio = 2;
  const std::vector<Tensor> hidden = {random_tensor({3, 6, 8}, 1), random_tensor({3, 6, 8}, 2)};
  const std::vector<Tensor> toks = {tokens(3, 6, 13), tokens(3, 6, 13)};
  auto a = make_gpt_block(d, 1, 5), b = make_gpt_block(d, 1, 5);
  expect_split_equals_fused(*a, *b, hidden, "block");
  a = make_gpt_head(d, 5), b = make_gpt_head(d, 5);
  expect_split_equals_fused(*a, *b, hidden, "head");
  a = make_gpt_embedding(d, 5), b = make_gpt_embedding(d, 5);
  expect_split_equals_fused(*a, *b, toks, "embedding");
  a = make_linear("l", 8, 5, 3, 0, 1.f), b = make_linear("l", 8, 5, 3, 0, 1.f);
  expect_split_equals_fused(*a, *b, {random_tensor({4, 8}, 3), random_tensor({4, 8}, 4)}, "linear");
  a = make_gelu(), b = make_gelu();
  expect_split_equals_fused(*a, *b, {random_tensor({4, 8}, 3)}, "gelu");
}

}  // namespace
}  // namespace pt
