// test_gpt_reference.cpp: the GPT layers against PyTorch.
//
// tests/reference/gpt_tiny.h5 (written by tests/reference/gpt_reference.py,
// see the README there) holds a tiny GPT's parameters, one batch of tokens
// and next-token targets, and PyTorch's logits, mean cross-entropy loss,
// parameter gradients and the losses after each of 5 AdamW updates. This test
// builds the same model from make_gpt_embedding / make_gpt_block /
// make_gpt_head, copies the fixture's parameters in by name and checks every
// one of those values. No MPI, no PyTorch needed.
//
// Tolerance, per element: |ours - torch| <= atol + rtol * |torch| with
// rtol = 1e-4 and atol = 1e-5 * max|torch| over the tensor (so only elements
// five orders of magnitude below the tensor's scale, where float rounding of
// the larger terms summed into them dominates, fall back to the absolute
// bound). Losses: rtol 1e-5. Observed: every |diff| < 1e-6 * max|torch|.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "h5_fixture.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/gpt.hpp"
#include "pipetrain/model/optimizer.hpp"

namespace pt {
namespace {

using test::H5Fixture;
using test::reference_fixture;

constexpr double kRtol = 1e-4;
constexpr double kAtolOfScale = 1e-5;
constexpr double kLossRtol = 1e-5;

// ---- comparison ----

void expect_close(const std::string& label, const Tensor& ours, const Tensor& ref) {
  ASSERT_EQ(ours.numel(), ref.numel()) << label;
  double scale = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i)
    scale = std::max(scale, std::fabs(static_cast<double>(ref.f32()[i])));
  const double atol = kAtolOfScale * scale;
  double max_abs = 0.0, max_rel = 0.0;
  int64_t bad = 0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double a = ours.f32()[i], b = ref.f32()[i], diff = std::fabs(a - b);
    max_abs = std::max(max_abs, diff);
    if (std::fabs(b) > atol) max_rel = std::max(max_rel, diff / std::fabs(b));
    if (!(diff <= atol + kRtol * std::fabs(b))) ++bad;
  }
  std::printf("  %-26s max|ref| %.3e  max abs diff %.3e  max rel diff %.3e\n", label.c_str(),
              scale, max_abs, max_rel);
  EXPECT_EQ(bad, 0) << label << ": " << bad << " elements outside atol " << atol << " + rtol "
                    << kRtol << " * |ref|";
}

void expect_loss_close(const std::string& label, double ours, double ref) {
  const double rel = std::fabs(ours - ref) / std::fabs(ref);
  std::printf("  %-26s ours %.7f  torch %.7f  rel diff %.3e\n", label.c_str(), ours, ref, rel);
  EXPECT_LT(rel, kLossRtol) << label;
}

// ---- the model ----

struct TinyGpt {
  GptDims dims;
  std::vector<std::unique_ptr<Layer>> layers;  // embedding, blocks, head

  explicit TinyGpt(const H5Fixture& f) {
    dims.vocab_size = f.attr<int64_t>("vocab_size");
    dims.seq_len = f.attr<int64_t>("seq_len");
    dims.d_model = f.attr<int64_t>("d_model");
    dims.heads = f.attr<int64_t>("heads");
    dims.mlp_ratio = f.attr<int64_t>("mlp_ratio");
    dims.blocks = f.attr<int64_t>("blocks");
    layers.push_back(make_gpt_embedding(dims, 1));
    for (int64_t i = 0; i < dims.blocks; ++i) layers.push_back(make_gpt_block(dims, i, 1));
    layers.push_back(make_gpt_head(dims, 1));
  }

  std::vector<Param*> params() {
    std::vector<Param*> all;
    for (auto& l : layers)
      for (Param* p : l->params()) all.push_back(p);
    return all;
  }

  // Forward and backward of one batch: returns the mean loss, writes logits
  // (B, T, V) and adds the gradients of the mean loss into Param::grad.
  double step(const Tensor& tokens, const Tensor& targets, Tensor* logits_out = nullptr) {
    Backend& be = cpu_backend();
    const int64_t n = tokens.numel();  // B*T tokens
    std::vector<Tensor> inputs, outputs;
    std::vector<std::vector<Tensor>> saved(layers.size());
    Tensor x = tokens;  // (B, T) i32
    for (size_t i = 0; i < layers.size(); ++i) {
      inputs.push_back(x);
      x = layers[i]->forward(be, x, saved[i]);
    }
    if (logits_out) *logits_out = x;  // (B, T, V)
    auto loss = make_loss(LossKind::CrossEntropy);
    Tensor dlogits = Tensor::empty({n, dims.vocab_size});
    const double sum = loss->forward_backward(be, x.reshaped({n, dims.vocab_size}),
                                              targets.reshaped({n}),
                                              1.f / static_cast<float>(n), dlogits);
    Tensor dy = dlogits.reshaped(x.shape());
    for (size_t i = layers.size(); i-- > 0;)
      dy = layers[i]->backward(be, inputs[i], saved[i], dy, i > 0);
    return sum / static_cast<double>(n);
  }
};

TEST(GptReference, MatchesPyTorchForwardBackwardAndAdamW) {
  H5Fixture f(reference_fixture("gpt_tiny.h5"));
  TinyGpt model(f);
  Backend& be = cpu_backend();

  // Fixture parameters, by name; every model parameter must be there.
  std::vector<Param*> params = model.params();
  for (Param* p : params) {
    ASSERT_TRUE(f.has("params/" + p->name)) << p->name;
    Tensor v = f.read("params/" + p->name, DType::F32);
    ASSERT_EQ(v.shape(), p->value.shape()) << p->name;
    be.copy(v, p->value);
    be.fill(p->grad, 0.f);
  }
  const Tensor tokens = f.read("tokens", DType::I32);    // (B, T)
  const Tensor targets = f.read("targets", DType::I32);  // (B, T)
  std::printf("  fixture: torch %s, %zu parameters\n", f.string_attr("torch_version").c_str(),
              params.size());

  Tensor logits;
  const double loss = model.step(tokens, targets, &logits);
  expect_close("logits", logits, f.read("logits", DType::F32));
  expect_loss_close("loss", loss, f.read_f64("loss")[0]);
  for (Param* p : params)
    expect_close("grad " + p->name, p->grad, f.read("grads/" + p->name, DType::F32));

  // AdamW on the same batch, constant learning rate.
  TrainingConfig cfg;
  cfg.optimizer = OptimizerKind::AdamW;
  cfg.lr_schedule = LrScheduleKind::Constant;
  cfg.warmup_steps = 0;
  cfg.lr = f.attr<double>("lr");
  cfg.beta1 = f.attr<double>("beta1");
  cfg.beta2 = f.attr<double>("beta2");
  cfg.eps = f.attr<double>("eps");
  cfg.weight_decay = f.attr<double>("weight_decay");
  cfg.steps = f.attr<int64_t>("adamw_steps");
  const std::vector<double> ref_losses = f.read_f64("adamw_losses");
  ASSERT_EQ(static_cast<int64_t>(ref_losses.size()), cfg.steps);
  Optimizer opt(cfg, params);
  for (int64_t k = 0; k < cfg.steps; ++k) {
    opt.step(be, static_cast<float>(learning_rate(cfg, k)), 1.f);
    opt.zero_grad(be);
    const double step_loss = model.step(tokens, targets);
    expect_loss_close("loss after AdamW step " + std::to_string(k + 1), step_loss, ref_losses[k]);
  }
}

}  // namespace
}  // namespace pt
