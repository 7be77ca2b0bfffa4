// test_fused_attention.cpp: the CPU backend's fused attention group
// (fused_attention_kernels.hpp, model.attention = "fused") against the
// reference attention of TransformerKernels and against finite differences:
// forward and backward agree with the reference in fp32 (to fp32 rounding)
// and in bf16 (to bf16 rounding), the stats are each row's log-sum-exp of
// the scaled causal scores, the future is not seen, and every kernel gives
// the same bits twice. Then the GPT block with fused attention: close to the
// reference block, and its backward after selective recomputation's drop (or
// a full recompute) is bitwise its plain backward. Max differences printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fd_check.hpp"
#include "pipetrain/model/gpt.hpp"

namespace pt {
namespace {

using test::dot;
using test::max_fd_error;
using test::random_tensor;

// mb 2, T 9, C 12, H 3 (D 4): several heads and rows of every length.
struct Dims {
  int64_t mb = 2, T = 9, C = 12, H = 3;
  Shape qkv() const { return {mb, T, 3 * C}; }
  Shape out() const { return {mb, T, C}; }
  Shape stats() const { return {mb, H, T}; }
};

struct Result {
  Tensor y, stats, dqkv;  // (mb, T, C), (mb, H, T) (fused only), (mb, T, 3C)
};

Result reference(Backend& be, const Dims& d, const Tensor& qkv, const Tensor& dy) {
  TransformerKernels& k = gpt_kernels(be);
  Tensor probs = Tensor::empty({d.mb, d.H, d.T, d.T});
  Result r{Tensor::empty(d.out()), Tensor(), Tensor::empty(d.qkv())};
  k.attention_probs(qkv, d.H, probs);
  k.attention_values(qkv, probs, d.H, r.y);
  k.attention_backward(qkv, probs, dy, d.H, r.dqkv);
  return r;
}

Result fused(Backend& be, const Dims& d, const Tensor& qkv, const Tensor& dy) {
  FusedAttentionKernels& k = gpt_fused_attention(be);
  Result r{Tensor::empty(d.out()), Tensor::empty(d.stats()), Tensor::empty(d.qkv())};
  k.forward(qkv, d.H, r.y, r.stats);
  k.backward(qkv, r.y, r.stats, dy, d.H, r.dqkv);
  return r;
}

// max |a - b| / max |b|, printed with `what`.
double rel_diff(const Tensor& a, const Tensor& b, const std::string& what) {
  EXPECT_EQ(a.numel(), b.numel());
  double diff = 0.0, scale = 0.0;
  for (int64_t i = 0; i < b.numel(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a.f32()[i]) - b.f32()[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b.f32()[i])));
  }
  std::printf("  %-36s max |diff| %.3e, relative %.3e\n", what.c_str(), diff, diff / scale);
  return diff / scale;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// stats[b, h, i] = log sum_{j <= i} exp(q_i . k_j / sqrt(D)), in double.
std::vector<double> expected_stats(const Dims& d, const Tensor& qkv) {
  const int64_t D = d.C / d.H;
  const double scale = 1.0 / std::sqrt(static_cast<double>(D));
  std::vector<double> out;
  for (int64_t b = 0; b < d.mb; ++b)
    for (int64_t h = 0; h < d.H; ++h)
      for (int64_t i = 0; i < d.T; ++i) {
        std::vector<double> s;
        for (int64_t j = 0; j <= i; ++j) {
          double dotqk = 0.0;
          for (int64_t k = 0; k < D; ++k)
            dotqk += static_cast<double>(qkv.f32()[(b * d.T + i) * 3 * d.C + h * D + k]) *
                     qkv.f32()[(b * d.T + j) * 3 * d.C + d.C + h * D + k];
          s.push_back(dotqk * scale);
        }
        const double m = *std::max_element(s.begin(), s.end());
        double sum = 0.0;
        for (double v : s) sum += std::exp(v - m);
        out.push_back(m + std::log(sum));
      }
  return out;
}

TEST(FusedAttention, Fp32MatchesTheReferenceAndStatsAreRowLogSumExp) {
  Dims d;
  Tensor qkv = random_tensor(d.qkv(), 1, 1.5f), dy = random_tensor(d.out(), 2);
  const Result want = reference(cpu_backend(), d, qkv, dy);
  const Result got = fused(cpu_backend(), d, qkv, dy);
  EXPECT_LE(rel_diff(got.y, want.y, "fp32 y vs reference"), 1e-5);
  EXPECT_LE(rel_diff(got.dqkv, want.dqkv, "fp32 dqkv vs reference"), 1e-5);
  const std::vector<double> lse = expected_stats(d, qkv);
  double worst = 0.0;
  for (int64_t i = 0; i < got.stats.numel(); ++i)
    worst = std::max(worst, std::fabs(got.stats.f32()[i] - lse[static_cast<size_t>(i)]));
  std::printf("  %-36s max |diff| %.3e\n", "stats vs log-sum-exp in double", worst);
  EXPECT_LE(worst, 1e-5);
}

// In bf16 both paths round every GEMM operand (and the fused one its
// outputs) to 8 significant bits: they agree to a few bf16 ulps (2^-8
// relative), and each stays within bf16 rounding of the fp32 reference.
TEST(FusedAttention, Bf16MatchesTheBf16ReferenceToBf16Rounding) {
  Dims d;
  Tensor qkv = random_tensor(d.qkv(), 3, 1.5f), dy = random_tensor(d.out(), 4);
  std::unique_ptr<Backend> bf16 = make_cpu_backend(Precision::Bf16);
  const Result want = reference(*bf16, d, qkv, dy);
  const Result got = fused(*bf16, d, qkv, dy);
  const Result exact = reference(cpu_backend(), d, qkv, dy);
  const double tol = 4 * std::ldexp(1.0, -8);
  EXPECT_LE(rel_diff(got.y, want.y, "bf16 y vs bf16 reference"), tol);
  EXPECT_LE(rel_diff(got.dqkv, want.dqkv, "bf16 dqkv vs bf16 reference"), tol);
  EXPECT_LE(rel_diff(got.y, exact.y, "bf16 y vs fp32 reference"), tol);
  EXPECT_LE(rel_diff(got.dqkv, exact.dqkv, "bf16 dqkv vs fp32 reference"), tol);
  EXPECT_FALSE(same_bits(got.y, exact.y)) << "bf16 rounding changed nothing";
}

TEST(FusedAttention, BackwardMatchesFiniteDifferences) {
  Dims d;
  d.T = 5;
  FusedAttentionKernels& k = gpt_fused_attention(cpu_backend());
  Tensor qkv = random_tensor(d.qkv(), 5), r = random_tensor(d.out(), 6);
  const Result at = fused(cpu_backend(), d, qkv, r);
  auto loss = [&] {
    Tensor y = Tensor::empty(d.out()), stats = Tensor::empty(d.stats());
    k.forward(qkv, d.H, y, stats);
    return dot(y, r);
  };
  const double err = max_fd_error(qkv, at.dqkv, loss);
  std::printf("  %-36s max rel error %.3e\n", "fused dqkv vs finite differences", err);
  EXPECT_LT(err, 2e-3);
}

TEST(FusedAttention, DoesNotSeeTheFutureAndIsDeterministic) {
  Dims d;
  Tensor qkv = random_tensor(d.qkv(), 7), dy = random_tensor(d.out(), 8);
  const Result first = fused(cpu_backend(), d, qkv, dy);
  const Result again = fused(cpu_backend(), d, qkv, dy);
  EXPECT_TRUE(same_bits(first.y, again.y));
  EXPECT_TRUE(same_bits(first.stats, again.stats));
  EXPECT_TRUE(same_bits(first.dqkv, again.dqkv));
  // Change q, k and v of the last position: no earlier output moves.
  for (int64_t b = 0; b < d.mb; ++b)
    for (int64_t j = 0; j < 3 * d.C; ++j) qkv.f32()[(b * d.T + d.T - 1) * 3 * d.C + j] += 1.f;
  const Result moved = fused(cpu_backend(), d, qkv, dy);
  int64_t changed = 0;
  for (int64_t b = 0; b < d.mb; ++b)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t j = 0; j < d.C; ++j) {
        const int64_t i = (b * d.T + t) * d.C + j;
        if (t + 1 < d.T) EXPECT_EQ(first.y.f32()[i], moved.y.f32()[i]) << "b " << b << " t " << t;
        else changed += first.y.f32()[i] != moved.y.f32()[i];
      }
  EXPECT_GT(changed, 0) << "the last position's output did not move";
}

// ---- the GPT block ----

GptDims block_dims(AttentionKind attention) {
  GptDims g;
  g.vocab_size = 11;
  g.seq_len = 7;
  g.d_model = 12;
  g.heads = 3;
  g.mlp_ratio = 2;
  g.blocks = 2;
  g.attention = attention;
  return g;
}

enum class Stash { Kept, SelectiveDrop, Recomputed };

// y, dx and every parameter gradient of one forward and backward of `layer`.
std::vector<Tensor> block_run(Layer& layer, const Tensor& x, const Tensor& dy, Stash stash) {
  Backend& be = cpu_backend();
  std::vector<Tensor> saved;
  std::vector<Tensor> out = {layer.forward(be, x, saved)};
  if (stash == Stash::SelectiveDrop) layer.drop_recomputable(saved);
  if (stash == Stash::Recomputed) layer.recompute_saved(be, x, saved);
  for (Param* p : layer.params()) be.fill(p->grad, 0.f);
  out.push_back(layer.backward(be, x, saved, dy, true));
  for (Param* p : layer.params()) out.push_back(p->grad.clone(MemCategory::Workspace));
  return out;
}

// The same O(1) random values in both layers (the GPT-scale init, std 0.02,
// would leave the attention nearly uniform).
void randomise_alike(Layer& a, Layer& b) {
  std::vector<Param*> pa = a.params(), pb = b.params();
  ASSERT_EQ(pa.size(), pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    const int64_t fan_in = pa[i]->value.ndim() == 2 ? pa[i]->value.dim(1) : 4;
    const Tensor v = random_tensor(pa[i]->value.shape(), 30 + i,
                                   1.f / std::sqrt(static_cast<float>(fan_in)));
    std::memcpy(pa[i]->value.raw(), v.raw(), v.bytes());
    std::memcpy(pb[i]->value.raw(), v.raw(), v.bytes());
  }
}

TEST(FusedAttentionBlock, MatchesTheReferenceBlockAndKeepsOnlyRowStatistics) {
  const GptDims g = block_dims(AttentionKind::Fused);
  auto ref_layer = make_gpt_block(block_dims(AttentionKind::Reference), 0, 5);
  auto fused_layer = make_gpt_block(g, 0, 5);
  randomise_alike(*ref_layer, *fused_layer);
  Tensor x = random_tensor({2, g.seq_len, g.d_model}, 9);
  Tensor dy = random_tensor({2, g.seq_len, g.d_model}, 10);
  const std::vector<Tensor> want = block_run(*ref_layer, x, dy, Stash::Kept);
  const std::vector<Tensor> got = block_run(*fused_layer, x, dy, Stash::Kept);
  ASSERT_EQ(got.size(), want.size());
  EXPECT_LE(rel_diff(got[0], want[0], "block y"), 1e-5);
  EXPECT_LE(rel_diff(got[1], want[1], "block dx"), 1e-4);
  for (size_t i = 2; i < got.size(); ++i)
    EXPECT_LE(rel_diff(got[i], want[i], fused_layer->params()[i - 2]->name), 1e-4);
  // The softmax state a fused block keeps: (mb, H, T), not (mb, H, T, T).
  std::vector<Tensor> saved;
  fused_layer->forward(cpu_backend(), x, saved);
  EXPECT_EQ(saved[4].shape(), (Shape{2, g.heads, g.seq_len}));  // index 4: see gpt.cpp
}

TEST(FusedAttentionBlock, RecomputationGivesTheSameBits) {
  const GptDims g = block_dims(AttentionKind::Fused);
  auto layer = make_gpt_block(g, 1, 6);
  Tensor x = random_tensor({3, g.seq_len, g.d_model}, 11);
  Tensor dy = random_tensor({3, g.seq_len, g.d_model}, 12);
  const std::vector<Tensor> kept = block_run(*layer, x, dy, Stash::Kept);
  for (Stash stash : {Stash::SelectiveDrop, Stash::Recomputed}) {
    const std::vector<Tensor> got = block_run(*layer, x, dy, stash);
    ASSERT_EQ(got.size(), kept.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(same_bits(got[i], kept[i])) << "tensor " << i;
  }
}

}  // namespace
}  // namespace pt
