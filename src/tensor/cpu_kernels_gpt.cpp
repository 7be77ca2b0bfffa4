// cpu_kernels_gpt.cpp: the transformer kernel group of the CPU backend
// (transformer_kernels.hpp): LayerNorm, token + position embedding and
// multi-head attention (causal or not), called with checked shapes.
// GEMMs go through cpu::gemm; everything else is plain loops in a fixed order,
// reductions in double, so results are bitwise deterministic.
#include "cpu_kernels_gpt.hpp"
#include "attention_dims.hpp"
#include "vec_math.hpp"

#include <cblas.h>

#include <cmath>
#include <memory>
#include <vector>

#include "pipetrain/base/error.hpp"

namespace pt::cpu {

namespace {

// ---- attention geometry ----

// Start of head h of batch b in the fused qkv (mb, T, 3C), leading dimension 3C;
// which = 0 queries, 1 keys, 2 values.
const float* qkv_head(const Tensor& qkv, const AttnDims& d, int64_t b, int64_t h, int which) {
  return qkv.f32() + b * d.T * 3 * d.C + which * d.C + h * d.D;
}
float* qkv_head(Tensor& qkv, const AttnDims& d, int64_t b, int64_t h, int which) {
  return qkv.f32() + b * d.T * 3 * d.C + which * d.C + h * d.D;
}
// The (T, T) block of probs (mb, H, T, T) for (b, h).
size_t probs_offset(const AttnDims& d, int64_t b, int64_t h) {
  return static_cast<size_t>((b * d.H + h) * d.T * d.T);
}
// Head h of batch b in y (mb, T, C), leading dimension C.
size_t head_offset(const AttnDims& d, int64_t b, int64_t h) {
  return static_cast<size_t>(b * d.T * d.C + h * d.D);
}

// The keys query i sees: columns [0, visible) of its row.
int64_t visible_keys(int64_t i, int64_t T, AttentionMask mask) {
  return mask == AttentionMask::Causal ? i + 1 : T;
}

// In place on scores s (T, T): row i becomes the softmax over its visible
// columns; the others (causal: j > i) become exactly 0.
void masked_softmax(float* s, int64_t T, AttentionMask mask) {
  for (int64_t i = 0; i < T; ++i) {
    float* row = s + i * T;
    const int64_t n = visible_keys(i, T, mask);
    float maxv = row[0];
    for (int64_t j = 1; j < n; ++j) maxv = row[j] > maxv ? row[j] : maxv;  // inlined, unlike fmax
    for (int64_t j = 0; j < n; ++j) row[j] = fast_exp(row[j] - maxv);  // vectorises
    double sum = 0.0;
    for (int64_t j = 0; j < n; ++j) sum += row[j];
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n; ++j) row[j] *= inv;
    for (int64_t j = n; j < T; ++j) row[j] = 0.f;
  }
}

// In place on dp (T, T) (gradient w.r.t. probs p): becomes the gradient w.r.t.
// the unscaled scores, scale * p * (dp - sum_j p dp). Masked entries become 0.
void masked_softmax_backward(const float* p, float* dp, int64_t T, float scale,
                             AttentionMask mask) {
  for (int64_t i = 0; i < T; ++i) {
    const float* prow = p + i * T;
    float* drow = dp + i * T;
    const int64_t n = visible_keys(i, T, mask);
    double dot = 0.0;
    for (int64_t j = 0; j < n; ++j) dot += static_cast<double>(prow[j]) * drow[j];
    const float dotf = static_cast<float>(dot);
    for (int64_t j = 0; j < n; ++j) drow[j] = scale * prow[j] * (drow[j] - dotf);
    for (int64_t j = n; j < T; ++j) drow[j] = 0.f;
  }
}

// ---- LayerNorm ----

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd) {
  const int64_t rows = x.rows(), C = x.cols();  // x: (rows, C)
  const float* pg = gamma.f32();
  const float* pb = beta.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.f32() + r * C;
    float* yr = y.f32() + r * C;
    double sum = 0.0;
    for (int64_t j = 0; j < C; ++j) sum += xr[j];
    const double mu = sum / static_cast<double>(C);
    double sq = 0.0;
    for (int64_t j = 0; j < C; ++j) sq += (xr[j] - mu) * (xr[j] - mu);
    const float m = static_cast<float>(mu);
    const float rs = static_cast<float>(1.0 / std::sqrt(sq / static_cast<double>(C) + eps));
    for (int64_t j = 0; j < C; ++j) yr[j] = (xr[j] - m) * rs * pg[j] + pb[j];
    mean.f32()[r] = m;
    rstd.f32()[r] = rs;
  }
}

void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta) {
  const int64_t rows = x.rows(), C = x.cols();  // x, dy, dx: (rows, C)
  const float* pg = gamma.f32();
  float* pdg = dgamma.f32();
  float* pdb = dbeta.f32();
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x.f32() + r * C;
    const float* dyr = dy.f32() + r * C;
    float* dxr = dx.f32() + r * C;
    const float m = mean.f32()[r], rs = rstd.f32()[r];
    double sum_g = 0.0, sum_gx = 0.0;  // sums of dxhat and dxhat * xhat
    for (int64_t j = 0; j < C; ++j) {
      const float xhat = (xr[j] - m) * rs;
      const float g = dyr[j] * pg[j];
      sum_g += g;
      sum_gx += static_cast<double>(g) * xhat;
      pdg[j] += dyr[j] * xhat;
      pdb[j] += dyr[j];
    }
    const float mg = static_cast<float>(sum_g / static_cast<double>(C));
    const float mgx = static_cast<float>(sum_gx / static_cast<double>(C));
    for (int64_t j = 0; j < C; ++j) {
      const float xhat = (xr[j] - m) * rs;
      dxr[j] = rs * (dyr[j] * pg[j] - mg - xhat * mgx);
    }
  }
}

// ---- embedding ----

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y) {
  const int64_t mb = tokens.dim(0), T = tokens.dim(1);
  const int64_t V = wte.rows(), C = wte.cols();  // wte: (V, C)
  for (int64_t b = 0; b < mb; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t tok = tokens.i32()[b * T + t];
      PT_CHECK(tok >= 0 && tok < V, "token " + std::to_string(tok) + " outside [0, " +
                                        std::to_string(V) + ")");
      const float* e = wte.f32() + tok * C;
      const float* p = wpe.f32() + t * C;
      float* yr = y.f32() + (b * T + t) * C;
      for (int64_t j = 0; j < C; ++j) yr[j] = e[j] + p[j];
    }
  }
}

void embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte, Tensor& dwpe) {
  const int64_t mb = tokens.dim(0), T = tokens.dim(1);
  const int64_t V = dwte.rows(), C = dwte.cols();  // dwte: (V, C)
  for (int64_t b = 0; b < mb; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int32_t tok = tokens.i32()[b * T + t];
      PT_CHECK(tok >= 0 && tok < V, "token " + std::to_string(tok) + " outside [0, " +
                                        std::to_string(V) + ")");
      const float* d = dy.f32() + (b * T + t) * C;
      float* ge = dwte.f32() + tok * C;
      float* gp = dwpe.f32() + t * C;
      for (int64_t j = 0; j < C; ++j) {
        ge[j] += d[j];
        gp[j] += d[j];
      }
    }
  }
}

// ---- multi-head attention ----

void attention_probs(Precision p, const Tensor& qkv, int64_t heads, Tensor& probs,
                     AttentionMask mask) {
  const AttnDims d = attn_dims(qkv, heads);  // qkv: (mb, T, 3C)
  for (int64_t b = 0; b < d.mb; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      float* s = probs.f32() + probs_offset(d, b, h);  // (T, T)
      // s = scale * Q K^T: (T, D) x (D, T)
      gemm(p, false, true, d.T, d.T, d.D, d.scale, qkv_head(qkv, d, b, h, 0), 3 * d.C,
           qkv_head(qkv, d, b, h, 1), 3 * d.C, 0.f, s, d.T);
      masked_softmax(s, d.T, mask);
    }
  }
}

void attention_values(Precision p, const Tensor& qkv, const Tensor& probs, int64_t heads,
                      Tensor& y) {
  const AttnDims d = attn_dims(qkv, heads);  // qkv: (mb, T, 3C)
  for (int64_t b = 0; b < d.mb; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      // y_h = P V: (T, T) x (T, D)
      gemm(p, false, false, d.T, d.D, d.T, 1.f, probs.f32() + probs_offset(d, b, h), d.T,
           qkv_head(qkv, d, b, h, 2), 3 * d.C, 0.f, y.f32() + head_offset(d, b, h), d.C);
    }
  }
}

void attention_backward(Precision prec, const Tensor& qkv, const Tensor& probs,
                        const Tensor& dy, int64_t heads, Tensor& dqkv, AttentionMask mask) {
  const AttnDims d = attn_dims(qkv, heads);  // qkv: (mb, T, 3C)
  std::vector<float> ds(static_cast<size_t>(d.T * d.T));           // (T, T) scratch
  for (int64_t b = 0; b < d.mb; ++b) {
    for (int64_t h = 0; h < d.H; ++h) {
      const float* p = probs.f32() + probs_offset(d, b, h);  // (T, T)
      const float* dyh = dy.f32() + head_offset(d, b, h);    // (T, D), ld C
      const float* q = qkv_head(qkv, d, b, h, 0);            // (T, D), ld 3C
      const float* k = qkv_head(qkv, d, b, h, 1);
      const float* v = qkv_head(qkv, d, b, h, 2);
      // dV = P^T dY: (T, T)^T x (T, D)
      gemm(prec, true, false, d.T, d.D, d.T, 1.f, p, d.T, dyh, d.C, 0.f, qkv_head(dqkv, d, b, h, 2),
           3 * d.C);
      // dP = dY V^T: (T, D) x (D, T); then dS = scale * softmax'(dP)
      gemm(prec, false, true, d.T, d.T, d.D, 1.f, dyh, d.C, v, 3 * d.C, 0.f, ds.data(), d.T);
      masked_softmax_backward(p, ds.data(), d.T, d.scale, mask);
      // dQ = dS K: (T, T) x (T, D); dK = dS^T Q: (T, T)^T x (T, D)
      gemm(prec, false, false, d.T, d.D, d.T, 1.f, ds.data(), d.T, k, 3 * d.C, 0.f,
           qkv_head(dqkv, d, b, h, 0), 3 * d.C);
      gemm(prec, true, false, d.T, d.D, d.T, 1.f, ds.data(), d.T, q, 3 * d.C, 0.f,
           qkv_head(dqkv, d, b, h, 1), 3 * d.C);
    }
  }
}

}  // namespace

}  // namespace pt::cpu

namespace pt {

namespace {

// The group itself: the functions above, with the backend's GEMM precision
// for the attention GEMMs.
class CpuTransformerKernels final : public TransformerKernels {
 public:
  explicit CpuTransformerKernels(Precision precision) : precision_(precision) {}

 protected:
  void do_layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                            Tensor& y, Tensor& mean, Tensor& rstd) override {
    cpu::layernorm_forward(x, gamma, beta, eps, y, mean, rstd);
  }
  void do_layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                             const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                             Tensor& dbeta) override {
    cpu::layernorm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  }
  void do_embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                            Tensor& y) override {
    cpu::embedding_forward(tokens, wte, wpe, y);
  }
  void do_embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte,
                             Tensor& dwpe) override {
    cpu::embedding_backward(tokens, dy, dwte, dwpe);
  }
  void do_attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs,
                          AttentionMask mask) override {
    cpu::attention_probs(precision_, qkv, heads, probs, mask);
  }
  void do_attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads,
                           Tensor& y) override {
    cpu::attention_values(precision_, qkv, probs, heads, y);
  }
  void do_attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                             int64_t heads, Tensor& dqkv, AttentionMask mask) override {
    cpu::attention_backward(precision_, qkv, probs, dy, heads, dqkv, mask);
  }

 private:
  Precision precision_;  // of the attention GEMMs' operands
};

}  // namespace

std::unique_ptr<TransformerKernels> make_cpu_transformer_kernels(Precision precision) {
  return std::make_unique<CpuTransformerKernels>(precision);
}

}  // namespace pt
