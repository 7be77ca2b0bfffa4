// backend.hpp: the compute kernels every layer is written against.
//
// Layers never touch raw loops or BLAS directly; they call a Backend. The CPU
// backend (OpenBLAS + plain loops) is always built; the CUDA backend (cuBLAS +
// own kernels) implements the same interface. Kernels come in groups: the core
// ones below (GEMM, bias, activations, losses, elementwise, optimizer steps)
// that every backend has, and KernelGroups such as TransformerKernels that a
// backend provides for the model families needing them. Tensors are viewed as 2-D
// (rows, cols) with all leading dimensions folded into rows.
// Every kernel is deterministic: the same inputs give bitwise the same outputs.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/base/deck_kinds.hpp"
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

// Double results that kernels leave on the backend's device until the host
// reads them all at once: a step's micro-batch losses and its per-parameter
// sums of squares come back in one transfer and one wait instead of one
// synchronisation each (#42). Slots are written by the Backend's *_to
// kernels. The CPU backend computes each result at once into host memory
// (HostScalarBatch), so its values are the immediate kernels', bit for bit.
class ScalarBatch {
 public:
  explicit ScalarBatch(int64_t size) : size_(size) {}
  virtual ~ScalarBatch() = default;
  int64_t size() const { return size_; }
  // Waits for every kernel that wrote a slot and returns (size) values in
  // slot order; a slot no kernel wrote reads 0. The batch may be written
  // and read again.
  virtual std::vector<double> read() = 0;

 private:
  int64_t size_;
};

// The batch of a backend that computes synchronously: slots in host memory.
class HostScalarBatch final : public ScalarBatch {
 public:
  explicit HostScalarBatch(int64_t size) : ScalarBatch(size), values_(static_cast<size_t>(size)) {}
  double& at(int64_t slot) { return values_.at(static_cast<size_t>(slot)); }
  std::vector<double> read() override { return values_; }

 private:
  std::vector<double> values_;  // (size)
};

// A group of kernels beyond the core ones that only some backends provide,
// for the model families that need them: TransformerKernels
// (transformer_kernels.hpp) for "gpt". A group K derives from KernelGroup and
// names itself in `static constexpr const char* kGroup`; a backend that has
// it returns it from Backend::kernel_group(K::kGroup). A family with kernels
// of its own (a CNN's convolutions) adds its group the same way, touching
// only the backends that implement it.
class KernelGroup {
 public:
  virtual ~KernelGroup() = default;
};

// The core kernels, which every backend implements and every model family may
// use. Each kernel is a public non-virtual function that checks its arguments'
// shapes (src/tensor/backend.cpp: the one place, with one message per
// argument) and then calls the backend's protected do_<kernel>, which may
// assume them. A backend adds only its own preconditions (the CUDA backend:
// every tensor on the GPU).
class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual Device device() const = 0;
  // The precision of this backend's GEMM operands (training.precision);
  // fp32 unless the backend says otherwise.
  virtual Precision precision() const { return Precision::Fp32; }

  // The group K of this backend, or nullptr when it does not provide it.
  template <class K>
  K* kernels() {
    return dynamic_cast<K*>(kernel_group(K::kGroup));
  }
  // The group named `group` (a KernelGroup's kGroup), or nullptr; by default
  // a backend has the core kernels only.
  virtual KernelGroup* kernel_group(const std::string& /*group*/) { return nullptr; }

  // c = alpha * op(a) * op(b) + beta * c, op = transpose when the flag is set.
  // a: (m, k) or (k, m); b: (k, n) or (n, k); c: (m, n), all row-major 2-D views.
  // c is F32. a and b are F32 (rounded to precision() inside the GEMM), or,
  // when precision() is bf16 or fp16, already stored in it (BF16 / F16, e.g.
  // a weight copy made by round_to): used as they are, which gives bitwise
  // what the F32 operand they were rounded from gives, since rounding a
  // rounded value changes nothing.
  void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
              float alpha, float beta);
  // A Linear layer's forward: y (rows, out) = x (rows, in) w^T + bias, with
  // w (out, in) and bias (out) or null; with `gelu` also gelu (rows, out) =
  // GELU(y), y kept as GELU's input for the backward. By default matmul,
  // add_bias and gelu_forward in turn; a backend may fuse them (CUDA:
  // cuBLASLt's bias and GELU epilogues).
  void linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                      Tensor* gelu = nullptr);
  // A Linear layer's input gradient: dx (rows, in) = dy (rows, out) w, with
  // w (out, in); with `gelu_input` (rows, in), the input of a GELU that fed
  // this layer, dx = GELU'(gelu_input) * (dy w) instead, the gradient at the
  // GELU's input. By default matmul, then gelu_backward through a scratch
  // tensor; a backend may fuse them (CUDA: cuBLASLt's DGELU epilogue).
  void linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx,
                             const Tensor* gelu_input = nullptr);
  // dst = src rounded to dst's dtype, BF16 or F16 (round_bits of
  // precision.hpp: round to nearest even, fp16 overflowing to inf). src: F32,
  // dst: the same number of elements.
  void round_to(const Tensor& src, Tensor& dst);
  // y (rows, n) += bias (n)
  void add_bias(Tensor& y, const Tensor& bias);
  // dbias (n) += column sums of dy (rows, n)
  void accumulate_bias_grad(const Tensor& dy, Tensor& dbias);

  // y = max(x, 0); dx = dy where x > 0, else 0. x, y, dy, dx: same size.
  void relu_forward(const Tensor& x, Tensor& y);
  void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);
  // tanh approximation of GELU; sizes as relu.
  void gelu_forward(const Tensor& x, Tensor& y);
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

  // Mean-squared error. pred, target, dpred: (rows, n). Returns sum
  // (pred-target)^2 over the tensor; writes dpred = 2 * (pred - target) * grad_scale.
  double mse_loss(const Tensor& pred, const Tensor& target, float grad_scale, Tensor& dpred);
  // Softmax cross-entropy over the first `classes` columns of each row.
  // logits, dlogits: (rows, width), 1 <= classes <= width; labels: (rows) i32
  // in [0, classes). Returns the sum over rows of -log softmax[label];
  // writes dlogits = (softmax - onehot) * grad_scale in the first `classes`
  // columns and exactly 0 in the others, which are padding (a vocabulary
  // rounded up for aligned GEMMs): they take no probability. The loss and the
  // real columns' gradient are bitwise those of the same kernel on a tensor
  // of the real columns alone.
  double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t classes,
                               float grad_scale, Tensor& dlogits);
  // The same with every column a class (classes = width).
  double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale,
                               Tensor& dlogits);

  void fill(Tensor& x, float value);
  // dst = src, of the same size in bytes (across devices on a GPU backend).
  void copy(const Tensor& src, Tensor& dst);
  // Sum of squares in double, accumulated in index order.
  double sum_squares(const Tensor& x);
  // True when every element is finite.
  bool all_finite(const Tensor& x);
  // x *= s
  void scale(Tensor& x, float s);
  // out = a + b elementwise (e.g. a residual add); out may alias a or b. Same sizes.
  void add(const Tensor& a, const Tensor& b, Tensor& out);

  // p -= lr * (v = momentum * v + g + weight_decay * p). p, g, v: same size.
  void sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                float weight_decay);
  // AdamW with bias correction; step is 1-based. p, g, m, v: same size.
  void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr, float beta1,
                  float beta2, float eps, float weight_decay, long step);

  // The deferred forms of sum_squares, all_finite, mse_loss and
  // softmax_cross_entropy: the same checks and arithmetic, the result
  // written to `slot` of `batch` (one made by this backend's
  // make_scalar_batch) instead of returned, so that no kernel waits.
  // nonfinite_to writes 0 when every element is finite, else a positive count.
  void sum_squares_to(const Tensor& x, ScalarBatch& batch, int64_t slot);
  void nonfinite_to(const Tensor& x, ScalarBatch& batch, int64_t slot);
  void mse_loss_to(const Tensor& pred, const Tensor& target, float grad_scale, Tensor& dpred,
                   ScalarBatch& batch, int64_t slot);
  void softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels, int64_t classes,
                                float grad_scale, Tensor& dlogits, ScalarBatch& batch,
                                int64_t slot);
  void softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels, float grad_scale,
                                Tensor& dlogits, ScalarBatch& batch, int64_t slot);
  // A batch of `size` slots for this backend's *_to kernels; by default one
  // in host memory (a backend that computes synchronously).
  virtual std::unique_ptr<ScalarBatch> make_scalar_batch(int64_t size);

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

 protected:
  // The kernels above, called with arguments whose shapes were checked.
  virtual void do_matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                         float alpha, float beta) = 0;
  virtual void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                                 Tensor* gelu);  // the composition described above
  virtual void do_linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx,
                                        const Tensor* gelu_input);  // likewise
  virtual void do_round_to(const Tensor& src, Tensor& dst) = 0;
  virtual void do_add_bias(Tensor& y, const Tensor& bias) = 0;
  virtual void do_accumulate_bias_grad(const Tensor& dy, Tensor& dbias) = 0;
  virtual void do_relu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  virtual void do_gelu_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
  virtual double do_mse_loss(const Tensor& pred, const Tensor& target, float grad_scale,
                             Tensor& dpred) = 0;
  virtual double do_softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                          int64_t classes, float grad_scale,
                                          Tensor& dlogits) = 0;
  virtual void do_fill(Tensor& x, float value) = 0;
  virtual void do_copy(const Tensor& src, Tensor& dst) = 0;
  virtual double do_sum_squares(const Tensor& x) = 0;
  virtual bool do_all_finite(const Tensor& x) = 0;
  virtual void do_scale(Tensor& x, float s) = 0;
  virtual void do_add(const Tensor& a, const Tensor& b, Tensor& out) = 0;
  virtual void do_sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                           float weight_decay) = 0;
  virtual void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr,
                             float beta1, float beta2, float eps, float weight_decay,
                             long step) = 0;
  // The *_to kernels, slot checked. By default (a HostScalarBatch) the
  // immediate kernel's result is stored in the slot.
  virtual void do_sum_squares_to(const Tensor& x, ScalarBatch& batch, int64_t slot);
  virtual void do_nonfinite_to(const Tensor& x, ScalarBatch& batch, int64_t slot);
  virtual void do_mse_loss_to(const Tensor& pred, const Tensor& target, float grad_scale,
                              Tensor& dpred, ScalarBatch& batch, int64_t slot);
  virtual void do_softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels,
                                           int64_t classes, float grad_scale, Tensor& dlogits,
                                           ScalarBatch& batch, int64_t slot);
};

[[noreturn]] void throw_missing_kernels(const Backend& be, const char* group,
                                       const std::string& user);

// The kernels of group K that `user` (e.g. "model family \"gpt\"") needs
// from `be`; InputError naming both and the backend when it lacks them.
template <class K>
K& require_kernels(Backend& be, const std::string& user) {
  K* k = be.kernels<K>();
  if (!k) throw_missing_kernels(be, K::kGroup, user);
  return *k;
}

// The process-wide CPU backend (fp32 GEMMs).
Backend& cpu_backend();
// A CPU backend whose GEMMs round their operands to `precision` (fp32
// accumulation), emulating the CUDA backend's mixed precision exactly up to
// the accumulation order (precision.hpp).
std::unique_ptr<Backend> make_cpu_backend(Precision precision);

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
void gemm(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
// A GEMM operand as stored, row-major with row pitch ld (in elements): F32
// values, rounded to the GEMM's precision on the way in, or a BF16 / F16
// operand already in that precision, widened to fp32 exactly.
struct GemmOperand {
  const void* data = nullptr;
  DType dtype = DType::F32;
  int64_t ld = 0;
};
// gemm on stored operands: each F32 one rounded to `p`, each BF16 / F16 one
// (whose dtype must be stored_dtype(p)) widened, into the same scratch, then
// the same sgemm call, so an operand rounded ahead gives the bits of its
// F32 original.
void gemm(Precision p, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const GemmOperand& a, const GemmOperand& b, float beta, float* c, int64_t ldc);
}  // namespace cpu

// The library behind cpu::sgemm (src/tensor/cpu_gemm.cpp): auto (default:
// oneDNN, with OpenBLAS for wide weight gradients over <= 64 rows and, without
// AVX-512, wide input gradients), oneDNN
// (its matmul primitive for A B^T with k >= 256, dnnl_sgemm otherwise),
// oneDNN's dnnl_sgemm alone, or OpenBLAS's cblas_sgemm; process-wide.
// The deck's kind (base/deck_kinds.hpp): one enum and one name table.
using CpuGemm = CpuGemmKind;
// Under auto, whether OpenBLAS computes this call (arguments as cpu::sgemm):
// a wide weight gradient A^T B over <= 64 rows (A^T B with m x n >= 512^2,
// k <= 64) on every CPU, and a wide A B (n x k >= 512^2) where oneDNN runs
// without AVX-512 (results/bench_gemm.md, results/bench_gemm_avx2.md).
bool auto_gemm_uses_openblas(bool ta, bool tb, int64_t m, int64_t n, int64_t k);
// Its names are read only from a deck (training.cpu_gemm, through the kind table).
void set_cpu_gemm(CpuGemm gemm);
CpuGemm cpu_gemm();
// "oneDNN 2.6.3 dnnl_sgemm + matmul (A B^T), ISA avx512_core_amx" or "OpenBLAS cblas_sgemm".
std::string cpu_gemm_description();

// Sets the GEMM threads (OpenBLAS's and oneDNN's OpenMP) for this process.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace pt
