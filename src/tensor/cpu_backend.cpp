// cpu_backend.cpp: the CPU backend: GEMMs through cpu::sgemm (cpu_gemm.cpp), everything else
// as plain loops in a fixed order (bitwise deterministic); the transformer
// kernel group from cpu_kernels_gpt.cpp, the fused attention group from
// cpu_fused_attention.cpp and the convolution group from cpu_kernels_conv.cpp; and the default ComputeTimer of every
// backend, the host clock. Shapes are checked before a do_ kernel runs
// (backend.cpp).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "cpu_kernels_conv.hpp"
#include "cpu_kernels_gpt.hpp"
#include "vec_math.hpp"
#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCubic = 0.044715f;

// GELU (tanh form) and its derivative; the largest non-GEMM cost of a GPT
// stage, hence the AVX-512 clones.
PT_CPU_CLONES void gelu_forward_loop(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    y[i] = 0.5f * v * (1.f + fast_tanh(u));
  }
}

PT_CPU_CLONES void gelu_backward_loop(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    const float t = fast_tanh(u);
    const float du = kGeluScale * (1.f + 3.f * kGeluCubic * v * v);
    const float grad = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du;
    dx[i] = grad * dy[i];
  }
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(Precision precision = Precision::Fp32)
      : precision_(precision),
        transformer_(make_cpu_transformer_kernels(precision)),
        fused_attention_(make_cpu_fused_attention(precision)),
        conv_(cpu::make_cpu_conv_kernels()) {}
  const char* name() const override { return "cpu"; }
  Device device() const override { return Device::CPU; }
  Precision precision() const override { return precision_; }
  KernelGroup* kernel_group(const std::string& group) override {
    if (group == TransformerKernels::kGroup) return transformer_.get();
    if (group == FusedAttentionKernels::kGroup) return fused_attention_.get();
    if (group == ConvKernels::kGroup) return conv_.get();
    return nullptr;
  }

 protected:
  void do_matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                 float alpha, float beta) override {
    const int64_t m = trans_a ? a.cols() : a.rows();
    const int64_t k = trans_a ? a.rows() : a.cols();
    const int64_t n = trans_b ? b.rows() : b.cols();
    if (m == 0 || n == 0) return;
    cpu::gemm(precision_, trans_a, trans_b, m, n, k, alpha, {a.raw(), a.dtype(), a.cols()},
              {b.raw(), b.dtype(), b.cols()}, beta, c.f32(), c.cols());
  }

  // The format is dst's (BF16 or F16), whatever this backend's precision.
  void do_round_to(const Tensor& src, Tensor& dst) override {
    const Precision p = dst.dtype() == DType::BF16 ? Precision::Bf16 : Precision::Fp16;
    round_to_bits(src.f32(), src.numel(), p, dst.bits16());
  }

  void do_add_bias(Tensor& y, const Tensor& bias) override {
    const int64_t rows = y.rows(), n = y.cols();
    float* py = y.f32();
    const float* pb = bias.f32();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) py[r * n + j] += pb[j];
  }

  void do_accumulate_bias_grad(const Tensor& dy, Tensor& dbias) override {
    const int64_t rows = dy.rows(), n = dy.cols();
    const float* pdy = dy.f32();
    float* pdb = dbias.f32();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) pdb[j] += pdy[r * n + j];
  }

  void do_relu_forward(const Tensor& x, Tensor& y) override {
    const float* px = x.f32();
    float* py = y.f32();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) py[i] = px[i] > 0.f ? px[i] : 0.f;
  }

  void do_relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    const float* px = x.f32();
    const float* pdy = dy.f32();
    float* pdx = dx.f32();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) pdx[i] = px[i] > 0.f ? pdy[i] : 0.f;
  }

  void do_gelu_forward(const Tensor& x, Tensor& y) override {
    gelu_forward_loop(x.f32(), y.f32(), x.numel());
  }

  void do_gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    gelu_backward_loop(x.f32(), dy.f32(), dx.f32(), x.numel());
  }

  double do_mse_loss(const Tensor& pred, const Tensor& target, float grad_scale,
                     Tensor& dpred) override {
    const float* pp = pred.f32();
    const float* pt = target.f32();
    float* pd = dpred.f32();
    double sum = 0.0;
    for (int64_t i = 0, n = pred.numel(); i < n; ++i) {
      float diff = pp[i] - pt[i];
      sum += static_cast<double>(diff) * diff;
      pd[i] = 2.f * diff * grad_scale;
    }
    return sum;
  }

  // Rows of `width` floats, the first `classes` of them classes, the rest
  // padding (dlogits 0); the loops over the classes are those of an
  // unpadded row, so the results are bitwise the same.
  double do_softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t classes,
                                  float grad_scale, Tensor& dlogits) override {
    const int64_t rows = logits.rows(), width = logits.cols();
    const float* pl = logits.f32();
    const int32_t* py = labels.i32();
    float* pd = dlogits.f32();
    double sum = 0.0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = pl + r * width;
      float* drow = pd + r * width;
      int32_t label = py[r];
      PT_CHECK(label >= 0 && label < classes, "label out of range");
      float maxv = row[0];
      for (int64_t j = 1; j < classes; ++j) maxv = row[j] > maxv ? row[j] : maxv;  // inlined, unlike fmax
      double denom = 0.0;
      for (int64_t j = 0; j < classes; ++j) denom += std::exp(static_cast<double>(row[j] - maxv));
      double log_denom = std::log(denom);
      sum += log_denom - static_cast<double>(row[label] - maxv);
      for (int64_t j = 0; j < classes; ++j) {
        float prob = static_cast<float>(std::exp(static_cast<double>(row[j] - maxv) - log_denom));
        drow[j] = (prob - (j == label ? 1.f : 0.f)) * grad_scale;
      }
      for (int64_t j = classes; j < width; ++j) drow[j] = 0.f;
    }
    return sum;
  }

  void do_fill(Tensor& x, float value) override {
    float* p = x.f32();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] = value;
  }

  void do_copy(const Tensor& src, Tensor& dst) override {
    std::memcpy(dst.raw(), src.raw(), src.bytes());
  }

  // Sixteen partial sums, element i in lane i % 16, added in lane order at
  // the end: a fixed order (deterministic), and independent chains that
  // vectorise, where one running sum waits on every add (an MLP stage's
  // 32 MB of gradients took 7 ms; now the pass runs at memory speed).
  double do_sum_squares(const Tensor& x) override {
    constexpr int64_t kLanes = 16;
    const float* p = x.f32();
    const int64_t n = x.numel();
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
      for (int64_t j = 0; j < kLanes; ++j) lane[j] += static_cast<double>(p[i + j]) * p[i + j];
    for (int64_t j = 0; i + j < n; ++j) lane[j] += static_cast<double>(p[i + j]) * p[i + j];
    double sum = 0.0;
    for (int64_t j = 0; j < kLanes; ++j) sum += lane[j];
    return sum;
  }

  bool do_all_finite(const Tensor& x) override {
    // An exponent of all ones marks inf and NaN; OR-reduce over the bits so
    // the loop vectorises.
    const uint32_t* bits = static_cast<const uint32_t*>(x.raw());
    uint32_t bad = 0;
    for (int64_t i = 0, n = x.numel(); i < n; ++i)
      bad |= static_cast<uint32_t>((bits[i] & 0x7f800000u) == 0x7f800000u);
    return bad == 0;
  }

  void do_scale(Tensor& x, float s) override {
    float* p = x.f32();
    for (int64_t i = 0, n = x.numel(); i < n; ++i) p[i] *= s;
  }

  // out = a + b; out may alias a or b.
  void do_add(const Tensor& a, const Tensor& b, Tensor& out) override {
    const float* pa = a.f32();
    const float* pb = b.f32();
    float* po = out.f32();
    for (int64_t i = 0, n = a.numel(); i < n; ++i) po[i] = pa[i] + pb[i];
  }

  void do_sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                   float weight_decay) override {
    float* pp = p.f32();
    const float* pg = g.f32();
    float* pv = v.f32();
    for (int64_t i = 0, n = p.numel(); i < n; ++i) {
      float grad = pg[i] + weight_decay * pp[i];
      pv[i] = momentum * pv[i] + grad;
      pp[i] -= lr * pv[i];
    }
  }

  void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr, float beta1,
                     float beta2, float eps, float weight_decay, long step) override {
    const float bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), step));
    const float bias2_sqrt =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), step)));
    const float step_size = lr / bias1;
    const float decay = 1.f - lr * weight_decay;
    float* pp = p.f32();
    const float* pg = g.f32();
    float* pm = m.f32();
    float* pv = v.f32();
    for (int64_t i = 0, n = p.numel(); i < n; ++i) {
      pp[i] *= decay;
      pm[i] = beta1 * pm[i] + (1.f - beta1) * pg[i];
      pv[i] = beta2 * pv[i] + (1.f - beta2) * pg[i] * pg[i];
      float denom = std::sqrt(pv[i]) / bias2_sqrt + eps;
      pp[i] -= step_size * (pm[i] / denom);
    }
  }

 private:
  Precision precision_;  // of the GEMM operands; accumulation is fp32
  std::unique_ptr<TransformerKernels> transformer_;         // cpu_kernels_gpt.cpp
  std::unique_ptr<FusedAttentionKernels> fused_attention_;  // cpu_fused_attention.cpp
  std::unique_ptr<ConvKernels> conv_;                       // cpu_kernels_conv.cpp
};

// The default ComputeTimer: the host's steady clock around work that is done
// when the call that issued it returns.
class HostTimer final : public ComputeTimer {
 public:
  void begin() override {
    PT_CHECK(!open_, "ComputeTimer: begin() with a region open");
    open_ = true;
    start_ = Clock::now();
  }
  void end() override {
    PT_CHECK(open_, "ComputeTimer: end() without begin()");
    open_ = false;
    seconds_.push_back(std::chrono::duration<double>(Clock::now() - start_).count());
  }
  std::vector<double> read() override {
    PT_CHECK(!open_, "ComputeTimer: read() with a region open");
    return std::exchange(seconds_, {});
  }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
  bool open_ = false;
  std::vector<double> seconds_;  // (closed regions) since the last read
};

}  // namespace

std::unique_ptr<ComputeTimer> Backend::make_timer() { return std::make_unique<HostTimer>(); }

namespace {

// The stored rows x cols block of `op` in precision p, as fp32 values in
// `out` (row pitch cols): rounded from F32, or widened from BF16 / F16.
void operand_values(const cpu::GemmOperand& op, int64_t rows, int64_t cols, Precision p,
                    std::vector<float>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  if (op.dtype == DType::F32) {
    round_block(static_cast<const float*>(op.data), op.ld, rows, cols, p, out.data(), cols);
    return;
  }
  PT_CHECK(op.dtype == stored_dtype(p), std::string("a ") + dtype_name(op.dtype) +
                                            " GEMM operand in a " + kind_name(p) + " GEMM");
  widen_block(static_cast<const uint16_t*>(op.data), op.ld, rows, cols, p, out.data(), cols);
}

}  // namespace

namespace cpu {
void gemm(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  gemm(p, ta, tb, m, n, k, alpha, GemmOperand{a, DType::F32, lda}, GemmOperand{b, DType::F32, ldb},
       beta, c, ldc);
}

// Rounded (or widened) copies of op(A) and op(B)'s stored blocks, in
// per-thread scratch; both kinds of operand land in the same buffers, so
// the sgemm call is the same.
void gemm(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const GemmOperand& a, const GemmOperand& b, float beta, float* c, int64_t ldc) {
  if (p == Precision::Fp32) {
    PT_CHECK(a.dtype == DType::F32 && b.dtype == DType::F32, "an fp32 GEMM takes f32 operands");
    sgemm(ta, tb, m, n, k, alpha, static_cast<const float*>(a.data), a.ld,
          static_cast<const float*>(b.data), b.ld, beta, c, ldc);
    return;
  }
  thread_local std::vector<float> a_rounded, b_rounded;
  const int64_t a_rows = ta ? k : m, a_cols = ta ? m : k;  // A as stored
  const int64_t b_rows = tb ? n : k, b_cols = tb ? k : n;  // B as stored
  operand_values(a, a_rows, a_cols, p, a_rounded);
  operand_values(b, b_rows, b_cols, p, b_rounded);
  sgemm(ta, tb, m, n, k, alpha, a_rounded.data(), std::max<int64_t>(a_cols, 1), b_rounded.data(),
        std::max<int64_t>(b_cols, 1), beta, c, ldc);
}
}  // namespace cpu

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

std::unique_ptr<Backend> make_cpu_backend(Precision precision) {
  return std::make_unique<CpuBackend>(precision);
}

}  // namespace pt
