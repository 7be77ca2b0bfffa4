// backend.hpp: the compute kernels every layer is written against.
//
// Layers never touch raw loops or BLAS directly; they call a Backend. The CPU
// backend (OpenBLAS + plain loops) is always built; the CUDA backend (cuBLAS +
// own kernels) implements the same interface. Tensors are viewed as 2-D
// (rows, cols) with all leading dimensions folded into rows.
// Every kernel is deterministic: the same inputs give bitwise the same outputs.
#pragma once

#include "pipetrain/tensor.hpp"

namespace pt {

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

  // p -= lr * (v = momentum * v + g + weight_decay * p)
  virtual void sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                        float weight_decay) = 0;
  // AdamW with bias correction; step is 1-based.
  virtual void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr,
                          float beta1, float beta2, float eps, float weight_decay,
                          long step) = 0;
};

// The process-wide CPU backend.
Backend& cpu_backend();

// Sets OpenBLAS threads for this process.
void set_blas_threads(int threads);
int blas_threads();

}  // namespace pt
