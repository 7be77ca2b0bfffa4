// attention.cpp: causal multi-head attention of the CUDA backend.
//
// Head h of sequence b lives in columns [h*D, (h+1)*D) of the queries, keys
// and values thirds of qkv (mb, T, 3C), leading dimension 3C. For one b, the
// H heads are one strided-batched GEMM (head stride D in qkv and y, T*T in
// probs); sequences are a loop. Scores use alpha = 1/sqrt(D) in the GEMM,
// then the causal softmax kernel; entries above the diagonal are exactly 0.
// Called with checked shapes (src/tensor/transformer_kernels.cpp).
#include "attention.hpp"

#include <cmath>

#include "check.hpp"
#include "context.hpp"
#include "../tensor/attention_dims.hpp"
#include "gemm.hpp"
#include "kernels.hpp"

namespace pt::cuda {

namespace {


// One batched GEMM over the H heads; offsets and strides in elements.
Gemm heads_gemm(const AttnDims& d, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  Gemm g;
  g.ta = ta;
  g.tb = tb;
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch = d.H;
  return g;
}

void set_a(Gemm& g, Operand a, int64_t ld, int64_t stride) {
  g.a = a;
  g.lda = ld;
  g.stride_a = stride;
}
void set_b(Gemm& g, Operand b, int64_t ld, int64_t stride) {
  g.b = b;
  g.ldb = ld;
  g.stride_b = stride;
}
void set_c(Gemm& g, float* c, int64_t ld, int64_t stride) {
  g.c = c;
  g.ldc = ld;
  g.stride_c = stride;
}

}  // namespace

void attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs, AttentionMask mask,
                     Precision p) {
  check_on_gpu({&qkv, &probs}, "attention");
  const AttnDims d = attn_dims(qkv, heads);  // probs: (mb, H, T, T)
  DeviceBuffer qkv_low;
  const Operand q = as_operand(qkv.f32(), qkv.numel(), p, qkv_low);
  for (int64_t b = 0; b < d.mb; ++b) {
    // S_h = scale Q_h K_h^T: (T, D) x (D, T)
    Gemm g = heads_gemm(d, false, true, d.T, d.T, d.D);
    set_a(g, q.at(b * d.qkv_seq()), 3 * d.C, d.D);
    set_b(g, q.at(b * d.qkv_seq() + d.C), 3 * d.C, d.D);
    set_c(g, probs.f32() + b * d.probs_seq(), d.T, d.T * d.T);
    g.alpha = d.scale;
    run_gemm(g, p);
  }
  kern::masked_softmax_forward(probs.f32(), d.mb * d.H * d.T, d.T, mask == AttentionMask::Causal,
                               context().compute);
}

void attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads, Tensor& y,
                      Precision p) {
  check_on_gpu({&qkv, &probs, &y}, "attention");
  const AttnDims d = attn_dims(qkv, heads);  // probs: (mb, H, T, T); y: (mb, T, C)
  DeviceBuffer qkv_low, probs_low;
  const Operand q = as_operand(qkv.f32(), qkv.numel(), p, qkv_low);
  const Operand pr = as_operand(probs.f32(), probs.numel(), p, probs_low);
  for (int64_t b = 0; b < d.mb; ++b) {
    // Y_h = P_h V_h: (T, T) x (T, D)
    Gemm g = heads_gemm(d, false, false, d.T, d.D, d.T);
    set_a(g, pr.at(b * d.probs_seq()), d.T, d.T * d.T);
    set_b(g, q.at(b * d.qkv_seq() + 2 * d.C), 3 * d.C, d.D);
    set_c(g, y.f32() + b * d.T * d.C, d.C, d.D);
    run_gemm(g, p);
  }
}

void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                        int64_t heads, Tensor& dqkv, AttentionMask mask, Precision p) {
  check_on_gpu({&qkv, &probs, &dy, &dqkv}, "attention backward");
  const AttnDims d = attn_dims(qkv, heads);  // probs: (mb, H, T, T); dy: (mb, T, C)
  cudaStream_t s = context().compute;
  DeviceBuffer qkv_low, probs_low, dy_low, ds_low;
  const Operand q = as_operand(qkv.f32(), qkv.numel(), p, qkv_low);
  const Operand pr = as_operand(probs.f32(), probs.numel(), p, probs_low);
  const Operand g_y = as_operand(dy.f32(), dy.numel(), p, dy_low);
  DeviceBuffer ds_buf(static_cast<size_t>(d.probs_seq()) * sizeof(float));  // (H, T, T)
  float* ds = ds_buf.as<float>();
  for (int64_t b = 0; b < d.mb; ++b) {
    const int64_t qb = b * d.qkv_seq(), yb = b * d.T * d.C, pb = b * d.probs_seq();
    float* dq = dqkv.f32() + qb;
    // dV_h = P_h^T dY_h: (T, T)^T x (T, D)
    Gemm dv = heads_gemm(d, true, false, d.T, d.D, d.T);
    set_a(dv, pr.at(pb), d.T, d.T * d.T);
    set_b(dv, g_y.at(yb), d.C, d.D);
    set_c(dv, dq + 2 * d.C, 3 * d.C, d.D);
    run_gemm(dv, p);
    // dP_h = dY_h V_h^T: (T, D) x (D, T), then dS = scale softmax'(dP) in place
    Gemm dp = heads_gemm(d, false, true, d.T, d.T, d.D);
    set_a(dp, g_y.at(yb), d.C, d.D);
    set_b(dp, q.at(qb + 2 * d.C), 3 * d.C, d.D);
    set_c(dp, ds, d.T, d.T * d.T);
    run_gemm(dp, p);
    kern::masked_softmax_backward(probs.f32() + pb, ds, d.H * d.T, d.T, d.scale,
                                  mask == AttentionMask::Causal, s);
    const Operand g_s = as_operand(ds, d.probs_seq(), p, ds_low);
    // dQ_h = dS_h K_h: (T, T) x (T, D)
    Gemm dqg = heads_gemm(d, false, false, d.T, d.D, d.T);
    set_a(dqg, g_s, d.T, d.T * d.T);
    set_b(dqg, q.at(qb + d.C), 3 * d.C, d.D);
    set_c(dqg, dq, 3 * d.C, d.D);
    run_gemm(dqg, p);
    // dK_h = dS_h^T Q_h: (T, T)^T x (T, D)
    Gemm dk = heads_gemm(d, true, false, d.T, d.D, d.T);
    set_a(dk, g_s, d.T, d.T * d.T);
    set_b(dk, q.at(qb), 3 * d.C, d.D);
    set_c(dk, dq + d.C, 3 * d.C, d.D);
    run_gemm(dk, p);
  }
}

}  // namespace pt::cuda
