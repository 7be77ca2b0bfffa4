// cpu_fused_attention.cpp: the fused attention kernel group of the CPU
// backend (fused_attention_kernels.hpp), computed as flash attention and
// cuDNN's SDPA compute it, one (sequence, head) at a time: forward keeps only
// each row's log-sum-exp of the scores (stats); backward rebuilds the
// probabilities from qkv and stats and takes the softmax gradient's row term
// from y and dy (D_i = dy_i . y_i) instead of from stored probabilities.
// The (T, T) scores of one head live in a scratch buffer for the length of
// one kernel call; nothing of size T x T outlives it.
//
// It is the CPU reference of the GPU's cuDNN path and emulates it: GEMM
// operands rounded to the backend's precision (cpu::gemm), and with bf16 or
// fp16 the outputs y and dqkv rounded too, as cuDNN writes them in 16 bits.
// Forward and backward compute the scores with the same GEMM, so backward's
// probabilities are forward's, bit for bit. Loops in a fixed order, sums in
// double: bitwise deterministic.
#include <cmath>
#include <memory>
#include <vector>

#include "attention_dims.hpp"
#include "cpu_kernels_gpt.hpp"
#include "vec_math.hpp"
#include "pipetrain/tensor/fused_attention_kernels.hpp"
#include "pipetrain/tensor/precision.hpp"

namespace pt {

namespace {

bool is_16_bit(Precision p) { return p == Precision::Bf16 || p == Precision::Fp16; }

// In place on x (n elements): the value a 16-bit output of precision p holds.
void round_output(float* x, int64_t n, Precision p) {
  if (!is_16_bit(p)) return;
  for (int64_t i = 0; i < n; ++i) x[i] = round_operand(x[i], p);
}

// s (T, T) = scale Q K^T for head h of sequence b.
void head_scores(Precision p, const Tensor& qkv, const AttnDims& d, int64_t b, int64_t h,
                 float* s) {
  const float* base = qkv.f32();
  cpu::gemm(p, false, true, d.T, d.T, d.D, d.scale, base + d.qkv_offset(b, h, 0), 3 * d.C,
            base + d.qkv_offset(b, h, 1), 3 * d.C, 0.f, s, d.T);
}

// stats (T) of scores s (T, T): log sum_{j <= i} exp(s[i, j]), max-shifted,
// summed in double.
void row_log_sum_exp(const float* s, int64_t T, float* stats) {
  for (int64_t i = 0; i < T; ++i) {
    const float* row = s + i * T;
    float maxv = row[0];
    for (int64_t j = 1; j <= i; ++j) maxv = row[j] > maxv ? row[j] : maxv;
    double sum = 0.0;
    for (int64_t j = 0; j <= i; ++j) sum += fast_exp(row[j] - maxv);
    stats[i] = static_cast<float>(static_cast<double>(maxv) + std::log(sum));
  }
}

// In place on s (T, T): the probabilities exp(s[i, j] - stats[i]) for
// j <= i, exactly 0 above the diagonal.
void probabilities(float* s, const float* stats, int64_t T) {
  for (int64_t i = 0; i < T; ++i) {
    float* row = s + i * T;
    for (int64_t j = 0; j <= i; ++j) row[j] = fast_exp(row[j] - stats[i]);
    for (int64_t j = i + 1; j < T; ++j) row[j] = 0.f;
  }
}

// In place on dp (T, T), the gradient w.r.t. the probabilities P: becomes the
// gradient w.r.t. the unscaled scores, scale * P * (dp - rows[i]), where
// rows[i] = dy_i . y_i = sum_j P dp. Masked entries become 0.
void scores_gradient(const float* prob, const std::vector<double>& rows, float scale, float* dp,
                     int64_t T) {
  for (int64_t i = 0; i < T; ++i) {
    const float* prow = prob + i * T;
    float* drow = dp + i * T;
    const float r = static_cast<float>(rows[static_cast<size_t>(i)]);
    for (int64_t j = 0; j <= i; ++j) drow[j] = scale * prow[j] * (drow[j] - r);
    for (int64_t j = i + 1; j < T; ++j) drow[j] = 0.f;
  }
}

// rows (T): dy_i . y_i over the D columns of one head (ld C), dy rounded as
// the GPU reads it (16 bits), in double.
void output_dots(const float* dy, const float* y, const AttnDims& d, Precision p,
                 std::vector<double>& rows) {
  for (int64_t i = 0; i < d.T; ++i) {
    double dot = 0.0;
    for (int64_t k = 0; k < d.D; ++k) {
      const float g = is_16_bit(p) ? round_operand(dy[i * d.C + k], p) : dy[i * d.C + k];
      dot += static_cast<double>(g) * y[i * d.C + k];
    }
    rows[static_cast<size_t>(i)] = dot;
  }
}

// y's values as fp32: y itself, or its BF16 / F16 copy widened (exactly) into `wide`.
const float* y_values(const Tensor& y, std::vector<float>& wide) {
  if (y.dtype() == DType::F32) return y.f32();
  wide.resize(static_cast<size_t>(y.numel()));
  const Precision p = y.dtype() == DType::BF16 ? Precision::Bf16 : Precision::Fp16;
  widen_block(y.bits16(), y.numel(), 1, y.numel(), p, wide.data(), y.numel());
  return wide.data();
}

class CpuFusedAttention final : public FusedAttentionKernels {
 public:
  explicit CpuFusedAttention(Precision precision) : precision_(precision) {}

 protected:
  void do_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats) override {
    const AttnDims d = attn_dims(qkv, heads);
    std::vector<float> s(static_cast<size_t>(d.T * d.T));  // (T, T) scratch
    for (int64_t b = 0; b < d.mb; ++b) {
      for (int64_t h = 0; h < d.H; ++h) {
        float* lse = stats.f32() + (b * d.H + h) * d.T;  // (T)
        head_scores(precision_, qkv, d, b, h, s.data());
        row_log_sum_exp(s.data(), d.T, lse);
        probabilities(s.data(), lse, d.T);
        // y_h = P V: (T, T) x (T, D)
        cpu::gemm(precision_, false, false, d.T, d.D, d.T, 1.f, s.data(), d.T,
                  qkv.f32() + d.qkv_offset(b, h, 2), 3 * d.C, 0.f, y.f32() + d.out_offset(b, h),
                  d.C);
      }
    }
    round_output(y.f32(), y.numel(), precision_);
  }

  void do_backward(const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy,
                   int64_t heads, Tensor& dqkv) override {
    const AttnDims d = attn_dims(qkv, heads);
    const Precision p = precision_;
    std::vector<float> prob(static_cast<size_t>(d.T * d.T));  // (T, T) scratch
    std::vector<float> ds(static_cast<size_t>(d.T * d.T));    // (T, T) scratch
    std::vector<double> rows(static_cast<size_t>(d.T));       // (T)
    std::vector<float> wide;                                  // (mb, T, C) when y is 16-bit
    const float* yv = y_values(y, wide);
    const float* base = qkv.f32();
    float* grad = dqkv.f32();
    for (int64_t b = 0; b < d.mb; ++b) {
      for (int64_t h = 0; h < d.H; ++h) {
        const float* dyh = dy.f32() + d.out_offset(b, h);  // (T, D), ld C
        head_scores(p, qkv, d, b, h, prob.data());
        probabilities(prob.data(), stats.f32() + (b * d.H + h) * d.T, d.T);
        // dV = P^T dY: (T, T)^T x (T, D)
        cpu::gemm(p, true, false, d.T, d.D, d.T, 1.f, prob.data(), d.T, dyh, d.C, 0.f,
                  grad + d.qkv_offset(b, h, 2), 3 * d.C);
        // dP = dY V^T: (T, D) x (D, T); then dS in place
        cpu::gemm(p, false, true, d.T, d.T, d.D, 1.f, dyh, d.C, base + d.qkv_offset(b, h, 2),
                  3 * d.C, 0.f, ds.data(), d.T);
        output_dots(dyh, yv + d.out_offset(b, h), d, p, rows);
        scores_gradient(prob.data(), rows, d.scale, ds.data(), d.T);
        // dQ = dS K: (T, T) x (T, D); dK = dS^T Q: (T, T)^T x (T, D)
        cpu::gemm(p, false, false, d.T, d.D, d.T, 1.f, ds.data(), d.T,
                  base + d.qkv_offset(b, h, 1), 3 * d.C, 0.f, grad + d.qkv_offset(b, h, 0),
                  3 * d.C);
        cpu::gemm(p, true, false, d.T, d.D, d.T, 1.f, ds.data(), d.T,
                  base + d.qkv_offset(b, h, 0), 3 * d.C, 0.f, grad + d.qkv_offset(b, h, 1),
                  3 * d.C);
      }
    }
    round_output(grad, dqkv.numel(), p);
  }

 private:
  Precision precision_;  // of the GEMM operands and, when 16-bit, of y and dqkv
};

}  // namespace

std::unique_ptr<FusedAttentionKernels> make_cpu_fused_attention(Precision precision) {
  return std::make_unique<CpuFusedAttention>(precision);
}

}  // namespace pt
