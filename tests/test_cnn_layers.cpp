// test_cnn_layers.cpp: the convolutional layers (model/conv_layers.hpp)
// against central finite differences, plus their structure: output shapes,
// parameter names, gradients that accumulate and repeat bitwise, and the
// one message of a backend without the convolution kernels.
//
// As in test_layers.cpp: for y = f(x) and a fixed random r, L = sum(r * y)
// (in double) has dL/dv = the analytic gradient; each element is compared
// with (L(v + h) - L(v - h)) / 2h, h = 1e-2, as |numeric - analytic| /
// max(1, |numeric|). The tolerance 2e-3 is derived from the two error
// sources: the float forward passes round each output by about
// gamma(n) |y| with n <= 100 terms here (~6e-6 |y|), so L carries an error
// near 6e-6 sum|r y| <= 6e-6 * 30 and the difference quotient about
// 2e-4 / 2h = 1e-2 in the worst case but ~1e-4 typically (independent
// roundings cancel as a random walk); the truncation error h^2/6 |f'''| is
// below 1e-4 for these O(1) smooth functions. A wrong wiring (a missing
// path, a transposed weight) errs by O(1). ReLU and max pooling are smooth
// except on a set that h-sized steps from these fixed seeded inputs miss
// (the test is deterministic: same inputs every run); the residual block,
// with ReLUs inside, is checked by composition instead (see its test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <functional>
#include <string>

#include "bitwise.hpp"
#include "fd_check.hpp"
#include "forwarding_backend.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/conv_layers.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/forward_context.hpp"
#include "pipetrain/model/hybrid_layers.hpp"

namespace pt {
namespace {

using test::dot;
using test::max_fd_error;
using test::random_tensor;
using test::same_bits;

constexpr double kTol = 2e-3;

void check_layer(Layer& layer, const Shape& in_shape, const std::string& label) {
  Backend& be = cpu_backend();
  Tensor x = random_tensor(in_shape, 1);
  std::vector<Tensor> saved;
  Tensor y = layer.forward(be, x, saved);
  ASSERT_EQ(y.shape(), layer.output_shape(in_shape)) << label;
  Tensor r = random_tensor(y.shape(), 2);
  for (Param* p : layer.params()) be.fill(p->grad, 0.f);
  Tensor dx = layer.backward(be, x, saved, r, true);
  auto loss = [&] {
    std::vector<Tensor> s;
    return dot(layer.forward(be, x, s), r);
  };
  const double err = max_fd_error(x, dx, loss);
  std::printf("  %-26s %-24s max rel error %.3e\n", label.c_str(), "dx", err);
  EXPECT_LT(err, kTol) << label << " dx";
  for (Param* p : layer.params()) {
    const double perr = max_fd_error(p->value, p->grad, loss);
    std::printf("  %-26s %-24s max rel error %.3e\n", label.c_str(), p->name.c_str(), perr);
    EXPECT_LT(perr, kTol) << label << " " << p->name;
  }
}

TEST(CnnLayers, Conv2dMatchesFiniteDifferences) {
  auto layer = make_conv2d("c", 3, 4, 3, {2, 1}, true, 5, 0, 1.f);
  check_layer(*layer, {2, 3, 5, 5}, "conv2d 3x3 s2 p1 + bias");
}

TEST(CnnLayers, NormsMatchFiniteDifferences) {
  auto group = make_norm("gn", 4, {NormKind::Group, 2, 1e-5f});
  check_layer(*group, {2, 4, 3, 3}, "group norm (2 groups)");
  auto batch = make_norm("bn", 4, {NormKind::Batch, 1, 1e-5f});
  check_layer(*batch, {3, 4, 3, 3}, "batch norm");
}

TEST(CnnLayers, PoolingMatchesFiniteDifferences) {
  auto avg = make_pool2d({PoolKind::Avg, 3, 2, 1});
  check_layer(*avg, {2, 3, 5, 5}, "avg pool 3 s2 p1");
  auto max = make_pool2d({PoolKind::Max, 2, 2, 0});
  check_layer(*max, {2, 3, 4, 4}, "max pool 2 s2");
}

// A residual block has ReLUs inside, whose kinks h-sized steps cross (a
// step of a norm's beta moves every pixel of a channel), so finite
// differences of the whole block are unreliable at any h float allows.
// Instead the block must equal, bitwise, the same network written out of
// the layers checked above (Conv2d, normalisation) and ReLU (test_layers):
// forward, input gradient and every parameter gradient. The composition is
// the block's definition in conv_layers.hpp, written independently here.
// The activation is ReLU or GELU (model.activation), its layer from test_layers.
struct ComposedBlock {
  std::unique_ptr<Layer> conv1, norm1, act, conv2, norm2, proj, proj_norm;
  ComposedBlock(const std::string& name, int64_t in, int64_t out, int64_t stride, NormSpec norm,
                uint64_t seed, uint64_t stream, ActivationKind activation)
      : conv1(make_conv2d(name + ".conv1", in, out, 3, {stride, 1}, false, seed, stream,
                          std::sqrt(2.f))),
        norm1(make_norm(name + ".norm1", out, norm)), act(make_activation(activation)),
        conv2(make_conv2d(name + ".conv2", out, out, 3, {1, 1}, false, seed, stream + 1,
                          std::sqrt(2.f))),
        norm2(make_norm(name + ".norm2", out, norm)) {
    if (in == out && stride == 1) return;
    proj = make_conv2d(name + ".proj", in, out, 1, {stride, 0}, false, seed, stream + 2, 1.f);
    proj_norm = make_norm(name + ".proj_norm", out, norm);
  }
  std::vector<Param*> params() {
    std::vector<Param*> all;
    for (Layer* l : {conv1.get(), norm1.get(), conv2.get(), norm2.get(), proj.get(), proj_norm.get()})
      if (l)
        for (Param* p : l->params()) all.push_back(p);
    return all;
  }
  // y and dx for x and dy; the parameter gradients are added.
  std::pair<Tensor, Tensor> run(const Tensor& x, const Tensor& dy) {
    Backend& be = cpu_backend();
    std::vector<Tensor> s_c1, s_n1, s_r1, s_c2, s_n2, s_p, s_pn, s_r2;
    Tensor a1 = conv1->forward(be, x, s_c1), n1 = norm1->forward(be, a1, s_n1);
    Tensor h = act->forward(be, n1, s_r1), a2 = conv2->forward(be, h, s_c2);
    Tensor n2 = norm2->forward(be, a2, s_n2), skip = x, ap;
    if (proj) {
      ap = proj->forward(be, x, s_p);
      skip = proj_norm->forward(be, ap, s_pn);
    }
    Tensor sum = Tensor::empty(n2.shape());
    be.add(n2, skip, sum);
    Tensor y = act->forward(be, sum, s_r2);
    Tensor ds = act->backward(be, sum, s_r2, dy, true);
    Tensor da2 = norm2->backward(be, a2, s_n2, ds, true);
    Tensor dh = conv2->backward(be, h, s_c2, da2, true);
    Tensor dn1 = act->backward(be, n1, s_r1, dh, true);
    Tensor da1 = norm1->backward(be, a1, s_n1, dn1, true);
    Tensor dx = conv1->backward(be, x, s_c1, da1, true);
    Tensor dskip = ds;
    if (proj) dskip = proj->backward(be, x, s_p, proj_norm->backward(be, ap, s_pn, ds, true), true);
    be.add(dx, dskip, dx);
    return {y, dx};
  }
};

TEST(CnnLayers, ResidualBlocksEqualTheirLayersComposed) {
  Backend& be = cpu_backend();
  const NormSpec gn{NormKind::Group, 2, 1e-5f}, bn{NormKind::Batch, 1, 1e-5f};
  struct Case {
    const char* label;
    int64_t in, out, stride;
    NormSpec norm;
    Shape x;
    ActivationKind act = ActivationKind::Relu;
  };
  const ActivationKind gelu = ActivationKind::Gelu;
  for (const Case& c : {Case{"4->4 identity skip, group norm", 4, 4, 1, gn, {2, 4, 4, 4}},
                        Case{"4->6 s2 projection, group norm", 4, 6, 2, gn, {2, 4, 5, 5}},
                        Case{"4->6 s2 projection, batch norm", 4, 6, 2, bn, {3, 4, 5, 5}},
                        Case{"4->4 identity skip, gn, gelu", 4, 4, 1, gn, {2, 4, 4, 4}, gelu},
                        Case{"4->6 s2 projection, bn, gelu", 4, 6, 2, bn, {3, 4, 5, 5}, gelu}}) {
    auto block = make_residual_block("b", c.in, c.out, c.stride, c.norm, 5, 10, ParamInit::FromSeed, c.act);
    ComposedBlock composed("b", c.in, c.out, c.stride, c.norm, 5, 10, c.act);
    Tensor x = random_tensor(c.x, 1), dy = random_tensor(block->output_shape(c.x), 2);
    std::vector<Tensor> saved;
    Tensor y = block->forward(be, x, saved);
    Tensor dx = block->backward(be, x, saved, dy, true);
    auto [y_ref, dx_ref] = composed.run(x, dy);
    EXPECT_TRUE(same_bits(y, y_ref)) << c.label << ": y";
    EXPECT_TRUE(same_bits(dx, dx_ref)) << c.label << ": dx";
    std::vector<Param*> got = block->params(), want = composed.params();
    ASSERT_EQ(got.size(), want.size()) << c.label;
    size_t equal = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i]->name, want[i]->name);
      EXPECT_TRUE(same_bits(got[i]->value, want[i]->value)) << c.label << " " << got[i]->name;
      equal += same_bits(got[i]->grad, want[i]->grad);
      EXPECT_TRUE(same_bits(got[i]->grad, want[i]->grad)) << c.label << " " << got[i]->name;
    }
    std::printf("  block %-32s y, dx and %zu of %zu parameter gradients bitwise equal\n",
                c.label, equal, got.size());
  }
}

// With GELU every function in the block is smooth, so finite differences of
// the whole block check it directly too (a GELU block keeps n1 and
// recomputes h from it in the backward; the composition above keeps h).
TEST(CnnLayers, GeluResidualBlockMatchesFiniteDifferences) {
  auto block = make_residual_block("b", 3, 4, 2, {NormKind::Group, 2, 1e-5f}, 5, 10,
                                   ParamInit::FromSeed, ActivationKind::Gelu);
  check_layer(*block, {2, 3, 5, 5}, "residual block, gelu");
}

TEST(CnnLayers, ClassifierHeadMatchesFiniteDifferences) {
  auto head = make_classifier_head("head", 4, 3, 5, 30);
  check_layer(*head, {2, 4, 3, 3}, "head 4 -> 3 classes");
}

// Deferred batch normalisation (NormSpec, conv_layers.hpp): training
// forwards of micro-batches 0 and 1 keep their statistics, a recomputing
// forward keeps none, and end_step moves the running statistics once, by
// momentum 0.1, to the mean and unbiased variance of both micro-batches as
// one batch, computed here in double from the inputs; evaluation then
// normalises with them. The layer rounds each micro-batch's statistics to
// float once and combines them in double, so it agrees with the direct
// double computation to about 2^-24 relative: 1e-5 leaves a wide margin
// while a wrong rule (one micro-batch only, the biased variance: 1/35 off,
// a commit per micro-batch, a recorded recomputation) misses by far more.
TEST(CnnLayers, BatchNormRunningStatisticsCommitOncePerStep) {
  Backend& be = cpu_backend();
  auto bn = make_norm("bn", 2, {NormKind::Batch, 1, 1e-5f, 0.1});
  std::vector<Param*> params = bn->params();
  ASSERT_EQ(params.size(), 4u);
  EXPECT_EQ(params[2]->name, "bn.running_mean");
  EXPECT_TRUE(params[2]->running_statistic && params[3]->running_statistic);
  const Tensor x0 = random_tensor({2, 2, 3, 3}, 11), x1 = random_tensor({2, 2, 3, 3}, 12);
  const Tensor other = random_tensor({2, 2, 3, 3}, 13, 5.f);
  std::vector<Tensor> saved;
  for (int mb : {0, 1}) {
    const ForwardScope train({ForwardPurpose::Train, mb});
    bn->forward(be, mb == 0 ? x0 : x1, saved);
  }
  {
    const ForwardScope recompute({ForwardPurpose::Recompute, 2});
    bn->forward(be, other, saved);
  }
  EXPECT_EQ(params[2]->value.f32()[0], 0.f);  // nothing committed before end_step
  bn->end_step(be);
  for (int64_t c = 0; c < 2; ++c) {
    double sum = 0.0, squares = 0.0;
    for (const Tensor* x : {&x0, &x1})
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t i = 0; i < 9; ++i) sum += x->f32()[(n * 2 + c) * 9 + i];
    const double mean = sum / 36.0;
    for (const Tensor* x : {&x0, &x1})
      for (int64_t n = 0; n < 2; ++n)
        for (int64_t i = 0; i < 9; ++i) {
          const double d = x->f32()[(n * 2 + c) * 9 + i] - mean;
          squares += d * d;
        }
    const double want_mean = 0.1 * mean, want_var = 0.9 + 0.1 * squares / 35.0;
    EXPECT_NEAR(params[2]->value.f32()[c], want_mean, 1e-5 * std::max(1.0, std::abs(want_mean)));
    EXPECT_NEAR(params[3]->value.f32()[c], want_var, 1e-5 * want_var);
  }
  // A second end_step without forwards changes nothing: the step's
  // statistics were committed once.
  const float committed = params[3]->value.f32()[1];
  bn->end_step(be);
  EXPECT_EQ(params[3]->value.f32()[1], committed);
  // Evaluation: (x - running_mean) / sqrt(running_var + eps) (gamma 1, beta 0).
  const ForwardScope eval({ForwardPurpose::Eval, 0});
  const Tensor y = bn->forward(be, other, saved);
  for (int64_t i = 0; i < other.numel(); ++i) {
    const int64_t c = (i / 9) % 2;
    const double want = (other.f32()[i] - params[2]->value.f32()[c]) /
                        std::sqrt(static_cast<double>(params[3]->value.f32()[c]) + 1e-5);
    EXPECT_NEAR(y.f32()[i], want, 1e-6 * std::max(1.0, std::abs(want)));
  }
}

// The hybrid family's layers (hybrid_layers.hpp): the patch tokens (3
// channels of a 2 x 2 map -> 4 tokens of width 8, projection and position
// embedding) and the token-pooling head (LayerNorm, mean, Linear).
TEST(CnnLayers, HybridLayersMatchFiniteDifferences) {
  auto tokens = make_patch_tokens("tokens", 3, 2, 8, 5, 40);
  check_layer(*tokens, {2, 3, 2, 2}, "patch tokens 3 -> 8");
  auto head = make_token_pool_head("head", 4, 8, 3, 5, 42);
  check_layer(*head, {2, 4, 8}, "token pool head 8 -> 3");
}

// image_to_tokens moves pixel (c, h, w) of image n to token h W + w,
// column c; tokens_to_image moves it back. Exact copies.
TEST(CnnLayers, ImageTokensTransposeExactly) {
  ConvKernels& k = require_kernels<ConvKernels>(cpu_backend(), "test");
  const int64_t N = 2, C = 3, H = 2, W = 4;
  Tensor x = random_tensor({N, C, H, W}, 7);
  Tensor t = Tensor::empty({N, H * W, C}), back = Tensor::empty({N, C, H, W});
  k.image_to_tokens(x, t);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < H * W; ++p)
        EXPECT_EQ(t.f32()[(n * H * W + p) * C + c], x.f32()[(n * C + c) * H * W + p]);
  k.tokens_to_image(t, back);
  EXPECT_TRUE(same_bits(back, x));
  try {
    Tensor wrong = Tensor::empty({N, C, H * W});
    k.image_to_tokens(x, wrong);
    FAIL() << "image_to_tokens accepted (N, C, H W) for its tokens";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("image_to_tokens: y (2, 3, 8) must be (2, 8, 3)"),
              std::string::npos)
        << e.what();
  }
}

TEST(CnnLayers, ResidualBlockShapesAndParameters) {
  auto block = make_residual_block("s1.b0", 4, 8, 2, {NormKind::Group, 4, 1e-5f}, 5, 0);
  EXPECT_EQ(block->output_shape({3, 4, 7, 6}), (Shape{3, 8, 4, 3}));
  std::vector<std::string> names;
  for (Param* p : block->params()) names.push_back(p->name + shape_string(p->value.shape()));
  const std::vector<std::string> want{
      "s1.b0.conv1.weight(8, 4, 3, 3)", "s1.b0.norm1.gamma(8)", "s1.b0.norm1.beta(8)",
      "s1.b0.conv2.weight(8, 8, 3, 3)", "s1.b0.norm2.gamma(8)", "s1.b0.norm2.beta(8)",
      "s1.b0.proj.weight(8, 4, 1, 1)",  "s1.b0.proj_norm.gamma(8)", "s1.b0.proj_norm.beta(8)"};
  EXPECT_EQ(names, want);
}

// Backward adds into the gradients: two backward passes of the same
// micro-batch give twice the gradient, bitwise (t + t = 2t in float), and
// two fresh passes give the same bits.
TEST(CnnLayers, ResidualBlockGradientsAccumulateAndRepeat) {
  Backend& be = cpu_backend();
  auto block = make_residual_block("b", 4, 6, 2, {NormKind::Group, 2, 1e-5f}, 5, 0);
  Tensor x = random_tensor({2, 4, 5, 5}, 1);
  std::vector<Tensor> saved;
  Tensor y = block->forward(be, x, saved);
  Tensor dy = random_tensor(y.shape(), 2);
  for (Param* p : block->params()) be.fill(p->grad, 0.f);
  Tensor dx1 = block->backward(be, x, saved, dy, true);
  std::vector<Tensor> once;
  for (Param* p : block->params()) once.push_back(p->grad.clone(MemCategory::Workspace));
  Tensor dx2 = block->backward(be, x, saved, dy, true);
  EXPECT_TRUE(same_bits(dx1, dx2));
  std::vector<Param*> params = block->params();
  for (size_t i = 0; i < params.size(); ++i) {
    for (int64_t j = 0; j < once[i].numel(); ++j) once[i].f32()[j] *= 2.f;
    EXPECT_TRUE(same_bits(params[i]->grad, once[i])) << params[i]->name;
  }
}

class NoConvBackend final : public test::ForwardingBackend {
 public:
  const char* name() const override { return "core-only"; }
};

TEST(CnnLayers, BackendWithoutConvKernelsIsNamed) {
  NoConvBackend be;
  auto layer = make_conv2d("stem", 3, 4, 3, {1, 1}, false, 5, 0, 1.f);
  Tensor x = random_tensor({1, 3, 4, 4}, 1);
  std::vector<Tensor> saved;
  try {
    layer->forward(be, x, saved);
    FAIL() << "a backend without the conv kernels ran a convolution";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "convolutional layer \"stem\" needs the conv kernels, which backend \"core-only\" "
              "does not provide");
  }
}

// The cnn family refuses such a backend before a run, with the same message.
TEST(CnnLayers, CnnFamilyRefusesABackendWithoutConvKernels) {
  NoConvBackend be;
  ModelConfig model;
  model.type = "cnn";
  try {
    check_family_backend(model, be);
    FAIL() << "the cnn family accepted a backend without the conv kernels";
  } catch (const InputError& e) {
    EXPECT_EQ(std::string(e.what()),
              "model family \"cnn\" needs the conv kernels, which backend \"core-only\" does not "
              "provide");
  }
}

}  // namespace
}  // namespace pt
