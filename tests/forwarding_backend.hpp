// forwarding_backend.hpp: a test Backend that computes every core kernel on
// another backend (the CPU backend by default) and provides no kernel group:
// the base of the test backends that change one thing. FakeClockBackend
// (test_trace.cpp) adds a fake clock and forwards the groups too;
// CoreOnlyBackend (test_model_family.cpp) is a backend without the
// transformer kernels; CountingBackend below is the base of the backends of
// test_weight_copies and test_activation_copies that count casts and GEMMs.
#pragma once

#include "pipetrain/tensor/backend.hpp"

namespace pt::test {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& target = cpu_backend()) : target_(target) {}
  Device device() const override { return target_.device(); }
  Precision precision() const override { return target_.precision(); }

 protected:
  void do_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha,
                 float beta) override {
    target_.matmul(a, ta, b, tb, c, alpha, beta);
  }
  void do_round_to(const Tensor& src, Tensor& dst) override { target_.round_to(src, dst); }
  void do_add_bias(Tensor& y, const Tensor& bias) override { target_.add_bias(y, bias); }
  void do_accumulate_bias_grad(const Tensor& dy, Tensor& db) override {
    target_.accumulate_bias_grad(dy, db);
  }
  void do_relu_forward(const Tensor& x, Tensor& y) override { target_.relu_forward(x, y); }
  void do_relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    target_.relu_backward(x, dy, dx);
  }
  void do_gelu_forward(const Tensor& x, Tensor& y) override { target_.gelu_forward(x, y); }
  void do_gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    target_.gelu_backward(x, dy, dx);
  }
  double do_mse_loss(const Tensor& p, const Tensor& t, float s, Tensor& dp) override {
    return target_.mse_loss(p, t, s, dp);
  }
  double do_softmax_cross_entropy(const Tensor& l, const Tensor& y, int64_t classes, float s,
                                  Tensor& dl) override {
    return target_.softmax_cross_entropy(l, y, classes, s, dl);
  }
  void do_fill(Tensor& x, float v) override { target_.fill(x, v); }
  void do_copy(const Tensor& src, Tensor& dst) override { target_.copy(src, dst); }
  double do_sum_squares(const Tensor& x) override { return target_.sum_squares(x); }
  bool do_all_finite(const Tensor& x) override { return target_.all_finite(x); }
  void do_scale(Tensor& x, float s) override { target_.scale(x, s); }
  void do_add(const Tensor& a, const Tensor& b, Tensor& out) override { target_.add(a, b, out); }
  void do_sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float m, float wd) override {
    target_.sgd_step(p, g, v, lr, m, wd);
  }
  void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr, float b1,
                     float b2, float eps, float wd, long step) override {
    target_.adamw_step(p, g, m, v, lr, b1, b2, eps, wd, step);
  }

  Backend& target_;
};

// Forwards everything, the kernel groups included, and shows each cast
// (round_to) and each GEMM to counted_round_to / counted_matmul before it
// runs; a test's subclass counts what it needs from them.
class CountingBackend : public ForwardingBackend {
 public:
  using ForwardingBackend::ForwardingBackend;
  const char* name() const override { return "counting"; }
  KernelGroup* kernel_group(const std::string& group) override {
    return target_.kernel_group(group);
  }

 protected:
  virtual void counted_round_to() = 0;
  // c = op(a) op(b); tb: b is transposed (as in every forward GEMM y = x W^T).
  virtual void counted_matmul(const Tensor& a, const Tensor& b, bool tb, const Tensor& c) = 0;

  void do_round_to(const Tensor& src, Tensor& dst) override {
    counted_round_to();
    target_.round_to(src, dst);
  }
  void do_matmul(const Tensor& a, bool ta, const Tensor& b, bool tb, Tensor& c, float alpha,
                 float beta) override {
    counted_matmul(a, b, tb, c);
    target_.matmul(a, ta, b, tb, c, alpha, beta);
  }
};

}  // namespace pt::test
