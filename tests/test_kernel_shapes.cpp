// test_kernel_shapes.cpp: every backend's kernels check their arguments in one
// place (src/tensor/backend.cpp, src/tensor/transformer_kernels.cpp) with one
// message per argument. Here on the CPU backend, for the checks that only the
// CUDA backend made before they were shared (#41): a wrong output or state
// tensor is refused with a message naming the kernel, the argument and both
// shapes, instead of being written past or short of its end.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/transformer_kernels.hpp"
#include "error_of.hpp"

namespace pt {
namespace {

Tensor t(const Shape& shape) { return Tensor::zeros(shape); }

// The message of the Error `call` throws; "" when it throws none.
// The message of the Error (InputError or internal) a kernel call throws.
std::string error_of(const std::function<void()>& call) { return test::error_of<Error>(call); }

// The message ends with `expected` (it starts with the check's file:line).
void expect_refused(const std::function<void()>& call, const std::string& expected) {
  const std::string got = error_of(call);
  ASSERT_GE(got.size(), expected.size()) << "no error or a short one: '" << got << "'";
  EXPECT_EQ(got.substr(got.size() - expected.size()), expected) << got;
}

TEST(KernelShapes, ReluAndGeluBackwardCheckDx) {
  Backend& be = cpu_backend();
  Tensor x = t({2, 3}), dy = t({2, 3}), dx = t({3, 3});
  expect_refused([&] { be.relu_backward(x, dy, dx); },
                 "relu_backward: dx (3, 3) has 9 elements, x (2, 3) has 6");
  expect_refused([&] { be.gelu_backward(x, dy, dx); },
                 "gelu_backward: dx (3, 3) has 9 elements, x (2, 3) has 6");
  Tensor good = t({6});  // only the element count matters
  EXPECT_EQ(error_of([&] { be.relu_backward(x, dy, good); }), "");
}

// linear_forward (a Linear layer's GEMM, bias and GELU in one call, which
// CUDA fuses): its shapes are checked once, and on the CPU it is the three
// kernels in turn, bit for bit.
TEST(KernelShapes, LinearForwardChecksAndComposes) {
  Backend& be = cpu_backend();
  Tensor x = t({4, 3}), w = t({5, 3}), bias = t({5}), y = t({4, 5}), g = t({4, 5});
  expect_refused([&] { be.linear_forward(x, t({5, 2}), &bias, y); },
                 "linear_forward shapes: x (4, 3), w (5, 2) (out, in), y (4, 5)");
  Tensor small_gelu = t({4, 4});
  expect_refused([&] { be.linear_forward(x, w, &bias, y, &small_gelu); },
                 "linear_forward: gelu (4, 4) has 16 elements, y (4, 5) has 20");
  Tensor short_bias = t({4});
  expect_refused([&] { be.linear_forward(x, w, &short_bias, y); },
                 "linear_forward: bias (4) has 4 elements, expected 5 (the columns of y)");
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = 0.25f * static_cast<float>(i) - 1.f;
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (int64_t i = 0; i < bias.numel(); ++i) bias.f32()[i] = 0.5f - 0.2f * static_cast<float>(i);
  be.linear_forward(x, w, &bias, y, &g);
  Tensor y2 = t({4, 5}), g2 = t({4, 5});
  be.matmul(x, false, w, true, y2, 1.f, 0.f);
  be.add_bias(y2, bias);
  be.gelu_forward(y2, g2);
  EXPECT_EQ(0, std::memcmp(y.raw(), y2.raw(), y.bytes()));
  EXPECT_EQ(0, std::memcmp(g.raw(), g2.raw(), g.bytes()));
}

// linear_backward_input (a Linear layer's input gradient, through a GELU
// when given its input, which CUDA fuses): shapes checked once; on the CPU
// the GEMM and gelu_backward in turn, bit for bit.
TEST(KernelShapes, LinearBackwardInputChecksAndComposes) {
  Backend& be = cpu_backend();
  Tensor dy = t({4, 5}), w = t({5, 3}), dx = t({4, 3}), u = t({4, 3});
  expect_refused([&] { be.linear_backward_input(dy, t({5, 2}), dx); },
                 "linear_backward_input shapes: dy (4, 5), w (5, 2) (out, in), dx (4, 3)");
  Tensor small_u = t({4, 2});
  expect_refused([&] { be.linear_backward_input(dy, w, dx, &small_u); },
                 "linear_backward_input: gelu_input (4, 2) has 8 elements, dx (4, 3) has 12");
  for (int64_t i = 0; i < dy.numel(); ++i) dy.f32()[i] = 0.25f * static_cast<float>(i) - 2.f;
  for (int64_t i = 0; i < w.numel(); ++i) w.f32()[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (int64_t i = 0; i < u.numel(); ++i) u.f32()[i] = 0.4f * static_cast<float>(i) - 2.f;
  be.linear_backward_input(dy, w, dx, &u);
  Tensor dgelu = t({4, 3}), dx2 = t({4, 3}), plain = t({4, 3});
  be.matmul(dy, false, w, false, dgelu, 1.f, 0.f);
  be.gelu_backward(u, dgelu, dx2);
  EXPECT_EQ(0, std::memcmp(dx.raw(), dx2.raw(), dx.bytes()));
  be.linear_backward_input(dy, w, plain);
  EXPECT_EQ(0, std::memcmp(plain.raw(), dgelu.raw(), plain.bytes()));
}

TEST(KernelShapes, LossesCheckTheirGradients) {
  Backend& be = cpu_backend();
  Tensor pred = t({2, 3}), target = t({2, 3}), dpred = t({2, 4});
  expect_refused([&] { be.mse_loss(pred, target, 1.f, dpred); },
                 "mse_loss: dpred (2, 4) has 8 elements, pred (2, 3) has 6");
  Tensor labels = Tensor::zeros({2}, DType::I32), dlogits = t({3, 3});
  expect_refused([&] { be.softmax_cross_entropy(pred, labels, 1.f, dlogits); },
                 "softmax_cross_entropy: dlogits (3, 3) has 9 elements, logits (2, 3) has 6");
  Tensor few_labels = Tensor::zeros({1}, DType::I32);
  expect_refused([&] { be.softmax_cross_entropy(pred, few_labels, 1.f, pred); },
                 "softmax_cross_entropy: labels (1) has 1 elements, expected 2 (the rows of logits)");
  // A padded row (model.vocab_multiple): 1 <= classes <= the columns.
  Tensor dpred3 = t({2, 3});
  expect_refused([&] { be.softmax_cross_entropy(pred, labels, 4, 1.f, dpred3); },
                 "softmax_cross_entropy: classes 4 outside [1, 3] (the columns of logits (2, 3))");
  std::unique_ptr<ScalarBatch> batch = be.make_scalar_batch(1);
  expect_refused([&] { be.softmax_cross_entropy_to(pred, labels, 0, 1.f, dpred3, *batch, 0); },
                 "softmax_cross_entropy: classes 0 outside [1, 3] (the columns of logits (2, 3))");
  EXPECT_EQ(error_of([&] { be.softmax_cross_entropy(pred, labels, 2, 1.f, dpred3); }), "");
}

TEST(KernelShapes, OptimizerStepsCheckTheirState) {
  Backend& be = cpu_backend();
  Tensor p = t({5}), g = t({5}), wrong = t({4});
  expect_refused([&] { be.sgd_step(p, g, wrong, 0.1f, 0.9f, 0.f); },
                 "sgd_step: v (4) has 4 elements, p (5) has 5");
  Tensor v = t({5});
  expect_refused([&] { be.adamw_step(p, g, wrong, v, 0.1f, 0.9f, 0.95f, 1e-8f, 0.f, 1); },
                 "adamw_step: m (4) has 4 elements, p (5) has 5");
}

TEST(KernelShapes, LayerNormBackwardChecksItsStatistics) {
  TransformerKernels& tk = require_kernels<TransformerKernels>(cpu_backend(), "this test");
  Tensor x = t({4, 3}), gamma = t({3}), mean = t({2}), rstd = t({4}), dy = t({4, 3});
  Tensor dx = t({4, 3}), dgamma = t({3}), dbeta = t({3});
  expect_refused([&] { tk.layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta); },
                 "layernorm_backward: mean (2) has 2 elements, expected 4 (the rows of x)");
}

}  // namespace
}  // namespace pt
