// cuda_backend.cpp: the CUDA backend: pt::Backend on one GPU. GEMMs through
// cuBLAS (gemm.cpp) in the chosen precision, everything else in own kernels
// (kernels_*.cu), all on the compute stream of the context; the transformer
// kernel group in cuda_transformer.cpp, the fused attention group (cuDNN) in
// fused_attention.cpp, the convolution group (cuDNN and own kernels) in
// cuda_conv.cpp. Tensors must be Device::CUDA (checked
// here); shapes are checked before a do_ kernel runs (src/tensor/backend.cpp,
// the same checks as the CPU backend's). Compute is timed with events on that
// stream (EventTimer).
#include <cublas_v2.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "check.hpp"
#include "context.hpp"
#include "cuda_conv.hpp"
#include "device_memory.hpp"
#include "cuda_transformer.hpp"
#include "fused_attention.hpp"
#include "gemm_epilogue.hpp"
#include "gemm.hpp"
#include "kernels.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

// The ComputeTimer of the GPU: a pair of events on the compute stream per
// region (made once and reused every step), so a region's time is that of
// its kernels, not of their launches. read() waits for the last region's end
// event, the step's one synchronisation, then reads each pair's elapsed time.
// The compute stream never waits for a communication stream, so that wait
// needs no peer.
class EventTimer final : public ComputeTimer {
 public:
  ~EventTimer() override {
    for (const Pair& p : pairs_) {
      cudaEventDestroy(p.start);
      cudaEventDestroy(p.stop);
    }
  }
  void begin() override {
    PT_CHECK(!open_, "ComputeTimer: begin() with a region open");
    if (used_ == pairs_.size()) pairs_.push_back(new_pair());
    CUDA_CHECK(cudaEventRecord(pairs_[used_].start, context().compute));
    open_ = true;
  }
  void end() override {
    PT_CHECK(open_, "ComputeTimer: end() without begin()");
    CUDA_CHECK(cudaEventRecord(pairs_[used_].stop, context().compute));
    ++used_;
    open_ = false;
  }
  std::vector<double> read() override {
    PT_CHECK(!open_, "ComputeTimer: read() with a region open");
    std::vector<double> seconds;
    if (used_ == 0) return seconds;
    {
      DeadlineScope deadline("the read of the step's compute times (the last F, B or W's kernels)");
      CUDA_CHECK(cudaEventSynchronize(pairs_[used_ - 1].stop));
    }
    for (size_t i = 0; i < used_; ++i) {
      float ms = 0.f;
      CUDA_CHECK(cudaEventElapsedTime(&ms, pairs_[i].start, pairs_[i].stop));
      seconds.push_back(static_cast<double>(ms) * 1e-3);
    }
    used_ = 0;
    return seconds;
  }

 private:
  struct Pair {
    cudaEvent_t start = nullptr, stop = nullptr;
  };
  static Pair new_pair() {
    context();
    Pair p;
    CUDA_CHECK(cudaEventCreate(&p.start));  // default flags: timing enabled
    CUDA_CHECK(cudaEventCreate(&p.stop));
    return p;
  }

  std::vector<Pair> pairs_;  // (regions of the busiest step so far)
  size_t used_ = 0;          // regions recorded since the last read
  bool open_ = false;
};

// A ScalarBatch in device memory: kernels write its slots in compute-stream
// order, and read() copies every slot back at once and waits once.
class DeviceScalarBatch final : public ScalarBatch {
 public:
  DeviceScalarBatch(int64_t size, cudaStream_t stream)
      : ScalarBatch(size),
        slots_(static_cast<size_t>(std::max<int64_t>(size, 1)) * sizeof(double)),
        host_(static_cast<size_t>(size)),
        stream_(stream) {
    if (size > 0) CUDA_CHECK(cudaMemsetAsync(slots_.get(), 0, bytes(), stream_));
  }
  double* slot(int64_t i) { return slots_.as<double>() + i; }
  std::vector<double> read() override {
    if (size() == 0) return {};
    CUDA_CHECK(cudaMemcpyAsync(host_.data(), slots_.get(), bytes(), cudaMemcpyDeviceToHost, stream_));
    {
      DeadlineScope deadline("the read-back of a step's device scalars (losses or sums of squares)");
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    }
    sync_and_check();  // a kernel's invalid input (e.g. a label out of range) is reported here
    return host_;
  }

 private:
  size_t bytes() const { return static_cast<size_t>(size()) * sizeof(double); }
  DeviceBuffer slots_;        // (size) doubles on the device
  std::vector<double> host_;  // (size)
  cudaStream_t stream_;
};

DeviceScalarBatch& device_batch(ScalarBatch& batch) {
  auto* b = dynamic_cast<DeviceScalarBatch*>(&batch);
  PT_CHECK(b != nullptr, "a ScalarBatch of another backend passed to the CUDA backend");
  return *b;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& o)
      : precision_(o.precision), ctx_(context()),
        transformer_(make_transformer_kernels(o.precision)),
        fused_attention_(make_fused_attention(o.precision)),
        conv_(make_conv_kernels()) {}
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::CUDA; }
  Precision precision() const override { return precision_; }
  void synchronize() override { cuda::synchronize(); }
  std::unique_ptr<ComputeTimer> make_timer() override { return std::make_unique<EventTimer>(); }
  std::unique_ptr<ScalarBatch> make_scalar_batch(int64_t size) override {
    PT_CHECK(size >= 0, "make_scalar_batch: size " + std::to_string(size));
    return std::make_unique<DeviceScalarBatch>(size, stream());
  }
  void release_cached_memory() override { release_cached_device_memory(); }
  void trim_cached_memory() override { trim_cached_device_memory(); }
  // The fused attention group only where cuDNN's SDPA runs it (bf16, sm_80+).
  KernelGroup* kernel_group(const std::string& group) override {
    if (group == TransformerKernels::kGroup) return transformer_.get();
    if (group == FusedAttentionKernels::kGroup) return fused_attention_.get();
    if (group == ConvKernels::kGroup) return conv_.get();
    return nullptr;
  }

 protected:
  void do_matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
                 float alpha, float beta) override {
    check_on_gpu(a, "matmul a");
    check_on_gpu(b, "matmul b");
    check_on_gpu(c, "matmul c");
    Gemm g;
    g.ta = trans_a;
    g.tb = trans_b;
    g.m = trans_a ? a.cols() : a.rows();
    g.k = trans_a ? a.rows() : a.cols();
    g.n = trans_b ? b.rows() : b.cols();
    DeviceBuffer a_low, b_low;
    g.a = as_operand(a, precision_, a_low);
    g.b = as_operand(b, precision_, b_low);
    g.lda = a.cols();
    g.ldb = b.cols();
    g.c = c.f32();
    g.ldc = c.cols();
    g.alpha = alpha;
    g.beta = beta;
    run_gemm(g, precision_);
  }

  // cuBLASLt with the bias (and GELU) in the GEMM's epilogue where it
  // applies (gemm_epilogue.hpp); otherwise the three kernels in turn.
  void do_linear_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y,
                         Tensor* gelu) override {
    check_on_gpu(x, "linear_forward x");
    check_on_gpu(w, "linear_forward w");
    check_on_gpu(y, "linear_forward y");
    if (bias) check_on_gpu(*bias, "linear_forward bias");
    if (gelu) check_on_gpu(*gelu, "linear_forward gelu");
    LinearEpilogue e;
    e.rows = x.rows();
    e.in = x.cols();
    e.out = w.rows();
    // Operands used in place (fp32, or a weight's low-precision copy) keep
    // their pointers, whose alignment counts; null: a cast copy to be made.
    e.x = in_place_operand(x);
    e.w = in_place_operand(w);
    e.bias = bias ? bias->f32() : nullptr;
    e.y = y.f32();
    e.gelu = gelu ? gelu->f32() : nullptr;
    DeviceBuffer x_low, w_low;  // bf16 / fp16 copies, until the GEMM is queued
    const auto make_operands = [&](LinearEpilogue& fused) {
      fused.x = as_operand(x, precision_, x_low);
      fused.w = as_operand(w, precision_, w_low);
    };
    if (!run_linear_epilogue(e, precision_, make_operands))
      Backend::do_linear_forward(x, w, bias, y, gelu);
  }

  // With a GELU to differentiate, cuBLASLt's DGELU epilogue where it
  // applies (gemm_epilogue.hpp); otherwise the GEMM and GELU's backward.
  void do_linear_backward_input(const Tensor& dy, const Tensor& w, Tensor& dx,
                                const Tensor* gelu_input) override {
    if (!gelu_input) {
      Backend::do_linear_backward_input(dy, w, dx, nullptr);
      return;
    }
    check_on_gpu({&dy, &w, &dx, gelu_input}, "linear_backward_input");
    GeluInputGradEpilogue e;
    e.rows = dy.rows();
    e.in = w.cols();
    e.out = w.rows();
    e.dy = in_place_operand(dy);
    e.w = in_place_operand(w);
    e.gelu_input = gelu_input->f32();
    e.dx = dx.f32();
    DeviceBuffer dy_low, w_low;  // bf16 / fp16 copies, until the GEMM is queued
    const auto make_operands = [&](GeluInputGradEpilogue& fused) {
      fused.dy = as_operand(dy, precision_, dy_low);
      fused.w = as_operand(w, precision_, w_low);
    };
    if (!run_gelu_input_grad_epilogue(e, precision_, make_operands))
      Backend::do_linear_backward_input(dy, w, dx, gelu_input);
  }

  // x as a GEMM operand before any cast: its own storage when it is used as
  // it is (fp32 and tf32, or already in the GEMM's low precision), else a
  // null pointer of the type its cast copy will have.
  Operand in_place_operand(const Tensor& t) const {
    const cudaDataType_t type = operand_type(precision_);
    const bool as_is = type == CUDA_R_32F || t.dtype() != DType::F32;
    return {as_is ? t.raw() : nullptr, type};
  }

  // The format is dst's (BF16 or F16): the CPU's round_bits, bit for bit.
  void do_round_to(const Tensor& src, Tensor& dst) override {
    check_on_gpu(src, "round_to src");
    check_on_gpu(dst, "round_to dst");
    kern::cast_to_half(src.f32(), dst.raw(), src.numel(), dst.dtype() == DType::BF16, stream());
  }

  void do_add_bias(Tensor& y, const Tensor& bias) override {
    check_on_gpu(y, "add_bias y");
    check_on_gpu(bias, "add_bias bias");
    kern::add_bias(y.f32(), bias.f32(), y.rows(), y.cols(), stream());
  }

  // dbias (n) += dy^T ones: one deterministic cuBLAS GEMV over the rows.
  void do_accumulate_bias_grad(const Tensor& dy, Tensor& dbias) override {
    check_on_gpu(dy, "bias grad dy");
    check_on_gpu(dbias, "bias grad");
    const int64_t rows = dy.rows(), n = dy.cols();
    if (rows == 0 || n == 0) return;
    const float one = 1.f;
    CUBLAS_CHECK(cublasSgemv(ctx_.cublas, CUBLAS_OP_N, static_cast<int>(n),
                             static_cast<int>(rows), &one, dy.f32(), static_cast<int>(n),
                             ones(rows), 1, &one, dbias.f32(), 1));
  }

  void do_relu_forward(const Tensor& x, Tensor& y) override {
    check_on_gpu({&x, &y}, "relu");
    kern::relu_forward(x.f32(), y.f32(), x.numel(), stream());
  }
  void do_relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    check_on_gpu({&x, &dy, &dx}, "relu backward");
    kern::relu_backward(x.f32(), dy.f32(), dx.f32(), x.numel(), stream());
  }
  void do_gelu_forward(const Tensor& x, Tensor& y) override {
    check_on_gpu({&x, &y}, "gelu");
    kern::gelu_forward(x.f32(), y.f32(), x.numel(), stream());
  }
  void do_gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    check_on_gpu({&x, &dy, &dx}, "gelu backward");
    kern::gelu_backward(x.f32(), dy.f32(), dx.f32(), x.numel(), stream());
  }

  double do_mse_loss(const Tensor& pred, const Tensor& target, float grad_scale,
                     Tensor& dpred) override {
    check_on_gpu({&pred, &target, &dpred}, "mse");
    return kern::reduce_mse(pred.f32(), target.f32(), grad_scale, dpred.f32(), pred.numel(),
                            stream());
  }

  double do_softmax_cross_entropy(const Tensor& logits, const Tensor& labels, int64_t classes,
                                  float grad_scale, Tensor& dlogits) override {
    check_on_gpu(logits, "logits");
    check_on_gpu(labels, "labels");
    check_on_gpu(dlogits, "dlogits");
    const int64_t rows = logits.rows();
    DeviceBuffer row_loss(static_cast<size_t>(rows) * sizeof(double));
    kern::softmax_xent(logits.f32(), labels.i32(), grad_scale, dlogits.f32(),
                       row_loss.as<double>(), rows, classes, logits.cols(), stream());
    return kern::reduce_sum(row_loss.as<double>(), rows, stream());
  }

  void do_fill(Tensor& x, float value) override {
    check_on_gpu(x, "fill");
    kern::fill(x.f32(), value, x.numel(), stream());
  }

  void do_copy(const Tensor& src, Tensor& dst) override {
    if (src.device() == Device::CUDA && dst.device() == Device::CUDA) {
      if (src.bytes() > 0)
        CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice,
                                   stream()));
      return;
    }
    copy_tensor(src, dst);  // across devices: waits for the copy
  }

  double do_sum_squares(const Tensor& x) override {
    check_on_gpu(x, "sum_squares");
    return kern::reduce_sum_squares(x.f32(), x.numel(), stream());
  }

  void do_sum_squares_to(const Tensor& x, ScalarBatch& batch, int64_t slot) override {
    check_on_gpu(x, "sum_squares");
    kern::reduce_sum_squares_into(x.f32(), x.numel(), device_batch(batch).slot(slot), stream());
  }

  void do_nonfinite_to(const Tensor& x, ScalarBatch& batch, int64_t slot) override {
    check_on_gpu(x, "nonfinite");
    kern::reduce_count_nonfinite_into(x.f32(), x.numel(), device_batch(batch).slot(slot), stream());
  }

  void do_mse_loss_to(const Tensor& pred, const Tensor& target, float grad_scale, Tensor& dpred,
                      ScalarBatch& batch, int64_t slot) override {
    check_on_gpu({&pred, &target, &dpred}, "mse");
    kern::reduce_mse_into(pred.f32(), target.f32(), grad_scale, dpred.f32(), pred.numel(),
                          device_batch(batch).slot(slot), stream());
  }

  void do_softmax_cross_entropy_to(const Tensor& logits, const Tensor& labels, int64_t classes,
                                   float grad_scale, Tensor& dlogits, ScalarBatch& batch,
                                   int64_t slot) override {
    check_on_gpu(logits, "logits");
    check_on_gpu(labels, "labels");
    check_on_gpu(dlogits, "dlogits");
    const int64_t rows = logits.rows();
    DeviceBuffer row_loss(static_cast<size_t>(rows) * sizeof(double));  // freed in stream order
    kern::softmax_xent(logits.f32(), labels.i32(), grad_scale, dlogits.f32(),
                       row_loss.as<double>(), rows, classes, logits.cols(), stream());
    kern::reduce_sum_into(row_loss.as<double>(), rows, device_batch(batch).slot(slot), stream());
  }

  bool do_all_finite(const Tensor& x) override {
    check_on_gpu(x, "all_finite");
    return kern::reduce_count_nonfinite(x.f32(), x.numel(), stream()) == 0;
  }

  // On the device (kernels_digest.cu), so a message is not copied to the
  // host to be checked; a host tensor is digested by the host.
  PayloadDigest do_payload_digest(const Tensor& x) override {
    if (x.device() == Device::CPU) return Backend::do_payload_digest(x);
    PayloadDigest d;
    kern::payload_digest(x.raw(), static_cast<int64_t>(x.bytes()),
                         static_cast<int>(float_kind_of(x.dtype())), &d.checksum, &d.nonfinite,
                         stream());
    return d;
  }

  void do_scale(Tensor& x, float s) override {
    check_on_gpu(x, "scale");
    kern::scale(x.f32(), s, x.numel(), stream());
  }

  void do_add(const Tensor& a, const Tensor& b, Tensor& out) override {
    check_on_gpu({&a, &b, &out}, "add");
    kern::add(a.f32(), b.f32(), out.f32(), a.numel(), stream());
  }

  void do_sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                   float weight_decay) override {
    check_on_gpu({&p, &g, &v}, "sgd");
    kern::sgd_step(p.f32(), g.f32(), v.f32(), lr, momentum, weight_decay, p.numel(), stream());
  }

  // The scalar factors are computed here exactly as on the CPU backend.
  void do_adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr, float beta1,
                     float beta2, float eps, float weight_decay, long step) override {
    check_on_gpu({&p, &g, &m, &v}, "adamw");
    const float bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), step));
    const float bias2_sqrt =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), step)));
    const float step_size = lr / bias1;
    const float decay = 1.f - lr * weight_decay;
    kern::adamw_step(p.f32(), g.f32(), m.f32(), v.f32(), beta1, beta2, eps, step_size, decay,
                     bias2_sqrt, p.numel(), stream());
  }

 private:
  cudaStream_t stream() const { return ctx_.compute; }

  // A device vector of at least `rows` ones (grown on demand).
  const float* ones(int64_t rows) {
    if (ones_.bytes() < static_cast<size_t>(rows) * sizeof(float)) {
      ones_ = DeviceBuffer(static_cast<size_t>(rows) * sizeof(float));
      kern::fill(ones_.as<float>(), 1.f, rows, stream());
    }
    return ones_.as<float>();
  }

  Precision precision_;
  Context& ctx_;
  DeviceBuffer ones_;
  std::unique_ptr<TransformerKernels> transformer_;  // cuda_transformer.cpp
  std::unique_ptr<FusedAttentionKernels> fused_attention_;  // fused_attention.cpp; null: none
  std::unique_ptr<ConvKernels> conv_;  // cuda_conv.cpp
};

}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

}  // namespace pt::cuda
