// backend.cpp: the core kernels' argument checks, written once for every
// backend: each public Backend kernel checks its shapes here and then calls
// the backend's do_<kernel>. Also the error of a missing kernel group.
#include "pipetrain/tensor/backend.hpp"

#include "shape_checks.hpp"

namespace pt {

using shapes::numel_is;
using shapes::same_numel;

void throw_missing_kernels(const Backend& be, const char* group, const std::string& user) {
  throw InputError(user + " needs the " + group + " kernels, which backend \"" + be.name() +
                   "\" does not provide");
}

namespace {

// An operand of `kernel` is F32, or stored in the backend's GEMM precision
// p (BF16 for bf16, F16 for fp16); anything else names the operand, its
// type and the backend's.
void operand_dtype_ok(const char* kernel, const char* name, const Tensor& t, const Backend& be) {
  if (t.dtype() == DType::F32) return;
  const Precision p = be.precision();
  if (t.dtype() == stored_dtype(p)) return;
  PT_FAIL(std::string(kernel) + ": operand " + name + " " + shape_string(t.shape()) + " is " +
          dtype_name(t.dtype()) + ", but backend \"" + be.name() + "\" computes GEMMs in " +
          kind_name(p) + ", which takes f32 operands" +
          (stored_dtype(p) == DType::F32 ? std::string()
                                         : std::string(" or ") + dtype_name(stored_dtype(p))));
}

}  // namespace

void Backend::matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                     float alpha, float beta) {
  operand_dtype_ok("matmul", "a", a, *this);
  operand_dtype_ok("matmul", "b", b, *this);
  PT_CHECK(c.dtype() == DType::F32, std::string("matmul: output c is ") + dtype_name(c.dtype()) +
                                        ", not f32");
  const int64_t m = trans_a ? a.cols() : a.rows();
  const int64_t k = trans_a ? a.rows() : a.cols();
  const int64_t kb = trans_b ? b.cols() : b.rows();
  const int64_t n = trans_b ? b.rows() : b.cols();
  PT_CHECK(k == kb && c.rows() == m && c.cols() == n,
           "matmul shapes " + shape_string(a.shape()) + (trans_a ? "^T" : "") + " x " +
               shape_string(b.shape()) + (trans_b ? "^T" : "") + " -> " + shape_string(c.shape()));
  do_matmul(a, trans_a, b, trans_b, c, alpha, beta);
}

void Backend::linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                             Tensor* gelu) {
  operand_dtype_ok("linear_forward", "x", x, *this);
  operand_dtype_ok("linear_forward", "w", w, *this);
  PT_CHECK(x.cols() == w.cols() && y.rows() == x.rows() && y.cols() == w.rows(),
           "linear_forward shapes: x " + shape_string(x.shape()) + ", w " +
               shape_string(w.shape()) + " (out, in), y " + shape_string(y.shape()));
  if (bias) numel_is("linear_forward", "bias", *bias, y.cols(), "the columns of y");
  if (gelu) same_numel("linear_forward", "gelu", *gelu, "y", y);
  do_linear_forward(x, w, bias, y, gelu);
}

void Backend::do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                                Tensor* gelu) {
  do_matmul(x, false, w, true, y, 1.f, 0.f);
  if (bias) do_add_bias(y, *bias);
  if (gelu) do_gelu_forward(y, *gelu);
}

void Backend::linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx,
                                    const Tensor* gelu_input) {
  operand_dtype_ok("linear_backward_input", "dy", dy, *this);
  operand_dtype_ok("linear_backward_input", "w", w, *this);
  PT_CHECK(dy.cols() == w.rows() && dx.rows() == dy.rows() && dx.cols() == w.cols(),
           "linear_backward_input shapes: dy " + shape_string(dy.shape()) + ", w " +
               shape_string(w.shape()) + " (out, in), dx " + shape_string(dx.shape()));
  if (gelu_input) same_numel("linear_backward_input", "gelu_input", *gelu_input, "dx", dx);
  do_linear_backward_input(dy, w, dx, gelu_input);
}

void Backend::do_linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx,
                                       const Tensor* gelu_input) {
  if (!gelu_input) {
    do_matmul(dy, false, w, false, dx, 1.f, 0.f);
    return;
  }
  Tensor dgelu = Tensor::empty(dx.shape(), DType::F32, MemCategory::Workspace, device());
  do_matmul(dy, false, w, false, dgelu, 1.f, 0.f);  // the gradient at the GELU's output
  do_gelu_backward(*gelu_input, dgelu, dx);
}

void Backend::round_to(const Tensor& src, Tensor& dst) {
  PT_CHECK(src.dtype() == DType::F32, std::string("round_to: src ") + shape_string(src.shape()) +
                                          " is " + dtype_name(src.dtype()) + ", not f32");
  PT_CHECK(dst.dtype() == DType::BF16 || dst.dtype() == DType::F16,
           std::string("round_to: dst ") + shape_string(dst.shape()) + " is " +
               dtype_name(dst.dtype()) + ", not bf16 or f16");
  same_numel("round_to", "dst", dst, "src", src);
  do_round_to(src, dst);
}

void Backend::add_bias(Tensor& y, const Tensor& bias) {
  numel_is("add_bias", "bias", bias, y.cols(), "the columns of y");
  do_add_bias(y, bias);
}

void Backend::accumulate_bias_grad(const Tensor& dy, Tensor& dbias) {
  numel_is("accumulate_bias_grad", "dbias", dbias, dy.cols(), "the columns of dy");
  do_accumulate_bias_grad(dy, dbias);
}

void Backend::relu_forward(const Tensor& x, Tensor& y) {
  same_numel("relu_forward", "y", y, "x", x);
  do_relu_forward(x, y);
}

void Backend::relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  same_numel("relu_backward", "dy", dy, "x", x);
  same_numel("relu_backward", "dx", dx, "x", x);
  do_relu_backward(x, dy, dx);
}

void Backend::gelu_forward(const Tensor& x, Tensor& y) {
  same_numel("gelu_forward", "y", y, "x", x);
  do_gelu_forward(x, y);
}

void Backend::gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) {
  same_numel("gelu_backward", "dy", dy, "x", x);
  same_numel("gelu_backward", "dx", dx, "x", x);
  do_gelu_backward(x, dy, dx);
}

double Backend::mse_loss(const Tensor& pred, const Tensor& target, float grad_scale,
                         Tensor& dpred) {
  same_numel("mse_loss", "target", target, "pred", pred);
  same_numel("mse_loss", "dpred", dpred, "pred", pred);
  return do_mse_loss(pred, target, grad_scale, dpred);
}

namespace {

// The arguments of softmax_cross_entropy(_to): labels one per row of logits,
// dlogits logits' size, 1 <= classes <= logits' columns.
void check_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t classes,
                         const Tensor& dlogits) {
  numel_is("softmax_cross_entropy", "labels", labels, logits.rows(), "the rows of logits");
  same_numel("softmax_cross_entropy", "dlogits", dlogits, "logits", logits);
  PT_CHECK(classes >= 1 && classes <= logits.cols(),
           "softmax_cross_entropy: classes " + std::to_string(classes) + " outside [1, " +
               std::to_string(logits.cols()) + "] (the columns of logits " +
               shape_string(logits.shape()) + ")");
}

}  // namespace

double Backend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                      int64_t classes, float grad_scale, Tensor& dlogits) {
  check_cross_entropy(logits, labels, classes, dlogits);
  return do_softmax_cross_entropy(logits, labels, classes, grad_scale, dlogits);
}

double Backend::softmax_cross_entropy(const Tensor& logits, const Tensor& labels,
                                      float grad_scale, Tensor& dlogits) {
  return softmax_cross_entropy(logits, labels, logits.cols(), grad_scale, dlogits);
}

void Backend::fill(Tensor& x, float value) { do_fill(x, value); }

void Backend::copy(const Tensor& src, Tensor& dst) {
  PT_CHECK(src.bytes() == dst.bytes(), "copy: dst " + shape_string(dst.shape()) + " has " +
                                           std::to_string(dst.bytes()) + " bytes, src " +
                                           shape_string(src.shape()) + " has " +
                                           std::to_string(src.bytes()));
  do_copy(src, dst);
}

double Backend::sum_squares(const Tensor& x) { return do_sum_squares(x); }

bool Backend::all_finite(const Tensor& x) { return do_all_finite(x); }

void Backend::scale(Tensor& x, float s) { do_scale(x, s); }

namespace {

void check_slot(const char* kernel, const ScalarBatch& batch, int64_t slot) {
  PT_CHECK(slot >= 0 && slot < batch.size(), std::string(kernel) + ": slot " +
                                                 std::to_string(slot) + " of a batch of " +
                                                 std::to_string(batch.size()));
}

// The host slot of a synchronous backend's batch.
double& host_slot(const char* kernel, ScalarBatch& batch, int64_t slot) {
  auto* host = dynamic_cast<HostScalarBatch*>(&batch);
  PT_CHECK(host != nullptr, std::string(kernel) + ": a batch of another backend");
  return host->at(slot);
}

}  // namespace

std::unique_ptr<ScalarBatch> Backend::make_scalar_batch(int64_t size) {
  PT_CHECK(size >= 0, "make_scalar_batch: size " + std::to_string(size));
  return std::make_unique<HostScalarBatch>(size);
}

void Backend::sum_squares_to(const Tensor& x, ScalarBatch& batch, int64_t slot) {
  check_slot("sum_squares_to", batch, slot);
  do_sum_squares_to(x, batch, slot);
}

void Backend::nonfinite_to(const Tensor& x, ScalarBatch& batch, int64_t slot) {
  check_slot("nonfinite_to", batch, slot);
  do_nonfinite_to(x, batch, slot);
}

void Backend::mse_loss_to(const Tensor& pred, const Tensor& target, float grad_scale,
                          Tensor& dpred, ScalarBatch& batch, int64_t slot) {
  same_numel("mse_loss", "target", target, "pred", pred);
  same_numel("mse_loss", "dpred", dpred, "pred", pred);
  check_slot("mse_loss_to", batch, slot);
  do_mse_loss_to(pred, target, grad_scale, dpred, batch, slot);
}

void Backend::softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels,
                                       int64_t classes, float grad_scale, Tensor& dlogits,
                                       ScalarBatch& batch, int64_t slot) {
  check_cross_entropy(logits, labels, classes, dlogits);
  check_slot("softmax_cross_entropy_to", batch, slot);
  do_softmax_cross_entropy_to(logits, labels, classes, grad_scale, dlogits, batch, slot);
}

void Backend::softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels,
                                       float grad_scale, Tensor& dlogits, ScalarBatch& batch,
                                       int64_t slot) {
  softmax_cross_entropy_to(logits, labels, logits.cols(), grad_scale, dlogits, batch, slot);
}

void Backend::do_sum_squares_to(const Tensor& x, ScalarBatch& batch, int64_t slot) {
  host_slot("sum_squares_to", batch, slot) = do_sum_squares(x);
}

void Backend::do_nonfinite_to(const Tensor& x, ScalarBatch& batch, int64_t slot) {
  host_slot("nonfinite_to", batch, slot) = do_all_finite(x) ? 0.0 : 1.0;
}

void Backend::do_mse_loss_to(const Tensor& pred, const Tensor& target, float grad_scale,
                             Tensor& dpred, ScalarBatch& batch, int64_t slot) {
  host_slot("mse_loss_to", batch, slot) = do_mse_loss(pred, target, grad_scale, dpred);
}

void Backend::do_softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels,
                                          int64_t classes, float grad_scale, Tensor& dlogits,
                                          ScalarBatch& batch, int64_t slot) {
  host_slot("softmax_cross_entropy_to", batch, slot) =
      do_softmax_cross_entropy(logits, labels, classes, grad_scale, dlogits);
}

void Backend::add(const Tensor& a, const Tensor& b, Tensor& out) {
  same_numel("add", "b", b, "a", a);
  same_numel("add", "out", out, "a", a);
  do_add(a, b, out);
}

void Backend::sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                       float weight_decay) {
  same_numel("sgd_step", "g", g, "p", p);
  same_numel("sgd_step", "v", v, "p", p);
  do_sgd_step(p, g, v, lr, momentum, weight_decay);
}

void Backend::adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr, float beta1,
                         float beta2, float eps, float weight_decay, long step) {
  same_numel("adamw_step", "g", g, "p", p);
  same_numel("adamw_step", "m", m, "p", p);
  same_numel("adamw_step", "v", v, "p", p);
  do_adamw_step(p, g, m, v, lr, beta1, beta2, eps, weight_decay, step);
}

}  // namespace pt
