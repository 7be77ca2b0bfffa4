// test_conv_layers.cpp: the convolution kernel group of the CPU backend
// (conv_kernels.hpp) against plain float64 references (conv_reference.hpp),
// the references' gradients against float64 adjoint identities and finite
// differences, and each kernel's determinism (two calls, the same bits).
//
// Tolerances, derived (u = 2^-24, the unit roundoff of f32; gamma(n) =
// n u / (1 - n u)):
//  - A float sum of n products, in any order, with or without FMA, differs
//    from the exact sum by at most gamma(n) times the sum of the terms'
//    absolute values (the standard inner-product bound, Higham 2002, 3.1).
//    oneDNN's direct convolution is such a sum; a bias adds one term, so
//    |kernel - exact| <= gamma(terms + 1) * magnitude, "magnitude" being
//    the sum of |term| that the reference keeps. Pooling averages add a
//    division (or a multiplication by a rounded 1/k): gamma(terms + 2).
//  - The normalisations evaluate in double and round once to f32, so
//    |kernel - exact| <= u |exact| + the double evaluation error of both
//    kernel and reference, each below (n + 8) 2^-53 magnitude for a chain of
//    n-term sums; we allow 8 times that, (n + 8) 2^-50 magnitude.
//  - The reference itself is exact to 2^-53 relative per operation, which
//    the bounds above (>= 2^-24 relative) cover many times over.
// Every check prints the worst |kernel - reference| and its ratio to the bound.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <tuple>

#include "bitwise.hpp"
#include "conv_reference.hpp"
#include "fd_check.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/conv_kernels.hpp"

namespace pt {
namespace {

using test::ConvCase;
using test::kEps;
using test::kNormCases;
using test::NormCase;
using test::random_tensor;
using test::Ref;
using test::same_bits;
using test::to_double;

constexpr double kU = 0x1p-24;
double gamma_n(int64_t n) { return n * kU / (1.0 - n * kU); }

ConvKernels& conv() { return require_kernels<ConvKernels>(cpu_backend(), "test_conv_layers"); }

Tensor zeros(const Shape& s) { return Tensor::zeros(s); }

// Checks |got - value| <= bound(i) element by element; prints the worst.
void expect_within(const Tensor& got, const std::vector<double>& value,
                   const std::function<double(size_t)>& bound, const std::string& label) {
  ASSERT_EQ(static_cast<size_t>(got.numel()), value.size()) << label;
  double worst = 0.0, worst_ratio = 0.0;
  size_t bad = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const double diff = std::fabs(got.f32()[i] - value[i]);
    worst = std::max(worst, diff);
    const double b = bound(i);
    worst_ratio = std::max(worst_ratio, b > 0 ? diff / b : (diff > 0 ? INFINITY : 0.0));
    bad += diff > b;
  }
  std::printf("  %-40s max |diff| %.3e, max diff/bound %.3f\n", label.c_str(), worst, worst_ratio);
  EXPECT_EQ(bad, 0u) << label << ": " << bad << " elements outside the derived bound";
}

// The float-sum bound of a Ref: gamma(terms + extra) * magnitude.
void expect_sum_bound(const Tensor& got, const Ref& ref, int64_t extra, const std::string& label) {
  expect_within(got, ref.value,
                [&](size_t i) { return gamma_n(ref.terms[i] + extra) * ref.magnitude[i]; },
                label);
}

// The double-evaluated bound: u |exact| + (n + 8) 2^-50 magnitude.
void expect_rounded_once(const Tensor& got, const std::vector<double>& value,
                         const std::vector<double>& magnitude, int64_t n,
                         const std::string& label) {
  expect_within(got, value,
                [&](size_t i) {
                  return kU * std::fabs(value[i]) + (n + 8) * 0x1p-50 * magnitude[i];
                },
                label);
}

// ---- convolution ----

const ConvCase kConvCases[] = {
    {"3x3 stride 1 pad 1, bias", {2, 3, 7, 6}, {4, 3, 3, 3}, {1, 1}, true},
    {"3x3 stride 2 pad 1", {2, 3, 7, 6}, {5, 3, 3, 3}, {2, 1}, false},
    {"1x1 stride 2 (projection)", {2, 3, 7, 6}, {4, 3, 1, 1}, {2, 0}, false},
};

class ConvKernel : public ::testing::TestWithParam<ConvCase> {};

TEST_P(ConvKernel, MatchesFloat64ReferenceAndIsDeterministic) {
  const ConvCase& c = GetParam();
  Tensor x = random_tensor(c.x, 1), w = random_tensor(c.w, 2, 0.5f), b = random_tensor({c.w[0]}, 3);
  const Shape ys = conv2d_output_shape(c.x, c.w, c.g);
  Tensor y = Tensor::empty(ys), y2 = Tensor::empty(ys);
  conv().conv2d_forward(x, w, c.bias ? &b : nullptr, c.g, y);
  expect_sum_bound(y, test::conv_forward_ref(x, w, c.bias ? &b : nullptr, ys, c.g.stride, c.g.pad),
                   1, std::string(c.name) + " forward");
  conv().conv2d_forward(x, w, c.bias ? &b : nullptr, c.g, y2);
  EXPECT_TRUE(same_bits(y, y2)) << "forward twice";

  Tensor dy = random_tensor(ys, 4), dx = Tensor::empty(c.x), dx2 = Tensor::empty(c.x);
  conv().conv2d_backward_data(dy, w, c.g, dx);
  expect_sum_bound(dx, test::conv_backward_data_ref(dy, w, c.x, c.g.stride, c.g.pad), 1,
                   std::string(c.name) + " backward data");
  conv().conv2d_backward_data(dy, w, c.g, dx2);
  EXPECT_TRUE(same_bits(dx, dx2)) << "backward data twice";

  Tensor dw = zeros(c.w), db = zeros({c.w[0]});
  conv().conv2d_backward_weights(x, dy, c.g, dw, &db);
  Ref db_ref({c.w[0]});
  const Ref dw_ref = test::conv_backward_weights_ref(x, dy, c.w, c.g.stride, c.g.pad, &db_ref);
  expect_sum_bound(dw, dw_ref, 1, std::string(c.name) + " backward weights");
  expect_sum_bound(db, db_ref, 1, std::string(c.name) + " backward bias");
  // A second call adds the same gradient: t + t = 2t exactly in float.
  Tensor once = dw.clone(MemCategory::Workspace);
  conv().conv2d_backward_weights(x, dy, c.g, dw, nullptr);
  for (int64_t i = 0; i < dw.numel(); ++i) once.f32()[i] *= 2.f;
  EXPECT_TRUE(same_bits(dw, once)) << "backward weights adds into dw, bitwise the same gradient";
}

INSTANTIATE_TEST_SUITE_P(Shapes, ConvKernel, ::testing::ValuesIn(kConvCases));

// The references' backward is the adjoint of their forward (a convolution is
// linear in x and in w): <dy, conv(x, w)> = <bwd_data(dy), x> = <bwd_w(x, dy), w>,
// in double to 1e-12 relative (each side a sum of a few hundred products).
TEST(ConvReference, BackwardIsTheAdjointOfForward) {
  const Shape xs{2, 3, 7, 6}, ws{4, 3, 3, 3};
  Tensor x = random_tensor(xs, 1), w = random_tensor(ws, 2);
  for (int64_t stride : {1, 2}) {
    const Shape ys = conv2d_output_shape(xs, ws, {stride, 1});
    Tensor dy = random_tensor(ys, 4);
    const Ref y = test::conv_forward_ref(x, w, nullptr, ys, stride, 1);
    const Ref dx = test::conv_backward_data_ref(dy, w, xs, stride, 1);
    const Ref dw = test::conv_backward_weights_ref(x, dy, ws, stride, 1, nullptr);
    double lhs = 0.0, via_x = 0.0, via_w = 0.0;
    for (int64_t i = 0; i < dy.numel(); ++i) lhs += dy.f32()[i] * y.value[i];
    for (int64_t i = 0; i < x.numel(); ++i) via_x += x.f32()[i] * dx.value[i];
    for (int64_t i = 0; i < w.numel(); ++i) via_w += w.f32()[i] * dw.value[i];
    std::printf("  stride %ld: <dy, y> %.15g, <dx, x> %.15g, <dw, w> %.15g\n",
                static_cast<long>(stride), lhs, via_x, via_w);
    EXPECT_NEAR(via_x, lhs, 1e-12 * std::fabs(lhs));
    EXPECT_NEAR(via_w, lhs, 1e-12 * std::fabs(lhs));
  }
}

TEST(ConvKernel, BackwardWeightsIsDeterministicWithTwoThreads) {
  set_blas_threads(2);
  Tensor x = random_tensor({4, 8, 9, 9}, 1), dy = random_tensor({4, 8, 5, 5}, 2);
  Tensor a = zeros({8, 8, 3, 3}), b = zeros({8, 8, 3, 3});
  conv().conv2d_backward_weights(x, dy, {2, 1}, a, nullptr);
  conv().conv2d_backward_weights(x, dy, {2, 1}, b, nullptr);
  set_blas_threads(1);
  EXPECT_TRUE(same_bits(a, b));
}

// ---- pooling ----

TEST(PoolKernel, MaxPoolingMatchesReference) {
  const Shape xs{2, 3, 7, 6};
  for (Pool2dGeometry g : {Pool2dGeometry{PoolKind::Max, 2, 2, 0}, Pool2dGeometry{PoolKind::Max, 3, 2, 1}}) {
    const std::string name = "max pool k" + std::to_string(g.kernel) + " s" +
                             std::to_string(g.stride) + " p" + std::to_string(g.pad);
    Tensor x = random_tensor(xs, 1);
    const Shape ys = pool2d_output_shape(xs, g);
    Tensor y = Tensor::empty(ys), y2 = Tensor::empty(ys);
    Tensor ws = Tensor::empty({conv().pool2d_workspace_numel(xs, g)}, DType::I32);
    conv().pool2d_forward(x, g, y, &ws);
    std::vector<int64_t> argmax;
    // Maxima are copies: equal exactly.
    expect_within(y, test::max_pool_ref(x, ys, g.kernel, g.stride, g.pad, argmax),
                  [](size_t) { return 0.0; }, name + " forward");
    conv().pool2d_forward(x, g, y2, &ws);
    EXPECT_TRUE(same_bits(y, y2));

    Tensor dy = random_tensor(ys, 4), dx = Tensor::empty(xs), dx2 = Tensor::empty(xs);
    conv().pool2d_backward(dy, g, &ws, dx);
    Ref dx_ref(xs);  // each window's gradient at its maximum, summed where windows overlap
    for (size_t i = 0; i < argmax.size(); ++i) dx_ref.add(argmax[i], dy.f32()[i]);
    expect_sum_bound(dx, dx_ref, 0, name + " backward");
    conv().pool2d_backward(dy, g, &ws, dx2);
    EXPECT_TRUE(same_bits(dx, dx2));
  }
}

TEST(PoolKernel, AveragePoolingMatchesReference) {
  const Shape xs{2, 3, 7, 6};
  const Pool2dGeometry g{PoolKind::Avg, 3, 2, 1};  // border windows: padding excluded
  Tensor x = random_tensor(xs, 1);
  const Shape ys = pool2d_output_shape(xs, g);
  Tensor y = Tensor::empty(ys);
  EXPECT_EQ(conv().pool2d_workspace_numel(xs, g), 0);
  conv().pool2d_forward(x, g, y, nullptr);
  expect_sum_bound(y, test::avg_pool_ref(x, ys, 3, 2, 1), 2, "avg pool forward");
  Tensor dy = random_tensor(ys, 4), dx = Tensor::empty(xs), dx2 = Tensor::empty(xs);
  conv().pool2d_backward(dy, g, nullptr, dx);
  expect_sum_bound(dx, test::avg_pool_backward_ref(dy, xs, 3, 2, 1), 2, "avg pool backward");
  conv().pool2d_backward(dy, g, nullptr, dx2);
  EXPECT_TRUE(same_bits(dx, dx2));
}

TEST(PoolKernel, GlobalAveragePoolingMatchesReference) {
  const Shape xs{2, 3, 5, 4};
  Tensor x = random_tensor(xs, 1), y = Tensor::empty({2, 3});
  conv().global_avg_pool_forward(x, y);
  Ref y_ref({2, 3});  // the mean of each image's 20 pixels of a channel
  for (int64_t i = 0; i < x.numel(); ++i) y_ref.add(i / 20, x.f32()[i] / 20.0);
  expect_sum_bound(y, y_ref, 2, "global avg pool forward (5 x 4 window)");
  Tensor dy = random_tensor({2, 3}, 4), dx = Tensor::empty(xs);
  conv().global_avg_pool_backward(dy, dx);
  std::vector<double> dx_ref(static_cast<size_t>(dx.numel()));
  for (size_t i = 0; i < dx_ref.size(); ++i) dx_ref[i] = dy.f32()[i / 20] / 20.0;
  expect_within(dx, dx_ref, [&](size_t i) { return gamma_n(2) * std::fabs(dx_ref[i]); },
                "global avg pool backward");
}

// ---- normalisation ----

// Inputs of a normalisation: x with a per-element offset (so that the
// mean matters), gamma around 1, beta random.
struct NormInputs {
  Tensor x, gamma, beta, dy;
  explicit NormInputs(const Shape& xs)
      : x(random_tensor(xs, 1)), gamma(random_tensor({xs[1]}, 2, 0.3f)),
        beta(random_tensor({xs[1]}, 3)), dy(random_tensor(xs, 4)) {
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += 2.f + 0.1f * static_cast<float>(i % 7);
    for (int64_t i = 0; i < gamma.numel(); ++i) gamma.f32()[i] += 1.f;
  }
};

// The kernel's outputs: y, mean, rstd (one per statistic), var (batch norm).
struct NormOutputs {
  Tensor y, mean, rstd, var, dx, dgamma, dbeta;
  NormOutputs(const Shape& xs, int64_t stats)
      : y(Tensor::empty(xs)), mean(Tensor::empty({stats})), rstd(Tensor::empty({stats})),
        var(Tensor::empty({stats})), dx(Tensor::empty(xs)), dgamma(zeros({xs[1]})),
        dbeta(zeros({xs[1]})) {}
};

NormOutputs run_norm(const NormCase& c, const NormInputs& in) {
  NormOutputs out(c.x, test::stat_count(c.x, c.groups));
  if (c.groups > 0) {
    conv().group_norm_forward(in.x, in.gamma, in.beta, c.groups, kEps, out.y, out.mean, out.rstd);
    conv().group_norm_backward(in.x, in.gamma, out.mean, out.rstd, c.groups, in.dy, out.dx,
                               out.dgamma, out.dbeta);
  } else {
    conv().batch_norm_forward(in.x, in.gamma, in.beta, kEps, out.y, out.mean, out.rstd, &out.var);
    conv().batch_norm_backward(in.x, in.gamma, out.mean, out.rstd, in.dy, out.dx, out.dgamma,
                               out.dbeta);
  }
  return out;
}

class NormKernel : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormKernel, MatchesFloat64ReferenceAndIsDeterministic) {
  const NormCase& c = GetParam();
  const NormInputs in(c.x);
  const NormOutputs out = run_norm(c, in);
  const int64_t n = c.groups > 0 ? in.x.numel() / (c.x[0] * c.groups) : in.x.numel() / c.x[1];
  const auto x = to_double(in.x), gamma = to_double(in.gamma), beta = to_double(in.beta);
  const test::NormForwardRef f = test::norm_forward_ref(x, c.x, gamma, beta, kEps, c.groups);
  const std::string name = c.name;
  expect_rounded_once(out.y, f.y, f.y_magnitude, n, name + " y");
  double x_max = 0.0;
  for (double v : x) x_max = std::max(x_max, std::fabs(v));
  const std::vector<double> x_scale(f.mean.size(), x_max), x_scale_sq(f.mean.size(), x_max * x_max);
  expect_rounded_once(out.mean, f.mean, x_scale, n, name + " mean");
  expect_rounded_once(out.rstd, f.rstd, f.rstd, n, name + " rstd");
  if (c.groups == 0) expect_rounded_once(out.var, f.var, x_scale_sq, n, name + " var");

  // The backward's contract: the gradient at the statistics it is given.
  const test::NormBackwardRef b = test::norm_backward_ref(
      x, c.x, gamma, to_double(out.mean), to_double(out.rstd), to_double(in.dy), c.groups);
  expect_rounded_once(out.dx, b.dx, b.dx_magnitude, n, name + " dx");
  expect_rounded_once(out.dgamma, b.dgamma, b.dgamma_magnitude, in.x.numel(), name + " dgamma");
  expect_rounded_once(out.dbeta, b.dbeta, b.dbeta_magnitude, in.x.numel(), name + " dbeta");

  const NormOutputs again = run_norm(c, in);
  EXPECT_TRUE(same_bits(out.y, again.y)) << name << " y twice";
  EXPECT_TRUE(same_bits(out.rstd, again.rstd)) << name << " rstd twice";
  EXPECT_TRUE(same_bits(out.dx, again.dx)) << name << " dx twice";
  EXPECT_TRUE(same_bits(out.dgamma, again.dgamma)) << name << " dgamma twice";
}

// The reference's backward is the gradient of its forward: central
// differences of L = sum(r * y) in double with h = 1e-5. Truncation error
// h^2 / 6 times L's third derivative (O(10) at these O(1) inputs: ~2e-10)
// plus rounding 2^-53 sum|r y| / h (~1e-9 for sum|r y| < 100): 1e-7 of
// max(1, |gradient|) leaves a margin of 100.
TEST_P(NormKernel, ReferenceGradientMatchesFiniteDifferences) {
  const NormCase& c = GetParam();
  const NormInputs in(c.x);
  std::vector<double> x = to_double(in.x), gamma = to_double(in.gamma), beta = to_double(in.beta);
  const std::vector<double> r = to_double(in.dy);
  auto loss = [&] {
    const auto f = test::norm_forward_ref(x, c.x, gamma, beta, kEps, c.groups);
    double l = 0.0;
    for (size_t i = 0; i < r.size(); ++i) l += r[i] * f.y[i];
    return l;
  };
  const auto f = test::norm_forward_ref(x, c.x, gamma, beta, kEps, c.groups);
  const auto b = test::norm_backward_ref(x, c.x, gamma, f.mean, f.rstd, r, c.groups);
  auto worst_error = [&](std::vector<double>& v, const std::vector<double>& grad) {
    double worst = 0.0;
    for (size_t i = 0; i < v.size(); ++i) {
      const double keep = v[i], h = 1e-5;
      v[i] = keep + h;
      const double up = loss();
      v[i] = keep - h;
      const double down = loss();
      v[i] = keep;
      const double numeric = (up - down) / (2 * h);
      worst = std::max(worst, std::fabs(numeric - grad[i]) / std::max(1.0, std::fabs(numeric)));
    }
    return worst;
  };
  const std::tuple<const char*, std::vector<double>*, const std::vector<double>*> checks[] = {
      {"x", &x, &b.dx}, {"gamma", &gamma, &b.dgamma}, {"beta", &beta, &b.dbeta}};
  for (const auto& [label, values, grad] : checks) {
    const double err = worst_error(*values, *grad);
    std::printf("  %-28s d%-5s max rel error %.3e\n", c.name, label, err);
    EXPECT_LT(err, 1e-7) << c.name << " d" << label;
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, NormKernel, ::testing::ValuesIn(kNormCases));

TEST(NormKernel, GroupsThatDoNotDivideTheChannelsAreRefused) {
  Tensor x = random_tensor({1, 6, 2, 2}, 1), g = zeros({6}), y = Tensor::empty({1, 6, 2, 2});
  Tensor mean = Tensor::empty({4}), rstd = Tensor::empty({4});
  try {
    conv().group_norm_forward(x, g, g, 4, kEps, y, mean, rstd);
    FAIL() << "4 groups of 6 channels accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("4 groups do not divide the 6 channels of x (1, 6, 2, 2)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pt
