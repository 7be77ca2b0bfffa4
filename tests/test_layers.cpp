// test_layers.cpp: every layer and loss against central finite differences.
//
// For a layer y = f(x) and a fixed random r, the scalar L = sum(r * y) has
// dL/dx = backward(r) and dL/dW = the accumulated parameter gradient. Each
// analytic gradient element is compared with (L(v + h) - L(v - h)) / 2h,
// computed in double from float forward passes. The max difference is printed.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "pipetrain/model/layers.hpp"
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

TEST(Layers, LinearAccumulatesGradientsAcrossCalls) {
  Backend& be = cpu_backend();
  auto layer = make_linear("lin", 3, 2, 3, 0, 1.f);
  Tensor x = random_tensor({4, 3}, 1), dy = random_tensor({4, 2}, 2);
  std::vector<Tensor> saved;
  layer->forward(be, x, saved);
  Param* w = layer->params()[0];
  be.fill(w->grad, 0.f);
  layer->backward(be, x, saved, dy, false);
  Tensor once = w->grad.clone(MemCategory::Workspace);
  layer->backward(be, x, saved, dy, false);
  for (int64_t i = 0; i < once.numel(); ++i)
    EXPECT_FLOAT_EQ(w->grad.f32()[i], 2.f * once.f32()[i]);
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
  auto loss = make_loss("mse");
  check_loss(*loss, random_tensor({4, 3}, 4), {4, 3}, "mse");
}

TEST(Losses, CrossEntropyMatchesFiniteDifferences) {
  auto loss = make_loss("cross_entropy");
  Tensor labels = Tensor::empty({4}, DType::I32);
  for (int i = 0; i < 4; ++i) labels.i32()[i] = (i * 3) % 5;
  check_loss(*loss, labels, {4, 5}, "cross_entropy");
}

TEST(Losses, CrossEntropyValueIsLogClassesForUniformLogits) {
  Backend& be = cpu_backend();
  auto loss = make_loss("cross_entropy");
  Tensor logits = Tensor::zeros({2, 8});
  Tensor labels = Tensor::zeros({2}, DType::I32);
  Tensor d = Tensor::empty({2, 8});
  EXPECT_NEAR(loss->forward_backward(be, logits, labels, 1.f, d), 2.0 * std::log(8.0), 1e-9);
}

}  // namespace
}  // namespace pt
