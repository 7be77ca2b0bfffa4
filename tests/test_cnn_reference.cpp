// test_cnn_reference.cpp: the cnn and hybrid families against an independent
// float64 PyTorch reference.
//
// tests/reference/cnn_tiny.h5 (written by tests/reference/cnn_reference.py,
// see the README there) holds five tiny networks (a cnn with group
// normalisation, the same with deferred batch normalisation, the first
// with GELU instead of ReLU, a hybrid with causal attention and one whose
// tokens attend to every token):
// their float32 parameters, one batch of images and labels, and PyTorch's
// float64 logits, mean cross-entropy, every parameter gradient and (batch
// norm) the running statistics after the step. This test builds each network
// with build_stage (the family's own layout: one stage of every unit),
// copies the parameters in by name, runs the step's micro-batches through
// stage_forward / stage_backward as the executor does (each in its training
// ForwardScope, the loss scaled by 1 / batch), ends the step, and checks
// every value. No MPI, no PyTorch needed.
//
// Tolerance, per element: |ours - ref| <= atol + rtol * |ref|, rtol 1e-4,
// atol 3e-5 * max|ref| over the tensor. Ours is float32 throughout; the
// float64 reference leaves only its rounding. The longest sums here are the
// convolutions' weight gradients over N OH OW <= 3 x 8 x 8 = 192 terms, whose
// worst-case rounding is gamma(192) ~ 1.1e-5 of the sum of |terms|, compounded
// through ~10 layers; observed, the worst element of any tensor is 3.9e-6 of
// its tensor's max|ref| (the every-token hybrid; the same with oneDNN and
// OpenBLAS limited to AVX2; 2.6e-6 for the GELU cnn),
// all printed. A wrong wiring, scale or statistic errs by 1e-2 or more.
// Losses: rtol 1e-5.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "h5_fixture.hpp"
#include "pipetrain/model/forward_context.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {
namespace {

using test::H5Fixture;

constexpr double kRtol = 1e-4;
constexpr double kAtolOfScale = 3e-5;
constexpr double kLossRtol = 1e-5;

// The largest |diff| / max|ref| seen over every tensor of a case.
struct Worst {
  double of_scale = 0.0;
};

void expect_close(const std::string& label, const Tensor& ours, const std::vector<double>& ref,
                  Worst& worst) {
  ASSERT_EQ(static_cast<size_t>(ours.numel()), ref.size()) << label;
  double scale = 0.0;
  for (double r : ref) scale = std::max(scale, std::fabs(r));
  const double atol = kAtolOfScale * scale;
  double max_abs = 0.0;
  int64_t bad = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double diff = std::fabs(static_cast<double>(ours.f32()[i]) - ref[i]);
    max_abs = std::max(max_abs, diff);
    if (!(diff <= atol + kRtol * std::fabs(ref[i]))) ++bad;
  }
  const double of_scale = scale > 0.0 ? max_abs / scale : max_abs;
  worst.of_scale = std::max(worst.of_scale, of_scale);
  std::printf("  %-34s max|ref| %.3e  max abs diff %.3e  (%.1e of max|ref|)\n", label.c_str(),
              scale, max_abs, of_scale);
  EXPECT_EQ(bad, 0) << label << ": " << bad << " elements outside atol " << atol << " + rtol "
                    << kRtol << " * |ref|";
}

// The network of fixture group `g`, as a deck would describe it.
ModelConfig config_of(const H5Fixture& f, const std::string& g) {
  ModelConfig m;
  m.type = f.string_attr("type", g);
  CnnConfig& c = m.cnn;
  c.image_size = f.attr<int64_t>("image_size", g);
  c.in_channels = f.attr<int64_t>("in_channels", g);
  c.classes = f.attr<int64_t>("classes", g);
  c.width = f.attr<int64_t>("width", g);
  c.stages = f.attr<int64_t>("stages", g);
  c.stage_blocks = f.attr<int64_t>("stage_blocks", g);
  c.norm_groups = f.attr<int64_t>("norm_groups", g);
  c.norm = f.string_attr("norm", g) == "batch" ? NormKind::Batch : NormKind::Group;
  m.activation = f.string_attr("activation", g) == "gelu" ? ActivationKind::Gelu : ActivationKind::Relu;
  if (m.type == "hybrid") {
    m.gpt.d_model = f.attr<int64_t>("d_model", g);
    m.gpt.heads = f.attr<int64_t>("heads", g);
    m.gpt.blocks = f.attr<int64_t>("blocks", g);
    m.gpt.mlp_ratio = f.attr<int64_t>("mlp_ratio", g);
    m.gpt.causal = f.attr<int64_t>("causal", g) != 0;
  }
  return m;
}

// Rows [first, first + count) of a host tensor (N, ...), copied.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) {
  Shape shape = t.shape();
  const int64_t row = t.numel() / shape[0];
  shape[0] = count;
  Tensor out = Tensor::empty(shape, t.dtype());
  const size_t bytes = t.dtype() == DType::I32 ? sizeof(int32_t) : sizeof(float);
  std::memcpy(out.raw(), static_cast<const char*>(t.raw()) + first * row * bytes,
              static_cast<size_t>(count * row) * bytes);
  return out;
}

void check_case(const std::string& g) {
  H5Fixture f(test::reference_fixture("cnn_tiny.h5"));
  const ModelConfig m = config_of(f, g);
  StageModel stage = build_stage(m, {model_units(m)}, 0);
  Backend& be = cpu_backend();
  std::vector<Param*> params = stage.params();
  for (Param* p : params) {
    ASSERT_TRUE(f.has(g + "/params/" + p->name)) << p->name;
    const Tensor v = f.read(g + "/params/" + p->name, DType::F32);
    ASSERT_EQ(v.shape(), p->value.shape()) << p->name;
    be.copy(v, p->value);
    if (p->grad.defined()) be.fill(p->grad, 0.f);
  }
  const Tensor images = f.read(g + "/images", DType::F32);  // (B, C, H, W)
  const Tensor labels = f.read(g + "/labels", DType::I32);  // (B)
  const int64_t batch = images.dim(0), micro_batches = f.attr<int64_t>("micro_batches", g);
  const int64_t rows = batch / micro_batches;
  std::printf("  %s: %s, %zu parameters, batch %lld in %lld micro-batches (fixture: torch %s)\n",
              g.c_str(), m.type.c_str(), params.size(), static_cast<long long>(batch),
              static_cast<long long>(micro_batches), f.string_attr("torch_version").c_str());

  Tensor logits = Tensor::empty({batch, m.cnn.classes});  // (B, classes)
  double loss_sum = 0.0;
  for (int64_t mb = 0; mb < micro_batches; ++mb) {
    ForwardScope scope({ForwardPurpose::Train, static_cast<int>(mb)});
    StagePass pass;
    const Tensor out = stage_forward(stage, be, rows_of(images, mb * rows, rows), pass);
    Tensor dout = Tensor::empty(out.shape());
    loss_sum += stage.loss->forward_backward(be, out, rows_of(labels, mb * rows, rows),
                                             1.f / static_cast<float>(batch), dout);
    stage_backward(stage, be, pass, dout, false);
    copy_rows_into(out, logits, mb * rows);
  }
  for (auto& layer : stage.layers) layer->end_step(be);

  Worst worst;
  expect_close("logits", logits, f.read_f64(g + "/logits"), worst);
  const double loss = loss_sum / static_cast<double>(batch), ref = f.read_f64(g + "/loss")[0];
  std::printf("  %-34s ours %.7f  torch %.7f  rel diff %.3e\n", "loss", loss, ref,
              std::fabs(loss - ref) / std::fabs(ref));
  EXPECT_LT(std::fabs(loss - ref) / std::fabs(ref), kLossRtol) << g << ": loss";
  int64_t running = 0;
  for (Param* p : params) {
    if (p->running_statistic) {
      expect_close("running " + p->name, p->value, f.read_f64(g + "/running/" + p->name), worst);
      ++running;
    } else {
      expect_close("grad " + p->name, p->grad, f.read_f64(g + "/grads/" + p->name), worst);
    }
  }
  EXPECT_EQ(running > 0, m.cnn.norm == NormKind::Batch) << g << ": running statistics";
  std::printf("  %s: worst max abs diff %.1e of its tensor's max|ref|\n", g.c_str(), worst.of_scale);
}

TEST(CnnReference, GroupNormCnnMatchesFloat64PyTorch) { check_case("cnn_group"); }
TEST(CnnReference, DeferredBatchNormCnnMatchesFloat64PyTorch) { check_case("cnn_batch"); }
TEST(CnnReference, GeluCnnMatchesFloat64PyTorch) { check_case("cnn_gelu"); }
TEST(CnnReference, HybridMatchesFloat64PyTorch) { check_case("hybrid"); }
TEST(CnnReference, HybridAttendingToEveryTokenMatchesFloat64PyTorch) {
  check_case("hybrid_every_token");
}

}  // namespace
}  // namespace pt
