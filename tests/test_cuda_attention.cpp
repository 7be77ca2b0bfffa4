// test_cuda_attention.cpp: the CUDA backend's fused attention (cuDNN SDPA,
// model.attention = "fused", #42) against the CPU in the same precision,
// bf16:
//   - forward y and backward dqkv against the CPU's reference attention
//     (TransformerKernels, probabilities materialised) in bf16, and the
//     statistics against the CPU's fused kernels' log-sum-exp, at shapes
//     with head widths 64 and 128 and a sequence that is no multiple of 64;
//   - determinism: two forwards and two backwards give the same bits
//     (cuDNN's deterministic backward);
//   - the group exists in bf16 only;
//   - one GPT training step with fused attention on the GPU against the CPU
//     with reference attention, both bf16.
// Every comparison prints its max difference. Skips without a GPU (fails
// under PIPETRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "pipetrain/model/gpt.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/tensor/fused_attention_kernels.hpp"
#include "test_cuda_util.hpp"

namespace pt {
namespace {

using test::expect_close;
using test::gpu;
using test::host;
using test::random_host;

// Relative (to max |CPU|) tolerances of the bf16 comparisons. Both sides
// round Q, K, V and dy to the same bf16 values; they differ in the order of
// the fp32 sums, in where the probabilities are rounded to bf16 (cuDNN per
// tile, after its running maximum) and in cuDNN's bf16 outputs: a few bf16
// ulps (2^-8 = 3.9e-3) of the largest element.
constexpr double kOutputTol = 2e-2;
constexpr double kGradTol = 3e-2;
constexpr double kStatsTol = 1e-3;  // absolute: both are fp32 sums of the same bf16 products

struct Shape4 {
  int64_t mb, T, C, H;
  std::string name() const {
    return "mb " + std::to_string(mb) + " T " + std::to_string(T) + " C " + std::to_string(C) +
           " H " + std::to_string(H);
  }
};

const Shape4 kShapes[] = {{2, 128, 256, 4}, {3, 100, 384, 3}};  // D = 64 and 128

std::unique_ptr<Backend> gpu_backend(Precision p) {
  cuda::BackendOptions o;
  o.precision = p;
  return cuda::make_backend(o);
}

FusedAttentionKernels& fused_of(Backend& be) {
  return require_kernels<FusedAttentionKernels>(be, "the fused attention GPU test");
}

struct Outputs {
  Tensor y, stats, dqkv;  // (mb, T, C), (mb, H, T) (fused only), (mb, T, 3C); on the host
};

// The cuDNN kernels on the GPU, results copied back.
Outputs run_gpu(FusedAttentionKernels& k, const Shape4& s, const Tensor& qkv, const Tensor& dy) {
  const auto on_gpu = [](const Shape& shape) {
    return Tensor::empty(shape, DType::F32, MemCategory::Workspace, Device::CUDA);
  };
  Tensor q = gpu(qkv), g = gpu(dy);
  Tensor y = on_gpu({s.mb, s.T, s.C}), stats = on_gpu({s.mb, s.H, s.T});
  Tensor dqkv = on_gpu(qkv.shape());
  k.forward(q, s.H, y, stats);
  k.backward(q, y, stats, g, s.H, dqkv);
  return {host(y), host(stats), host(dqkv)};
}

// The CPU's reference attention in bf16 (no stats) and its fused kernels' stats.
Outputs run_cpu(Backend& be, const Shape4& s, const Tensor& qkv, const Tensor& dy) {
  TransformerKernels& ref = test::transformer(be);
  Tensor probs = Tensor::empty({s.mb, s.H, s.T, s.T});
  Outputs o{Tensor::empty({s.mb, s.T, s.C}), Tensor::empty({s.mb, s.H, s.T}),
            Tensor::empty(qkv.shape())};
  ref.attention_probs(qkv, s.H, probs);
  ref.attention_values(qkv, probs, s.H, o.y);
  ref.attention_backward(qkv, probs, dy, s.H, o.dqkv);
  Tensor fused_y = Tensor::empty({s.mb, s.T, s.C});
  fused_of(be).forward(qkv, s.H, fused_y, o.stats);
  return o;
}

// Infinity when the sizes differ or an element is inf or NaN.
double max_abs_diff(const Tensor& a, const Tensor& b) {
  if (a.numel() != b.numel()) return INFINITY;
  double m = 0.0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    if (!std::isfinite(a.f32()[i]) || !std::isfinite(b.f32()[i])) return INFINITY;
    m = std::max(m, std::fabs(static_cast<double>(a.f32()[i]) - b.f32()[i]));
  }
  return m;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

TEST(CudaAttention, FusedMatchesTheCpuReferenceInBf16) {
  PT_REQUIRE_GPU();
  auto dev = gpu_backend(Precision::Bf16);
  auto cpu = make_cpu_backend(Precision::Bf16);
  for (const Shape4& s : kShapes) {
    std::printf(" %s\n", s.name().c_str());
    const Tensor qkv = random_host({s.mb, s.T, 3 * s.C}, 1);
    const Tensor dy = random_host({s.mb, s.T, s.C}, 2);
    const Outputs got = run_gpu(fused_of(*dev), s, qkv, dy);
    const Outputs want = run_cpu(*cpu, s, qkv, dy);
    expect_close(got.y, want.y, kOutputTol, "y vs CPU reference bf16");
    expect_close(got.dqkv, want.dqkv, kGradTol, "dqkv vs CPU reference bf16");
    const double stats_diff = max_abs_diff(got.stats, want.stats);
    std::printf("  %-40s max |diff| %.3e (tol %.0e)\n", "stats vs CPU fused bf16", stats_diff,
                kStatsTol);
    EXPECT_LE(stats_diff, kStatsTol) << s.name();
  }
}

TEST(CudaAttention, FusedIsDeterministic) {
  PT_REQUIRE_GPU();
  auto dev = gpu_backend(Precision::Bf16);
  const Shape4 s = kShapes[0];
  const Tensor qkv = random_host({s.mb, s.T, 3 * s.C}, 3);
  const Tensor dy = random_host({s.mb, s.T, s.C}, 4);
  const Outputs first = run_gpu(fused_of(*dev), s, qkv, dy);
  const Outputs again = run_gpu(fused_of(*dev), s, qkv, dy);
  EXPECT_TRUE(same_bits(first.y, again.y)) << "forward y";
  EXPECT_TRUE(same_bits(first.stats, again.stats)) << "forward stats";
  EXPECT_TRUE(same_bits(first.dqkv, again.dqkv)) << "backward dqkv";
}

TEST(CudaAttention, TheGroupExistsInBf16Only) {
  PT_REQUIRE_GPU();
  for (Precision p : {Precision::Fp32, Precision::Tf32, Precision::Fp16})
    EXPECT_EQ(gpu_backend(p)->kernels<FusedAttentionKernels>(), nullptr) << kind_name(p);
  EXPECT_NE(gpu_backend(Precision::Bf16)->kernels<FusedAttentionKernels>(), nullptr)
      << "bf16 on an sm_80+ GPU (the GPU check runs on H100 / H200)";
}

// ---- one GPT training step ----

ModelConfig small_gpt(AttentionKind attention) {
  ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = 37;
  m.gpt.seq_len = 64;
  m.gpt.d_model = 128;
  m.gpt.heads = 2;  // D = 64
  m.gpt.blocks = 2;
  m.gpt.mlp_ratio = 4;
  m.init_seed = 91;
  m.gpt.attention = attention;
  return m;
}

// Forward, loss, backward; returns the loss, the logits (host) and leaves
// the gradients in the parameters.
double loss_and_grads(StageModel& stage, Backend& be, const Tensor& tokens, const Tensor& labels,
                      Tensor& logits) {
  StagePass pass;
  logits = stage_forward(stage, be, tokens, pass);
  Tensor dy = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, logits.device());
  const double loss = stage.loss->forward_backward(
      be, logits, labels, 1.f / static_cast<float>(tokens.numel()), dy);
  stage_backward(stage, be, pass, dy, false);
  if (logits.device() == Device::CUDA) logits = host(logits);
  return loss;
}

TEST(CudaAttention, GptStepWithFusedAttentionMatchesTheCpuReferenceInBf16) {
  PT_REQUIRE_GPU();
  const ModelConfig fused = small_gpt(AttentionKind::Fused);
  const ModelConfig reference = small_gpt(AttentionKind::Reference);
  StageModel dev = build_stage(fused, {fused.gpt.blocks}, 0);
  StageModel ref = build_stage(reference, {reference.gpt.blocks}, 0);
  for (Param* p : dev.params()) {
    p->value = p->value.to(Device::CUDA, MemCategory::Parameters);
    p->grad = p->grad.to(Device::CUDA, MemCategory::Gradients);
  }
  const int64_t mb = 2;
  const Shape tokens_shape = {mb, fused.gpt.seq_len};
  Tensor tokens = Tensor::empty(tokens_shape, DType::I32, MemCategory::Workspace, Device::CPU);
  Tensor labels = Tensor::empty(tokens_shape, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < tokens.numel(); ++i) {
    tokens.i32()[i] = static_cast<int32_t>((i * 13 + i / 7) % fused.gpt.vocab_size);
    labels.i32()[i] = static_cast<int32_t>((i * 13 + i / 7 + 5) % fused.gpt.vocab_size);
  }
  auto be = gpu_backend(Precision::Bf16);
  auto cpu = make_cpu_backend(Precision::Bf16);
  Tensor dev_logits, ref_logits;
  const double dev_loss = loss_and_grads(dev, *be, gpu(tokens), gpu(labels), dev_logits);
  const double ref_loss = loss_and_grads(ref, *cpu, tokens, labels, ref_logits);
  std::printf("  loss cpu reference bf16 %.9f  cuda fused bf16 %.9f\n", ref_loss, dev_loss);
  EXPECT_NEAR(dev_loss, ref_loss, 1e-2 * ref_loss);
  expect_close(dev_logits, ref_logits, kOutputTol, "logits");
  const std::vector<Param*> dp = dev.params(), rp = ref.params();
  ASSERT_EQ(dp.size(), rp.size());
  for (size_t i = 0; i < rp.size(); ++i)
    expect_close(dp[i]->grad, rp[i]->grad, 8e-2, rp[i]->name + ".grad");
}

}  // namespace
}  // namespace pt
