// test_layers.cpp: every layer and loss against central finite differences.
//
// For a layer y = f(x) and a fixed random r, the scalar L = sum(r * y) has
// dL/dx = backward(r) and dL/dW = the accumulated parameter gradient. Each
// analytic gradient element is compared with (L(v + h) - L(v - h)) / 2h,
// computed in double from float forward passes. The max difference is printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>

#include "pipetrain/model/layers.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "fd_check.hpp"
#include "pipetrain/base/rng.hpp"

namespace pt {
namespace {

using test::dot;
using test::max_fd_error;
using test::random_tensor;

void check_layer(Layer& layer, const Shape& in_shape, const char* label) {
  Backend& be = cpu_backend();
  Tensor x = random_tensor(in_shape, 1);
  std::vector<Tensor> saved;
  Tensor y = layer.forward(be, x, saved);
  Tensor r = random_tensor(y.shape(), 2);
  for (Param* p : layer.params()) be.fill(p->grad, 0.f);
  Tensor dx = layer.backward(be, x, saved, r, true);
  auto loss = [&] {
    std::vector<Tensor> s;
    return dot(layer.forward(be, x, s), r);
  };
  double err = max_fd_error(x, dx, loss);
  std::printf("  %-8s dx max rel error %.3e\n", label, err);
  EXPECT_LT(err, 2e-3) << label << " dx";
  for (Param* p : layer.params()) {
    double perr = max_fd_error(p->value, p->grad, loss);
    std::printf("  %-8s %s max rel error %.3e\n", label, p->name.c_str(), perr);
    EXPECT_LT(perr, 2e-3) << label << " " << p->name;
  }
}

TEST(Layers, LinearMatchesFiniteDifferences) {
  auto layer = make_linear("lin", 7, 5, 3, 0, 1.f);
  check_layer(*layer, {4, 7}, "linear");
}

// A Linear layer (in -> out) after its forward on `rows` random rows, with
// a random output gradient: what the weight-gradient tests start from.
struct ForwardedLinear {
  std::unique_ptr<Layer> layer;
  Tensor x, dy;  // (rows, in), (rows, out)
  std::vector<Tensor> saved;
  Param* w;      // the weight, (out, in)
  ForwardedLinear(int64_t rows, int64_t in, int64_t out)
      : layer(make_linear("lin", in, out, 3, 0, 1.f)),
        x(random_tensor({rows, in}, 1)),
        dy(random_tensor({rows, out}, 2)) {
    layer->forward(cpu_backend(), x, saved);
    w = layer->params()[0];
  }
  void backward() { layer->backward(cpu_backend(), x, saved, dy, false); }
};

TEST(Layers, LinearAccumulatesGradientsAcrossCalls) {
  Backend& be = cpu_backend();
  ForwardedLinear lin(4, 3, 2);
  Param* w = lin.w;
  be.fill(w->grad, 0.f);
  lin.backward();
  Tensor once = w->grad.clone(MemCategory::Workspace);
  lin.backward();
  // Twice the gradient up to rounding: a kernel may add C inside or after
  // its sum over the rows, so the bound is relative to the largest entry.
  float largest = 0.f;
  for (int64_t i = 0; i < once.numel(); ++i) largest = std::max(largest, std::fabs(once.f32()[i]));
  ASSERT_GT(largest, 0.f);
  for (int64_t i = 0; i < once.numel(); ++i)
    EXPECT_NEAR(w->grad.f32()[i], 2.f * once.f32()[i], 1e-6f * largest) << "entry " << i;
}

// zero_grad leaves a Linear weight's zeroing to its first accumulation: the
// stale buffer must not leak into the gradient, which must be bitwise the
// filled-then-accumulated one, and settle_grad must zero a pending one.
TEST(Layers, LinearWeightGradientZeroedByItsFirstAccumulation) {
  Backend& be = cpu_backend();
  ForwardedLinear lin(16, 300, 40);
  Param* w = lin.w;
  ASSERT_TRUE(w->zero_by_overwrite);
  be.fill(w->grad, 0.f);
  lin.backward();
  lin.backward();
  const Tensor filled = w->grad.clone(MemCategory::Workspace);

  TrainingConfig cfg;
  cfg.optimizer = OptimizerKind::Sgd;
  Optimizer opt(cfg, lin.layer->params());
  be.fill(w->grad, 7.f);  // stale values a fill would have cleared
  opt.zero_grad(be);
  EXPECT_TRUE(w->grad_zero_pending);
  EXPECT_EQ(w->grad.f32()[0], 7.f) << "zero_grad filled a gradient zeroed by overwrite";
  lin.backward();
  EXPECT_FALSE(w->grad_zero_pending);
  lin.backward();
  for (int64_t i = 0; i < filled.numel(); ++i)
    ASSERT_EQ(w->grad.f32()[i], filled.f32()[i]) << "element " << i;

  opt.zero_grad(be);
  settle_grad(be, *w);
  EXPECT_FALSE(w->grad_zero_pending);
  for (int64_t i = 0; i < w->grad.numel(); ++i) ASSERT_EQ(w->grad.f32()[i], 0.f);
}

TEST(Layers, ReluMatchesFiniteDifferences) {
  auto layer = make_relu();
  check_layer(*layer, {3, 6}, "relu");
}

TEST(Layers, GeluMatchesFiniteDifferences) {
  auto layer = make_gelu();
  check_layer(*layer, {3, 6}, "gelu");
}

void check_loss(Loss& loss, const Tensor& target, const Shape& shape, const char* label) {
  Backend& be = cpu_backend();
  Tensor pred = random_tensor(shape, 3);
  Tensor dpred = Tensor::empty(shape);
  const float scale = 0.25f;
  loss.forward_backward(be, pred, target, scale, dpred);
  auto value = [&] {
    Tensor scratch = Tensor::empty(shape);
    // L = scale * summed loss, so dL/dpred = dpred.
    return scale * loss.forward_backward(be, pred, target, scale, scratch);
  };
  double err = max_fd_error(pred, dpred, value);
  std::printf("  %-13s dpred max rel error %.3e\n", label, err);
  EXPECT_LT(err, 2e-3) << label;
}

TEST(Losses, MseMatchesFiniteDifferences) {
  auto loss = make_loss(LossKind::Mse);
  check_loss(*loss, random_tensor({4, 3}, 4), {4, 3}, "mse");
}

TEST(Losses, CrossEntropyMatchesFiniteDifferences) {
  auto loss = make_loss(LossKind::CrossEntropy);
  Tensor labels = Tensor::empty({4}, DType::I32);
  for (int i = 0; i < 4; ++i) labels.i32()[i] = (i * 3) % 5;
  check_loss(*loss, labels, {4, 5}, "cross_entropy");
}

TEST(Losses, CrossEntropyValueIsLogClassesForUniformLogits) {
  Backend& be = cpu_backend();
  auto loss = make_loss(LossKind::CrossEntropy);
  Tensor logits = Tensor::zeros({2, 8});
  Tensor labels = Tensor::zeros({2}, DType::I32);
  Tensor d = Tensor::empty({2, 8});
  EXPECT_NEAR(loss->forward_backward(be, logits, labels, 1.f, d), 2.0 * std::log(8.0), 1e-9);
}

}  // namespace
}  // namespace pt
