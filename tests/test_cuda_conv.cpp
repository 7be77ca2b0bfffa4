// test_cuda_conv.cpp: the convolution kernel group of the CUDA backend
// (src/cuda/cuda_conv.cpp, kernels_conv.cu) against the CPU backend's on the
// same inputs, each kernel twice with the same bits, and two SGD steps of a
// small cnn on the GPU against the CPU. Skips without a GPU (fails under
// PIPETRAIN_REQUIRE_GPU=1).
//
// Tolerances, derived (u = 2^-24, gamma(n) = n u / (1 - n u); the float64
// references of conv_reference.hpp give each element's number of terms and
// "magnitude", the sum of its terms' absolute values):
//  - Convolutions and pooling sums: both backends compute a float sum of n
//    terms in some order (cuDNN's implicit-GEMM and ALGO_1 kernels in FMA
//    math, oneDNN's direct convolution), each within gamma(n + extra) *
//    magnitude of the exact value (Higham 2002, 3.1; extra: the bias or the
//    dw already there, 1; an average's division, 2). So they differ by at
//    most twice that. TF32 tensor cores (10-bit operands) would miss this
//    bound by a factor near 2^13 / n: it also proves the FMA math.
//  - The convolutions ignore training.precision on both backends: a bf16
//    backend's forward is bitwise the fp32 backend's.
//  - Max pooling forward copies the window's maximum: bitwise the CPU's.
//  - Normalisations: both evaluate in double and round once, each within
//    u |exact| + (n + 8) 2^-50 magnitude (test_conv_layers.cpp derives it);
//    twice that between the two. Backward gets the CPU's statistics on both
//    sides (the same inputs).
//  - The 2-step cnn: each kernel is within 2 gamma(n) magnitude of the CPU,
//    n <= 9 Cin <= 144 here, so 1.7e-5 of a magnitude; a gradient passes
//    about 12 kernels (3 per residual block, stem, head) and, to first order,
//    their errors add: 2e-4 of the magnitudes, which are within a few times
//    the values at this random initialisation. Gradients and parameters
//    after the steps: 1e-3 relative (max |diff| / max |CPU|); the loss, a
//    mean of cross-entropies that moves by at most 2 max |dlogit|: 1e-4
//    relative. A wrong wiring errs by O(1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "bitwise.hpp"
#include "conv_reference.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/tensor/conv_kernels.hpp"
#include "test_cuda_util.hpp"

namespace pt {
namespace {

using test::ConvCase;
using test::kEps;
using test::kNormCases;
using test::NormCase;
using test::gpu;
using test::host;
using test::random_host;
using test::Ref;

constexpr double kU = 0x1p-24;
double gamma_n(int64_t n) { return n * kU / (1.0 - n * kU); }

ConvKernels& conv_of(Backend& be) { return require_kernels<ConvKernels>(be, "test_cuda_conv"); }
ConvKernels& cpu_conv() { return conv_of(cpu_backend()); }

bool same_bits(const Tensor& a, const Tensor& b) { return test::same_bits(host(a), host(b)); }

Tensor gpu_empty(const Shape& s, DType t = DType::F32) {
  return Tensor::empty(s, t, MemCategory::Workspace, Device::CUDA);
}

// |GPU - CPU| <= bound(i) for every element; prints the worst ratio.
void expect_near_cpu(const Tensor& got_gpu, const Tensor& want,
                     const std::function<double(size_t)>& bound, const std::string& label) {
  const Tensor got = host(got_gpu);
  ASSERT_EQ(got.numel(), want.numel()) << label;
  double worst = 0.0, worst_ratio = 0.0;
  size_t bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const bool finite = std::isfinite(got.f32()[i]) && std::isfinite(want.f32()[i]);
    const double diff =
        finite ? std::fabs(static_cast<double>(got.f32()[i]) - want.f32()[i]) : INFINITY;
    const double b = bound(static_cast<size_t>(i));
    worst = std::max(worst, diff);
    worst_ratio = std::max(worst_ratio, b > 0 ? diff / b : (diff > 0 ? INFINITY : 0.0));
    bad += diff > b;
  }
  std::printf("  %-42s max |gpu - cpu| %.3e, max diff/bound %.3f\n", label.c_str(), worst,
              worst_ratio);
  EXPECT_EQ(bad, 0u) << label << ": " << bad << " elements outside the derived bound";
}

// Two float sums of a Ref's terms (plus `extra`) differ by at most 2 gamma(n) magnitude.
void expect_sums_near(const Tensor& got, const Tensor& want, const Ref& ref, int64_t extra,
                      const std::string& label) {
  expect_near_cpu(got, want,
                  [&](size_t i) { return 2 * gamma_n(ref.terms[i] + extra) * ref.magnitude[i]; },
                  label);
}

// Two double evaluations rounded once: twice test_conv_layers' bound.
void expect_rounded_near(const Tensor& got, const Tensor& want, const std::vector<double>& value,
                         const std::vector<double>& magnitude, int64_t n,
                         const std::string& label) {
  expect_near_cpu(got, want,
                  [&](size_t i) {
                    return 2 * (kU * std::fabs(value[i]) + (n + 8) * 0x1p-50 * magnitude[i]);
                  },
                  label);
}

// ---- convolution ----

const ConvCase kConvCases[] = {
    {"3x3 stride 1 pad 1, bias", {2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, true},
    {"3x3 stride 2 pad 1", {2, 8, 9, 9}, {16, 8, 3, 3}, {2, 1}, false},
    {"1x1 stride 2 (projection)", {2, 3, 7, 6}, {4, 3, 1, 1}, {2, 0}, false},
};

class CudaConvKernel : public ::testing::TestWithParam<ConvCase> {};

TEST_P(CudaConvKernel, MatchesTheCpuAndRepeatsBitwise) {
  PT_REQUIRE_GPU();
  const ConvCase& c = GetParam();
  auto be = test::cuda_backend();
  ConvKernels& dev = conv_of(*be);
  const std::string name = c.name;
  Tensor x = random_host(c.x, 1), w = random_host(c.w, 2, 0.5f), b = random_host({c.w[0]}, 3);
  const Tensor gx = gpu(x), gw = gpu(w), gb = gpu(b);
  const Shape ys = conv2d_output_shape(c.x, c.w, c.g);

  Tensor y = Tensor::empty(ys), gy = gpu_empty(ys), gy2 = gpu_empty(ys);
  cpu_conv().conv2d_forward(x, w, c.bias ? &b : nullptr, c.g, y);
  dev.conv2d_forward(gx, gw, c.bias ? &gb : nullptr, c.g, gy);
  dev.conv2d_forward(gx, gw, c.bias ? &gb : nullptr, c.g, gy2);
  expect_sums_near(gy, y, test::conv_forward_ref(x, w, c.bias ? &b : nullptr, ys, c.g.stride, c.g.pad),
                   1, name + " forward");
  EXPECT_TRUE(same_bits(gy, gy2)) << name << " forward twice";
  // The group convolves in fp32 whatever the backend's precision (as the
  // CPU's does): a bf16 backend gives the same bits.
  auto be16 = test::cuda_backend(Precision::Bf16);
  Tensor gy16 = gpu_empty(ys);
  conv_of(*be16).conv2d_forward(gx, gw, c.bias ? &gb : nullptr, c.g, gy16);
  EXPECT_TRUE(same_bits(gy, gy16)) << name << " forward in a bf16 backend";

  Tensor dy = random_host(ys, 4), dx = Tensor::empty(c.x);
  const Tensor gdy = gpu(dy);
  Tensor gdx = gpu_empty(c.x), gdx2 = gpu_empty(c.x);
  cpu_conv().conv2d_backward_data(dy, w, c.g, dx);
  dev.conv2d_backward_data(gdy, gw, c.g, gdx);
  dev.conv2d_backward_data(gdy, gw, c.g, gdx2);
  expect_sums_near(gdx, dx, test::conv_backward_data_ref(dy, w, c.x, c.g.stride, c.g.pad), 1,
                   name + " backward data");
  EXPECT_TRUE(same_bits(gdx, gdx2)) << name << " backward data twice";

  // The gradients are added into what is there: start from random values,
  // whose size joins the magnitude.
  Tensor dw0 = random_host(c.w, 5), db0 = random_host({c.w[0]}, 6);
  Tensor dw = dw0.clone(MemCategory::Workspace), db = db0.clone(MemCategory::Workspace);
  Tensor gdw = gpu(dw0), gdb = gpu(db0), gdw2 = gpu(dw0), gdb2 = gpu(db0);
  cpu_conv().conv2d_backward_weights(x, dy, c.g, dw, &db);
  dev.conv2d_backward_weights(gx, gdy, c.g, gdw, &gdb);
  dev.conv2d_backward_weights(gx, gdy, c.g, gdw2, &gdb2);
  Ref db_ref({c.w[0]});
  Ref dw_ref = test::conv_backward_weights_ref(x, dy, c.w, c.g.stride, c.g.pad, &db_ref);
  for (int64_t i = 0; i < dw0.numel(); ++i) dw_ref.add(i, dw0.f32()[i]);
  for (int64_t i = 0; i < db0.numel(); ++i) db_ref.add(i, db0.f32()[i]);
  expect_sums_near(gdw, dw, dw_ref, 0, name + " backward weights (added)");
  expect_sums_near(gdb, db, db_ref, 0, name + " backward bias (added)");
  EXPECT_TRUE(same_bits(gdw, gdw2)) << name << " backward weights twice";
  EXPECT_TRUE(same_bits(gdb, gdb2)) << name << " backward bias twice";
}

INSTANTIATE_TEST_SUITE_P(Shapes, CudaConvKernel, ::testing::ValuesIn(kConvCases));

// ---- pooling ----

TEST(CudaPoolKernel, MaxPoolingMatchesTheCpu) {
  PT_REQUIRE_GPU();
  auto be = test::cuda_backend();
  ConvKernels& dev = conv_of(*be);
  const Shape xs{2, 3, 7, 6};
  for (Pool2dGeometry g : {Pool2dGeometry{PoolKind::Max, 2, 2, 0},
                           Pool2dGeometry{PoolKind::Max, 3, 2, 1}}) {
    const std::string name = "max pool k" + std::to_string(g.kernel) + " s" +
                             std::to_string(g.stride) + " p" + std::to_string(g.pad);
    Tensor x = random_host(xs, 1);
    const Shape ys = pool2d_output_shape(xs, g);
    EXPECT_EQ(dev.pool2d_workspace_numel(xs, g), shape_numel(ys)) << name;
    Tensor ws = Tensor::empty({cpu_conv().pool2d_workspace_numel(xs, g)}, DType::I32);
    Tensor gws = gpu_empty({dev.pool2d_workspace_numel(xs, g)}, DType::I32);
    Tensor y = Tensor::empty(ys), gy = gpu_empty(ys), gy2 = gpu_empty(ys);
    cpu_conv().pool2d_forward(x, g, y, &ws);
    dev.pool2d_forward(gpu(x), g, gy, &gws);
    EXPECT_TRUE(same_bits(gy, y)) << name << " forward: the maxima are copies";
    dev.pool2d_forward(gpu(x), g, gy2, &gws);
    EXPECT_TRUE(same_bits(gy, gy2)) << name << " forward twice";

    Tensor dy = random_host(ys, 4), dx = Tensor::empty(xs);
    Tensor gdx = gpu_empty(xs), gdx2 = gpu_empty(xs);
    cpu_conv().pool2d_backward(dy, g, &ws, dx);
    dev.pool2d_backward(gpu(dy), g, &gws, gdx);
    dev.pool2d_backward(gpu(dy), g, &gws, gdx2);
    std::vector<int64_t> argmax;
    test::max_pool_ref(x, ys, g.kernel, g.stride, g.pad, argmax);
    Ref dx_ref(xs);
    for (size_t i = 0; i < argmax.size(); ++i) dx_ref.add(argmax[i], dy.f32()[i]);
    expect_sums_near(gdx, dx, dx_ref, 0, name + " backward");
    EXPECT_TRUE(same_bits(gdx, gdx2)) << name << " backward twice";
  }
}

TEST(CudaPoolKernel, AveragePoolingMatchesTheCpu) {
  PT_REQUIRE_GPU();
  auto be = test::cuda_backend();
  ConvKernels& dev = conv_of(*be);
  const Shape xs{2, 3, 7, 6};
  const Pool2dGeometry g{PoolKind::Avg, 3, 2, 1};  // border windows: padding excluded
  EXPECT_EQ(dev.pool2d_workspace_numel(xs, g), 0);
  Tensor x = random_host(xs, 1);
  const Shape ys = pool2d_output_shape(xs, g);
  Tensor y = Tensor::empty(ys), gy = gpu_empty(ys), gy2 = gpu_empty(ys);
  cpu_conv().pool2d_forward(x, g, y, nullptr);
  dev.pool2d_forward(gpu(x), g, gy, nullptr);
  dev.pool2d_forward(gpu(x), g, gy2, nullptr);
  expect_sums_near(gy, y, test::avg_pool_ref(x, ys, 3, 2, 1), 2, "avg pool forward");
  EXPECT_TRUE(same_bits(gy, gy2));
  Tensor dy = random_host(ys, 4), dx = Tensor::empty(xs), gdx = gpu_empty(xs), gdx2 = gpu_empty(xs);
  cpu_conv().pool2d_backward(dy, g, nullptr, dx);
  dev.pool2d_backward(gpu(dy), g, nullptr, gdx);
  dev.pool2d_backward(gpu(dy), g, nullptr, gdx2);
  expect_sums_near(gdx, dx, test::avg_pool_backward_ref(dy, xs, 3, 2, 1), 2, "avg pool backward");
  EXPECT_TRUE(same_bits(gdx, gdx2));
}

TEST(CudaPoolKernel, GlobalAveragePoolingMatchesTheCpu) {
  PT_REQUIRE_GPU();
  auto be = test::cuda_backend();
  ConvKernels& dev = conv_of(*be);
  const Shape xs{2, 3, 5, 4};
  Tensor x = random_host(xs, 1), y = Tensor::empty({2, 3});
  Tensor gy = gpu_empty({2, 3}), gy2 = gpu_empty({2, 3});
  cpu_conv().global_avg_pool_forward(x, y);
  dev.global_avg_pool_forward(gpu(x), gy);
  dev.global_avg_pool_forward(gpu(x), gy2);
  Ref y_ref({2, 3});  // the mean of each plane's 20 pixels
  for (int64_t i = 0; i < x.numel(); ++i) y_ref.add(i / 20, x.f32()[i] / 20.0);
  expect_sums_near(gy, y, y_ref, 2, "global avg pool forward");
  EXPECT_TRUE(same_bits(gy, gy2));
  Tensor dy = random_host({2, 3}, 4), dx = Tensor::empty(xs), gdx = gpu_empty(xs);
  cpu_conv().global_avg_pool_backward(dy, dx);
  dev.global_avg_pool_backward(gpu(dy), gdx);
  // One division (or a multiplication by a rounded 1/20) of the same float.
  expect_near_cpu(gdx, dx,
                  [&](size_t i) { return 2 * gamma_n(2) * std::fabs(dy.f32()[i / 20] / 20.0); },
                  "global avg pool backward");
}

// The hybrid family's layouts: image (N, C, H, W) <-> tokens (N, H W, C),
// exact copies, so the GPU's bits are the CPU's both ways.
TEST(CudaTokenKernel, ImageToTokensAndBackAreTheCpusBits) {
  PT_REQUIRE_GPU();
  auto be = test::cuda_backend();
  ConvKernels& dev = conv_of(*be);
  const Shape image{2, 3, 5, 4}, tokens{2, 20, 3};
  Tensor x = random_host(image, 7), t = Tensor::empty(tokens), back = Tensor::empty(image);
  Tensor gt = gpu_empty(tokens), gback = gpu_empty(image);
  cpu_conv().image_to_tokens(x, t);
  dev.image_to_tokens(gpu(x), gt);
  EXPECT_TRUE(test::same_bits(host(gt), t)) << "image to tokens";
  cpu_conv().tokens_to_image(t, back);
  dev.tokens_to_image(gt, gback);
  EXPECT_TRUE(test::same_bits(host(gback), back)) << "tokens to image";
  EXPECT_TRUE(test::same_bits(back, x)) << "the round trip is the identity";
}

// Batch norm with running statistics: each output is (x - mean) r gamma +
// beta in double, rounded once, on both sides; the GPU may contract the
// double products into FMAs, a few double roundings (~1e-15 relative)
// before the one float rounding, so they agree within one float ulp.
TEST(CudaNormKernel, BatchNormInferenceMatchesTheCpu) {
  PT_REQUIRE_GPU();
  auto be = test::cuda_backend();
  ConvKernels& dev = conv_of(*be);
  const Shape xs{3, 4, 3, 5};
  Tensor x = random_host(xs, 11), gamma = random_host({4}, 12), beta = random_host({4}, 13);
  Tensor mean = random_host({4}, 14), var = random_host({4}, 15);
  for (int64_t c = 0; c < 4; ++c) var.f32()[c] = std::fabs(var.f32()[c]) + 0.5f;
  Tensor y = Tensor::empty(xs), gy = gpu_empty(xs), gy2 = gpu_empty(xs);
  cpu_conv().batch_norm_inference(x, gamma, beta, mean, var, 1e-5f, y);
  dev.batch_norm_inference(gpu(x), gpu(gamma), gpu(beta), gpu(mean), gpu(var), 1e-5f, gy);
  dev.batch_norm_inference(gpu(x), gpu(gamma), gpu(beta), gpu(mean), gpu(var), 1e-5f, gy2);
  expect_near_cpu(gy, y, [&](size_t i) { return 2 * kU * std::fabs(y.f32()[i]) + 1e-30; },
                  "batch norm inference");
  EXPECT_TRUE(same_bits(gy, gy2));
}

// ---- normalisation ----

// The outputs of one backend's normalisation, forward then backward at the
// statistics `mean_in`, `rstd_in` (the CPU's, on both backends).
struct NormRun {
  Tensor y, mean, rstd, var, dx, dgamma, dbeta;
};

NormRun run_norm(ConvKernels& k, Device dev, const NormCase& c, const Tensor& x,
                 const Tensor& gamma, const Tensor& beta, const Tensor& dy,
                 const Tensor* mean_in, const Tensor* rstd_in) {
  const int64_t stats = test::stat_count(c.x, c.groups);
  auto make = [&](const Shape& s) { return Tensor::empty(s, DType::F32, MemCategory::Workspace, dev); };
  auto on = [&](const Tensor& t) { return dev == Device::CPU ? t : gpu(t); };
  NormRun r{make(c.x), make({stats}), make({stats}), make({stats}), make(c.x),
            on(Tensor::zeros({c.x[1]})), on(Tensor::zeros({c.x[1]}))};
  const Tensor dx_in = on(x), dg = on(gamma), db = on(beta), ddy = on(dy);
  if (c.groups > 0)
    k.group_norm_forward(dx_in, dg, db, c.groups, kEps, r.y, r.mean, r.rstd);
  else
    k.batch_norm_forward(dx_in, dg, db, kEps, r.y, r.mean, r.rstd, &r.var);
  const Tensor m = mean_in ? on(*mean_in) : r.mean, s = rstd_in ? on(*rstd_in) : r.rstd;
  if (c.groups > 0)
    k.group_norm_backward(dx_in, dg, m, s, c.groups, ddy, r.dx, r.dgamma, r.dbeta);
  else
    k.batch_norm_backward(dx_in, dg, m, s, ddy, r.dx, r.dgamma, r.dbeta);
  return r;
}

class CudaNormKernel : public ::testing::TestWithParam<NormCase> {};

TEST_P(CudaNormKernel, MatchesTheCpuAndRepeatsBitwise) {
  PT_REQUIRE_GPU();
  const NormCase& c = GetParam();
  auto be = test::cuda_backend();
  Tensor x = random_host(c.x, 1), gamma = random_host({c.x[1]}, 2, 0.3f);
  Tensor beta = random_host({c.x[1]}, 3), dy = random_host(c.x, 4);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += 2.f + 0.1f * static_cast<float>(i % 7);
  for (int64_t i = 0; i < gamma.numel(); ++i) gamma.f32()[i] += 1.f;
  const NormRun cpu = run_norm(cpu_conv(), Device::CPU, c, x, gamma, beta, dy, nullptr, nullptr);
  ConvKernels& dev = conv_of(*be);
  const NormRun gpu1 = run_norm(dev, Device::CUDA, c, x, gamma, beta, dy, &cpu.mean, &cpu.rstd);
  const NormRun gpu2 = run_norm(dev, Device::CUDA, c, x, gamma, beta, dy, &cpu.mean, &cpu.rstd);

  const int64_t n = c.groups > 0 ? x.numel() / (c.x[0] * c.groups) : x.numel() / c.x[1];
  const auto xd = test::to_double(x), gd = test::to_double(gamma), bd = test::to_double(beta);
  const test::NormForwardRef f = test::norm_forward_ref(xd, c.x, gd, bd, kEps, c.groups);
  const std::string name = c.name;
  expect_rounded_near(gpu1.y, cpu.y, f.y, f.y_magnitude, n, name + " y");
  double x_max = 0.0;
  for (double v : xd) x_max = std::max(x_max, std::fabs(v));
  const std::vector<double> x_scale(f.mean.size(), x_max), x_sq(f.mean.size(), x_max * x_max);
  expect_rounded_near(gpu1.mean, cpu.mean, f.mean, x_scale, n, name + " mean");
  expect_rounded_near(gpu1.rstd, cpu.rstd, f.rstd, f.rstd, n, name + " rstd");
  if (c.groups == 0) expect_rounded_near(gpu1.var, cpu.var, f.var, x_sq, n, name + " var");
  const test::NormBackwardRef b = test::norm_backward_ref(
      xd, c.x, gd, test::to_double(cpu.mean), test::to_double(cpu.rstd), test::to_double(dy),
      c.groups);
  expect_rounded_near(gpu1.dx, cpu.dx, b.dx, b.dx_magnitude, n, name + " dx");
  expect_rounded_near(gpu1.dgamma, cpu.dgamma, b.dgamma, b.dgamma_magnitude, x.numel(),
                      name + " dgamma");
  expect_rounded_near(gpu1.dbeta, cpu.dbeta, b.dbeta, b.dbeta_magnitude, x.numel(),
                      name + " dbeta");
  for (auto [a, bb, what] : {std::tuple{&gpu1.y, &gpu2.y, "y"}, std::tuple{&gpu1.rstd, &gpu2.rstd, "rstd"},
                             std::tuple{&gpu1.dx, &gpu2.dx, "dx"},
                             std::tuple{&gpu1.dgamma, &gpu2.dgamma, "dgamma"}})
    EXPECT_TRUE(same_bits(*a, *bb)) << name << " " << what << " twice";
}

INSTANTIATE_TEST_SUITE_P(Cases, CudaNormKernel, ::testing::ValuesIn(kNormCases));

// ---- a cnn trained two steps ----

ModelConfig tiny_cnn() {
  ModelConfig m;
  m.type = "cnn";
  m.activation = ActivationKind::Relu;  // the family's default (ModelConfig's is the mlp's gelu)
  m.cnn.image_size = 8;
  m.cnn.in_channels = 3;
  m.cnn.classes = 5;
  m.cnn.width = 8;
  m.cnn.stages = 2;
  m.cnn.stage_blocks = 1;
  m.cnn.norm_groups = 2;
  m.init_seed = 31;
  return m;
}

void move_params(StageModel& stage, Device dev) {
  for (Param* p : stage.params()) {
    p->value = p->value.to(dev, MemCategory::Parameters);
    p->grad = p->grad.to(dev, MemCategory::Gradients);
  }
}

// Forward, cross-entropy, backward and one SGD-momentum step; returns the
// loss. The step's gradients stay in Param::grad until the next step.
double train_step(StageModel& stage, Backend& be, Optimizer& opt, const Tensor& images,
                  const Tensor& labels) {
  opt.zero_grad(be);
  StagePass pass;
  const Tensor logits = stage_forward(stage, be, images, pass);  // (N, classes)
  Tensor dlogits = Tensor::empty(logits.shape(), DType::F32, MemCategory::Workspace, logits.device());
  const double loss = stage.loss->forward_backward(be, logits, labels, 1.f / images.dim(0), dlogits);
  stage_backward(stage, be, pass, dlogits, false);
  opt.step(be, 0.05f, 1.f);
  return loss;
}

TEST(CudaCnn, TwoTrainingStepsMatchTheCpu) {
  PT_REQUIRE_GPU();
  const ModelConfig m = tiny_cnn();
  const int64_t units = m.cnn.stages * m.cnn.stage_blocks, N = 4;
  StageModel ref = build_stage(m, {units}, 0);
  StageModel dev = build_stage(m, {units}, 0);
  move_params(dev, Device::CUDA);
  auto be = test::cuda_backend();
  check_family_backend(m, *be);  // the cnn family accepts the CUDA backend now
  TrainingConfig t;
  t.optimizer = OptimizerKind::Sgd;
  t.momentum = 0.9;
  Optimizer ref_opt(t, ref.params()), dev_opt(t, dev.params());
  Tensor images = random_host({N, m.cnn.in_channels, m.cnn.image_size, m.cnn.image_size}, 9);
  Tensor labels = Tensor::empty({N}, DType::I32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < N; ++i) labels.i32()[i] = static_cast<int32_t>((3 * i + 1) % m.cnn.classes);
  const Tensor gimages = gpu(images), glabels = gpu(labels);
  for (int step = 0; step < 2; ++step) {
    const double ref_loss = train_step(ref, cpu_backend(), ref_opt, images, labels);
    const double dev_loss = train_step(dev, *be, dev_opt, gimages, glabels);
    std::printf("  step %d: loss cpu %.9f cuda %.9f\n", step, ref_loss, dev_loss);
    EXPECT_NEAR(dev_loss, ref_loss, 1e-4 * ref_loss) << "step " << step;
  }
  const std::vector<Param*> rp = ref.params(), dp = dev.params();
  ASSERT_EQ(rp.size(), dp.size());
  for (size_t i = 0; i < rp.size(); ++i) {
    EXPECT_EQ(dp[i]->value.device(), Device::CUDA);
    test::expect_close(dp[i]->grad, rp[i]->grad, 1e-3, rp[i]->name + ".grad at step 2");
    test::expect_close(dp[i]->value, rp[i]->value, 1e-3, rp[i]->name + " after 2 SGD steps");
  }
}

}  // namespace
}  // namespace pt
