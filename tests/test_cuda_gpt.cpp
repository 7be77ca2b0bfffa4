// test_cuda_gpt.cpp: one whole GPT training step (embedding, two pre-LN
// blocks, head, cross-entropy; forward, backward, SGD-momentum update) on the
// CUDA backend against the CPU backend, from identical initial weights, in
// fp32, tf32 and bf16; and fp16 end to end with dynamic loss scaling over a
// few steps, one of them an injected overflow that must be skipped. The GPU
// copy is driven exactly as the executor drives it: parameters moved with
// Tensor::to, activations allocated by the unchanged layers on the backend's
// device, the optimizer's state beside its parameters. Skips without a GPU (fails under
// PIPETRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>

#include "pipetrain/model/loss_scaler.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "test_cuda_util.hpp"

namespace pt {
namespace {

using test::expect_close;
using test::gpu;

// Relative errors (max |GPU - CPU| / max |CPU|) allowed for the loss, the
// logits and the gradients. Parameters after the step get the gradients'
// tolerance, not a tighter one: the biases start at zero, so after one SGD
// step a bias is -lr * grad exactly and its relative error is the gradient's
// (a CPU emulation of bf16 rounding gives 3.8e-3 to 8e-3 there, tf32 1.1e-3
// to 2.9e-3). Weights start far from zero, so their error after the step is
// smaller still; the gradients' tolerance bounds both.
struct Tolerances {
  double loss, logits, grads;
};

Tolerances tolerances(Precision p) {
  switch (p) {
    case Precision::Fp32: return {1e-6, 1e-4, 1e-4};
    case Precision::Tf32: return {2e-3, 1e-2, 3e-2};
    case Precision::Bf16: return {1e-2, 3e-2, 8e-2};
    case Precision::Fp16: return {2e-3, 1e-2, 3e-2};
  }
  return {};
}

ModelConfig tiny_gpt() {
  ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = 29;
  m.gpt.seq_len = 16;
  m.gpt.d_model = 64;
  m.gpt.heads = 4;
  m.gpt.blocks = 2;
  m.gpt.mlp_ratio = 4;
  m.init_seed = 77;
  return m;
}

TrainingConfig sgd_config() {
  TrainingConfig t;
  t.optimizer = OptimizerKind::Sgd;
  t.momentum = 0.9;
  t.weight_decay = 1e-2;
  return t;
}

// Tokens (mb, T) and next-token labels (mb, T), on the host.
void make_batch(const ModelConfig& m, int64_t mb, Tensor& tokens, Tensor& labels) {
  tokens = Tensor::empty({mb, m.gpt.seq_len}, DType::I32, MemCategory::Workspace, Device::CPU);
  labels = Tensor::empty({mb, m.gpt.seq_len}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < mb * m.gpt.seq_len; ++i) {
    tokens.i32()[i] = static_cast<int32_t>((i * 11 + i / 5) % m.gpt.vocab_size);
    labels.i32()[i] = static_cast<int32_t>((i * 11 + i / 5 + 3) % m.gpt.vocab_size);
  }
}

void move_params(StageModel& stage, Device dev) {
  for (Param* p : stage.params()) {
    p->value = p->value.to(dev, MemCategory::Parameters);
    p->grad = p->grad.to(dev, MemCategory::Gradients);
  }
}

// Forward, loss, backward and one optimizer step; returns the loss and the logits.
double train_step(StageModel& stage, Backend& be, const Tensor& tokens, const Tensor& labels,
                  Tensor& logits) {
  StagePass pass;
  logits = stage_forward(stage, be, tokens, pass);  // (mb, T, V)
  Tensor dy = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, logits.device());
  const float grad_scale = 1.f / static_cast<float>(tokens.numel());
  const double loss = stage.loss->forward_backward(be, logits, labels, grad_scale, dy);
  stage_backward(stage, be, pass, dy, false);
  Optimizer opt(sgd_config(), stage.params());
  opt.step(be, 0.05f, 1.f);
  return loss;
}

// GPU against the CPU emulation of the same precision (docs/cuda.md,
// "Tolerances of the GPU tests"). bf16 and fp16: both round every GEMM
// operand to nearest even, so they differ in the order of their fp32 sums
// only; a moved fp32 value can still round to the neighbouring bf16 (fp16)
// operand, one ulp = 2u away, and one operand can dominate an element: 4u
// per product (u = 2^-8: 1.6e-2; fp16 u = 2^-11: 2.0e-3), not ten times the
// fp32 tolerance. tf32: cuBLAS reads only the first 10 mantissa bits of an
// fp32 operand (truncation) where the emulation rounds to nearest, so every
// operand may differ by an ulp: the tf32 tolerances against fp32 apply.
// Returns {logits, grads}.
std::pair<double, double> emulation_tolerance(Precision p) {
  switch (p) {
    case Precision::Bf16: return {4 * std::ldexp(1.0, -8), 4 * std::ldexp(1.0, -8)};
    case Precision::Fp16: return {4 * std::ldexp(1.0, -11), 4 * std::ldexp(1.0, -11)};
    case Precision::Tf32:
    case Precision::Fp32: return {tolerances(p).logits, tolerances(p).grads};
  }
  return {0.0, 0.0};
}

double max_abs(const Tensor& t) {
  const Tensor h = t.device() == Device::CPU ? t : test::host(t);
  double m = 0.0;
  for (int64_t i = 0; i < h.numel(); ++i) m = std::max(m, std::fabs(static_cast<double>(h.f32()[i])));
  return m;
}

void compare_with_cpu_emulation(Precision precision, StageModel& dev, double dev_loss,
                                const Tensor& dev_logits) {
  if (precision == Precision::Fp32) return;
  const ModelConfig m = tiny_gpt();
  const auto [logits_tol, grads_tol] = emulation_tolerance(precision);
  auto emulated = make_cpu_backend(precision);
  StageModel ref = build_stage(m, {m.gpt.blocks}, 0);
  Tensor tokens, labels, ref_logits;
  make_batch(m, 3, tokens, labels);
  const double ref_loss = train_step(ref, *emulated, tokens, labels, ref_logits);
  const std::string tag = std::string(" vs CPU emulated ") + kind_name(precision);
  std::printf("  loss cpu-emulated %.9f  cuda %.9f\n", ref_loss, dev_loss);
  // A row's cross-entropy moves by at most 2 max|dz| (its gradient p - onehot
  // has an L1 norm <= 2), and so does their mean.
  EXPECT_LE(std::fabs(dev_loss - ref_loss), 2 * logits_tol * max_abs(ref_logits)) << tag;
  expect_close(dev_logits, ref_logits, logits_tol, "logits" + tag);
  const std::vector<Param*> rp = ref.params(), dp = dev.params();
  for (size_t i = 0; i < rp.size(); ++i)
    expect_close(dp[i]->grad, rp[i]->grad, grads_tol, rp[i]->name + ".grad" + tag);
}

void compare_step(Precision precision) {
  const ModelConfig m = tiny_gpt();
  const Tolerances tol = tolerances(precision);
  StageModel ref = build_stage(m, {m.gpt.blocks}, 0);
  StageModel dev = build_stage(m, {m.gpt.blocks}, 0);
  move_params(dev, Device::CUDA);
  cuda::BackendOptions o;
  o.precision = precision;
  auto be = cuda::make_backend(o);
  Tensor tokens, labels, ref_logits, dev_logits;
  make_batch(m, 3, tokens, labels);
  // Gradients are compared after the step: SGD leaves them in Param::grad.
  const double ref_loss = train_step(ref, cpu_backend(), tokens, labels, ref_logits);
  const double dev_loss = train_step(dev, *be, gpu(tokens), gpu(labels), dev_logits);
  const std::string tag = std::string(" ") + kind_name(precision);
  std::printf("  loss cpu %.9f  cuda%s %.9f\n", ref_loss, tag.c_str(), dev_loss);
  EXPECT_NEAR(dev_loss, ref_loss, tol.loss * ref_loss);
  expect_close(dev_logits, ref_logits, tol.logits, "logits" + tag);
  const std::vector<Param*> rp = ref.params(), dp = dev.params();
  ASSERT_EQ(rp.size(), dp.size());
  for (size_t i = 0; i < rp.size(); ++i) {
    EXPECT_EQ(dp[i]->value.device(), Device::CUDA);
    expect_close(dp[i]->grad, rp[i]->grad, tol.grads, rp[i]->name + ".grad" + tag);
    expect_close(dp[i]->value, rp[i]->value, tol.grads, rp[i]->name + " after SGD" + tag);
  }
  compare_with_cpu_emulation(precision, dev, dev_loss, dev_logits);
}

TEST(CudaGpt, TrainingStepMatchesCpuFp32) {
  PT_REQUIRE_GPU();
  compare_step(Precision::Fp32);
}

TEST(CudaGpt, TrainingStepMatchesCpuTf32) {
  PT_REQUIRE_GPU();
  compare_step(Precision::Tf32);
}

TEST(CudaGpt, TrainingStepMatchesCpuBf16) {
  PT_REQUIRE_GPU();
  compare_step(Precision::Bf16);
}

// One fp16-style step with dynamic loss scaling, on any backend: forward,
// backward with the loss seed multiplied by S, an inf written into one
// gradient when `overflow`, then the scaler decides; the optimizer steps only
// when it says so. Returns the loss.
double scaled_step(StageModel& stage, Backend& be, Optimizer& opt, LossScaler& scaler,
                   const Tensor& tokens, const Tensor& labels, bool overflow) {
  StagePass pass;
  Tensor logits = stage_forward(stage, be, tokens, pass);
  Tensor dy = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, logits.device());
  const float grad_scale = 1.f / static_cast<float>(tokens.numel());
  const double loss =
      stage.loss->forward_backward(be, logits, labels, grad_scale * scaler.scale(), dy);
  stage_backward(stage, be, pass, dy, false);
  const std::vector<Param*> params = stage.params();
  if (overflow) {
    Tensor g = test::host(params[0]->grad);
    g.f32()[0] = std::numeric_limits<float>::infinity();
    copy_tensor(g, params[0]->grad);
  }
  const bool finite = scaler.grads_finite(be, params);
  if (finite) scaler.unscale(be, params);
  if (scaler.update(finite)) opt.step(be, 0.05f, 1.f);
  opt.zero_grad(be);
  return loss;
}

std::vector<Tensor> host_values(StageModel& stage) {
  std::vector<Tensor> out;
  for (Param* p : stage.params()) out.push_back(test::host(p->value));
  return out;
}

TEST(CudaGpt, Fp16TrainsWithTheLossScalerAndSkipsAnOverflow) {
  PT_REQUIRE_GPU();
  const ModelConfig m = tiny_gpt();
  StageModel ref = build_stage(m, {m.gpt.blocks}, 0);  // fp32 on the CPU, same schedule
  StageModel dev = build_stage(m, {m.gpt.blocks}, 0);
  move_params(dev, Device::CUDA);
  cuda::BackendOptions o;
  o.precision = Precision::Fp16;
  auto be = cuda::make_backend(o);
  Tensor tokens, labels;
  make_batch(m, 3, tokens, labels);
  const Tensor gtokens = gpu(tokens), glabels = gpu(labels);
  LossScalerConfig cfg;
  cfg.initial_scale = 1024;
  cfg.growth_interval = 2;
  LossScaler ref_scaler(cfg), dev_scaler(cfg);
  Optimizer ref_opt(sgd_config(), ref.params());
  // Its state on the GPU, beside the moved parameters.
  auto dev_opt = std::make_unique<Optimizer>(sgd_config(), dev.params());
  const float expected_scale[4] = {1024, 512, 512, 1024};  // skip at step 1, grow after 2
  for (int64_t step = 0; step < 4; ++step) {
    const bool overflow = step == 1;
    const std::vector<Tensor> before = host_values(dev);
    const double ref_loss =
        scaled_step(ref, cpu_backend(), ref_opt, ref_scaler, tokens, labels, overflow);
    const double loss =
        scaled_step(dev, *be, *dev_opt, dev_scaler, gtokens, glabels, overflow);
    std::printf("  step %lld: loss cpu %.6f cuda fp16 %.6f, scale %g\n",
                static_cast<long long>(step), ref_loss, loss, dev_scaler.scale());
    EXPECT_TRUE(std::isfinite(loss));
    EXPECT_NEAR(loss, ref_loss, tolerances(Precision::Fp16).loss * ref_loss);
    EXPECT_EQ(dev_scaler.scale(), expected_scale[step]) << "step " << step;
    if (overflow) {  // skipped: every parameter bit unchanged
      const std::vector<Tensor> after = host_values(dev);
      for (size_t i = 0; i < after.size(); ++i)
        EXPECT_EQ(std::memcmp(after[i].raw(), before[i].raw(), after[i].bytes()), 0) << i;
    }
  }
  EXPECT_EQ(dev_scaler.skipped_steps(), 1);
  const std::vector<Param*> rp = ref.params(), dp = dev.params();
  for (size_t i = 0; i < rp.size(); ++i)
    expect_close(dp[i]->value, rp[i]->value, tolerances(Precision::Fp16).grads,
                 rp[i]->name + " after 3 fp16 steps");
}

TEST(CudaGpt, RecomputedProbsGiveTheSameGradients) {
  PT_REQUIRE_GPU();
  // Selective recomputation drops the saved probs; the block recomputes them
  // on the backend. On the GPU the result must equal the stored-probs path.
  const ModelConfig m = tiny_gpt();
  StageModel stage = build_stage(m, {m.gpt.blocks}, 0);
  move_params(stage, Device::CUDA);
  auto be = cuda::make_backend();
  Tensor x = gpu(test::random_host({2, m.gpt.seq_len, m.gpt.d_model}, 40));
  Tensor dy = gpu(test::random_host({2, m.gpt.seq_len, m.gpt.d_model}, 41));
  Layer& block = *stage.layers[1];
  std::vector<Tensor> saved;
  block.forward(*be, x, saved);
  Tensor dx_stored = block.backward(*be, x, saved, dy, true);
  saved[4] = Tensor();  // kProbs in gpt.cpp's BlockSaved
  Tensor dx_recomputed = block.backward(*be, x, saved, dy, true);
  expect_close(dx_recomputed, test::host(dx_stored), 0.0, "dx with recomputed probs");
}

}  // namespace
}  // namespace pt
