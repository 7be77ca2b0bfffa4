// backend.hpp: the compute kernels every layer is written against.
//
// Layers never touch raw loops or BLAS directly; they call a Backend. The CPU
// backend (OpenBLAS + plain loops) is always built; the CUDA backend (cuBLAS +
// own kernels) implements the same interface. Tensors are viewed as 2-D
// (rows, cols) with all leading dimensions folded into rows.
// Every kernel is deterministic: the same inputs give bitwise the same outputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/tensor/precision.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

// Times regions of the work issued to a backend, on the backend's own clock:
// the executor's F, B and W, which feed the measured bubble, live
// rebalancing and the placement of zero-bubble schedules at measured times.
// begin() and end() never wait for the work; read(), called once per step
// after the last region closed, does. The CPU backend computes synchronously
// and reads the host's steady clock; the CUDA backend records a pair of
// events on its compute stream per region, so a time is the kernels' time on
// the GPU, not the time the host took to launch them.
class ComputeTimer {
 public:
  virtual ~ComputeTimer() = default;
  // Opens a region: the work issued from now on is timed. Regions do not nest.
  virtual void begin() = 0;
  // Closes the open region.
  virtual void end() = 0;
  // Waits for the work of every closed region and returns their seconds, in
  // the order they were opened; the next region starts a new list.
  virtual std::vector<double> read() = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual Device device() const = 0;

  // c = alpha * op(a) * op(b) + beta * c, op = transpose when the flag is set.
  // a: (m, k) or (k, m); b: (k, n) or (n, k); c: (m, n), all row-major 2-D views.
  virtual void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b,
                      Tensor& c, float alpha, float beta) = 0;
  // y (rows, n) += bias (n)
  virtual void add_bias(Tensor& y, const Tensor& bias) = 0;
  // dbias (n) += column sums of dy (rows, n)
  virtual void accumulate_bias_grad(const Tensor& dy, Tensor& dbias) = 0;

  virtual void relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  // tanh approximation of GELU
  virtual void gelu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;

  // Mean-squared error. pred, target: (rows, n). Returns sum (pred-target)^2
  // over the tensor; writes dpred = 2 * (pred - target) * grad_scale.
  virtual double mse_loss(const Tensor& pred, const Tensor& target, float grad_scale,
                          Tensor& dpred) = 0;
  // Softmax cross-entropy. logits: (rows, classes); labels: (rows) i32.
  // Returns the sum over rows of -log softmax[label]; writes
  // dlogits = (softmax - onehot) * grad_scale.
  virtual double softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                       float grad_scale, Tensor& dlogits) = 0;

  virtual void fill(Tensor& x, float value) = 0;
  virtual void copy(const Tensor& src, Tensor& dst) = 0;
  // Sum of squares in double, accumulated in index order.
  virtual double sum_squares(const Tensor& x) = 0;
  // True when every element is finite.
  virtual bool all_finite(const Tensor& x) = 0;
  // x *= s
  virtual void scale(Tensor& x, float s) = 0;
  // Waits until every kernel issued so far has finished (timings, traces).
  // The CPU backend computes synchronously: nothing to wait for.
  virtual void synchronize() {}
  // A new timer of this backend's work (ComputeTimer above); by default, for
  // a backend that computes synchronously, the host's steady clock.
  virtual std::unique_ptr<ComputeTimer> make_timer();
  // Memory the backend's allocator caches for reuse (blocks no tensor
  // holds). release_cached_memory() gives all of it back (before a
  // rebalancing move, which allocates tensors of new sizes);
  // trim_cached_memory() gives back the blocks that no allocation reused
  // since the previous trim (at the end of each step, where no transfer is
  // pending). Both may wait for the device. No-ops by default (the CPU
  // backend's host allocator drops its cache itself when malloc fails).
  virtual void release_cached_memory() {}
  virtual void trim_cached_memory() {}

  // ---- Transformer (GPT) kernels. Shapes: mb micro-batch, T sequence, C model
  // width, H heads, D = C / H head width, V vocabulary.

  // out = a + b elementwise (the residual add); out may alias a or b.
  virtual void add(const Tensor& a, const Tensor& b, Tensor& out) = 0;

  // LayerNorm over the last dimension, biased variance, eps inside the sqrt:
  // y = (x - mean) * rstd * gamma + beta. x, y: (rows, C); gamma, beta: (C);
  // writes mean, rstd: (rows) for the backward pass.
  virtual void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 float eps, Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  // Writes dx (rows, C) and ADDS into dgamma, dbeta (C). mean, rstd: from forward.
  virtual void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& dy, Tensor& dx,
                                  Tensor& dgamma, Tensor& dbeta) = 0;

  // y[b, t] = wte[tokens[b, t]] + wpe[t]. tokens: (mb, T) i32; wte: (V, C);
  // wpe: (Tmax, C) with T <= Tmax; y: (mb, T, C).
  virtual void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                 Tensor& y) = 0;
  // ADDS dy (mb, T, C) into dwte[tokens[b, t]] and dwpe[t], in (b, t) order.
  virtual void embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte,
                                  Tensor& dwpe) = 0;

  // Causal multi-head self-attention on the fused qkv (mb, T, 3C): columns
  // [0, C) are the queries, [C, 2C) the keys, [2C, 3C) the values, head h in
  // columns [h*D, (h+1)*D) of each. Split in two so that backward can run from
  // probabilities recomputed by attention_probs (selective recomputation).
  //
  // probs (mb, H, T, T) = softmax(Q K^T / sqrt(D) + causal mask); entries
  // above the diagonal are exactly 0.
  virtual void attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs) = 0;
  // y (mb, T, C): head h of y[b] = probs[b, h] @ V[b, h].
  virtual void attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads,
                                Tensor& y) = 0;
  // Writes dqkv (mb, T, 3C) from dy (mb, T, C), the probs and qkv of forward.
  virtual void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                                  int64_t heads, Tensor& dqkv) = 0;

  // p -= lr * (v = momentum * v + g + weight_decay * p)
  virtual void sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                        float weight_decay) = 0;
  // AdamW with bias correction; step is 1-based.
  virtual void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr,
                          float beta1, float beta2, float eps, float weight_decay,
                          long step) = 0;
};

// The process-wide CPU backend (fp32 GEMMs).
Backend& cpu_backend();
// A CPU backend whose GEMMs round their operands to `precision` (fp32
// accumulation), emulating the CUDA backend's mixed precision exactly up to
// the accumulation order (precision.hpp).
std::unique_ptr<Backend> make_cpu_backend(GemmPrecision precision);

// GEMM shapes of the CPU backend, for benchmarks: every sgemm call between
// start and stop is recorded (arguments as in cblas_sgemm, row-major). The
// operand addresses are kept only as identities, never dereferenced: a
// replay can tell which calls shared a matrix (a layer's weight in forward
// and backward, one layer's output as the next one's input) and give each
// distinct matrix its own buffer, so that it moves the model's bytes.
struct GemmShape {
  bool trans_a, trans_b;
  int64_t m, n, k, lda, ldb, ldc;
  float beta;
  const void* a_id = nullptr;
  const void* b_id = nullptr;
  const void* c_id = nullptr;
};
void start_gemm_recording();
std::vector<GemmShape> stop_gemm_recording();

namespace cpu {
// Every GEMM of the CPU backend: row-major C = alpha * op(A) op(B) + beta * C
// on strided sub-matrices, through the library set_cpu_gemm chose; recorded
// while recording is on.
void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
           int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The same with both operands first rounded to `p` (sgemm itself for fp32).
void gemm(GemmPrecision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
}  // namespace cpu

// The library behind cpu::sgemm (src/tensor/cpu_gemm.cpp): auto (default:
// oneDNN, with OpenBLAS for wide weight gradients over <= 64 rows and, without
// AVX-512, wide input gradients), oneDNN
// (its matmul primitive for A B^T with k >= 256, dnnl_sgemm otherwise),
// oneDNN's dnnl_sgemm alone, or OpenBLAS's cblas_sgemm; process-wide.
enum class CpuGemm { Auto, OneDNN, OneDNNSgemm, OpenBLAS };
// Under auto, whether OpenBLAS computes this call (arguments as cpu::sgemm):
// a wide weight gradient A^T B over <= 64 rows (A^T B with m x n >= 512^2,
// k <= 64) on every CPU, and a wide A B (n x k >= 512^2) where oneDNN runs
// without AVX-512 (results/bench_gemm.md, results/bench_gemm_avx2.md).
bool auto_gemm_uses_openblas(bool ta, bool tb, int64_t m, int64_t n, int64_t k);
// "auto" | "onednn" | "onednn-sgemm" | "openblas"; else InputError
CpuGemm parse_cpu_gemm(const std::string& name);
void set_cpu_gemm(CpuGemm gemm);
CpuGemm cpu_gemm();
// "oneDNN 2.6.3 dnnl_sgemm + matmul (A B^T), ISA avx512_core_amx" or "OpenBLAS cblas_sgemm".
std::string cpu_gemm_description();

// Sets the GEMM threads (OpenBLAS's and oneDNN's OpenMP) for this process.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace pt
