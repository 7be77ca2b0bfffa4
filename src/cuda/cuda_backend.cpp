// cuda_backend.cpp: the CUDA backend: pt::Backend on one GPU. GEMMs through
// cuBLAS (gemm.cpp) in the chosen precision, everything else in own kernels
// (kernels_*.cu), all on the compute stream of the context. Tensors must be
// Device::CUDA; shape checks are those of the CPU backend. Compute is timed
// with events on that stream (EventTimer).
#include <cublas_v2.h>

#include <cmath>
#include <memory>
#include <vector>

#include "attention.hpp"
#include "check.hpp"
#include "context.hpp"
#include "gemm.hpp"
#include "kernels.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

void on_gpu(const Tensor& t, const char* what) {
  PT_CHECK(t.device() == Device::CUDA,
           std::string("CUDA backend: ") + what + " " + shape_string(t.shape()) +
               " is not on the GPU (move it with Tensor::to(Device::CUDA))");
}

void same_numel(const Tensor& a, const Tensor& b, const char* what) {
  PT_CHECK(a.numel() == b.numel(), std::string(what) + ": " + shape_string(a.shape()) +
                                       " vs " + shape_string(b.shape()));
}

void check_numel(const Tensor& t, int64_t n, const char* what) {
  PT_CHECK(t.numel() == n, std::string(what) + ": " + shape_string(t.shape()) + " has " +
                               std::to_string(t.numel()) + " elements, expected " +
                               std::to_string(n));
}

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
    CUDA_CHECK(cudaEventSynchronize(pairs_[used_ - 1].stop));
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

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& o) : precision_(o.precision), ctx_(context()) {}
  const char* name() const override { return "cuda"; }
  Device device() const override { return Device::CUDA; }
  void synchronize() override { cuda::synchronize(); }
  std::unique_ptr<ComputeTimer> make_timer() override { return std::make_unique<EventTimer>(); }
  void release_cached_memory() override { release_cached_device_memory(); }
  void trim_cached_memory() override { trim_cached_device_memory(); }

  void matmul(const Tensor& a, bool trans_a, const Tensor& b, bool trans_b, Tensor& c,
              float alpha, float beta) override {
    on_gpu(a, "matmul a");
    on_gpu(b, "matmul b");
    on_gpu(c, "matmul c");
    Gemm g;
    g.ta = trans_a;
    g.tb = trans_b;
    g.m = trans_a ? a.cols() : a.rows();
    g.k = trans_a ? a.rows() : a.cols();
    const int64_t kb = trans_b ? b.cols() : b.rows();
    g.n = trans_b ? b.rows() : b.cols();
    PT_CHECK(g.k == kb && c.rows() == g.m && c.cols() == g.n,
             "matmul shapes " + shape_string(a.shape()) + (trans_a ? "^T" : "") + " x " +
                 shape_string(b.shape()) + (trans_b ? "^T" : "") + " -> " +
                 shape_string(c.shape()));
    DeviceBuffer a_low, b_low;
    g.a = as_operand(a.f32(), a.numel(), precision_, a_low);
    g.b = as_operand(b.f32(), b.numel(), precision_, b_low);
    g.lda = a.cols();
    g.ldb = b.cols();
    g.c = c.f32();
    g.ldc = c.cols();
    g.alpha = alpha;
    g.beta = beta;
    run_gemm(g, precision_);
  }

  void add_bias(Tensor& y, const Tensor& bias) override {
    on_gpu(y, "add_bias y");
    on_gpu(bias, "add_bias bias");
    PT_CHECK(bias.numel() == y.cols(), "bias size");
    kern::add_bias(y.f32(), bias.f32(), y.rows(), y.cols(), stream());
  }

  // dbias (n) += dy^T ones: one deterministic cuBLAS GEMV over the rows.
  void accumulate_bias_grad(const Tensor& dy, Tensor& dbias) override {
    on_gpu(dy, "bias grad dy");
    on_gpu(dbias, "bias grad");
    const int64_t rows = dy.rows(), n = dy.cols();
    PT_CHECK(dbias.numel() == n, "bias grad size");
    if (rows == 0 || n == 0) return;
    const float one = 1.f;
    CUBLAS_CHECK(cublasSgemv(ctx_.cublas, CUBLAS_OP_N, static_cast<int>(n),
                             static_cast<int>(rows), &one, dy.f32(), static_cast<int>(n),
                             ones(rows), 1, &one, dbias.f32(), 1));
  }

  void relu_forward(const Tensor& x, Tensor& y) override {
    elementwise_args(x, y, "relu");
    kern::relu_forward(x.f32(), y.f32(), x.numel(), stream());
  }
  void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    elementwise_args(x, dy, "relu backward");
    elementwise_args(x, dx, "relu backward");
    kern::relu_backward(x.f32(), dy.f32(), dx.f32(), x.numel(), stream());
  }
  void gelu_forward(const Tensor& x, Tensor& y) override {
    elementwise_args(x, y, "gelu");
    kern::gelu_forward(x.f32(), y.f32(), x.numel(), stream());
  }
  void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    elementwise_args(x, dy, "gelu backward");
    elementwise_args(x, dx, "gelu backward");
    kern::gelu_backward(x.f32(), dy.f32(), dx.f32(), x.numel(), stream());
  }

  double mse_loss(const Tensor& pred, const Tensor& target, float grad_scale,
                  Tensor& dpred) override {
    elementwise_args(pred, target, "mse");
    elementwise_args(pred, dpred, "mse");
    return kern::reduce_mse(pred.f32(), target.f32(), grad_scale, dpred.f32(), pred.numel(),
                            stream());
  }

  double softmax_cross_entropy(const Tensor& logits, const Tensor& labels, float grad_scale,
                               Tensor& dlogits) override {
    on_gpu(logits, "logits");
    on_gpu(labels, "labels");
    on_gpu(dlogits, "dlogits");
    const int64_t rows = logits.rows(), classes = logits.cols();
    PT_CHECK(labels.numel() == rows, "labels size");
    same_numel(logits, dlogits, "cross-entropy");
    DeviceBuffer row_loss(static_cast<size_t>(rows) * sizeof(double));
    kern::softmax_xent(logits.f32(), labels.i32(), grad_scale, dlogits.f32(),
                       row_loss.as<double>(), rows, classes, stream());
    return kern::reduce_sum(row_loss.as<double>(), rows, stream());
  }

  void fill(Tensor& x, float value) override {
    on_gpu(x, "fill");
    kern::fill(x.f32(), value, x.numel(), stream());
  }

  void copy(const Tensor& src, Tensor& dst) override {
    PT_CHECK(src.bytes() == dst.bytes(), "copy size");
    if (src.device() == Device::CUDA && dst.device() == Device::CUDA) {
      if (src.bytes() > 0)
        CUDA_CHECK(cudaMemcpyAsync(dst.raw(), src.raw(), src.bytes(), cudaMemcpyDeviceToDevice,
                                   stream()));
      return;
    }
    copy_tensor(src, dst);  // across devices: waits for the copy
  }

  double sum_squares(const Tensor& x) override {
    on_gpu(x, "sum_squares");
    return kern::reduce_sum_squares(x.f32(), x.numel(), stream());
  }

  bool all_finite(const Tensor& x) override {
    on_gpu(x, "all_finite");
    return kern::reduce_count_nonfinite(x.f32(), x.numel(), stream()) == 0;
  }

  void scale(Tensor& x, float s) override {
    on_gpu(x, "scale");
    kern::scale(x.f32(), s, x.numel(), stream());
  }

  void add(const Tensor& a, const Tensor& b, Tensor& out) override {
    elementwise_args(a, b, "add b");
    elementwise_args(a, out, "add out");
    kern::add(a.f32(), b.f32(), out.f32(), a.numel(), stream());
  }

  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor& y, Tensor& mean, Tensor& rstd) override {
    const Tensor& cy = y;
    const Tensor& cm = mean;
    const Tensor& cr = rstd;
    for (const Tensor* t : {&x, &gamma, &beta, &cy, &cm, &cr}) on_gpu(*t, "layernorm");
    const int64_t rows = x.rows(), C = x.cols();  // x: (rows, C)
    check_numel(gamma, C, "layernorm gamma");
    check_numel(beta, C, "layernorm beta");
    check_numel(y, rows * C, "layernorm y");
    check_numel(mean, rows, "layernorm mean");
    check_numel(rstd, rows, "layernorm rstd");
    kern::layernorm_forward(x.f32(), gamma.f32(), beta.f32(), eps, y.f32(), mean.f32(),
                            rstd.f32(), rows, C, stream());
  }

  void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                          Tensor& dbeta) override {
    const Tensor& cdx = dx;
    const Tensor& cdg = dgamma;
    const Tensor& cdb = dbeta;
    for (const Tensor* t : {&x, &gamma, &mean, &rstd, &dy, &cdx, &cdg, &cdb})
      on_gpu(*t, "layernorm backward");
    const int64_t rows = x.rows(), C = x.cols();  // x, dy, dx: (rows, C)
    check_numel(dy, rows * C, "layernorm dy");
    check_numel(dx, rows * C, "layernorm dx");
    check_numel(gamma, C, "layernorm gamma");
    check_numel(mean, rows, "layernorm mean");
    check_numel(rstd, rows, "layernorm rstd");
    check_numel(dgamma, C, "layernorm dgamma");
    check_numel(dbeta, C, "layernorm dbeta");
    kern::layernorm_backward(x.f32(), gamma.f32(), mean.f32(), rstd.f32(), dy.f32(), dx.f32(),
                             dgamma.f32(), dbeta.f32(), rows, C, stream());
  }

  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                         Tensor& y) override {
    const Embedding e = embedding_dims(tokens, wte, wpe, y, "embedding y");
    kern::embedding_forward(tokens.i32(), wte.f32(), wpe.f32(), y.f32(), e.mb, e.T, e.V, e.C,
                            ctx_.error_word, stream());
  }

  void embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte,
                          Tensor& dwpe) override {
    const Embedding e = embedding_dims(tokens, dwte, dwpe, dy, "embedding dy");
    kern::embedding_backward(tokens.i32(), dy.f32(), dwte.f32(), dwpe.f32(), e.mb, e.T, e.V,
                             e.C, ctx_.error_word, stream());
  }

  void attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs) override {
    cuda::attention_probs(qkv, heads, probs, precision_);
  }
  void attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads,
                        Tensor& y) override {
    cuda::attention_values(qkv, probs, heads, y, precision_);
  }
  void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                          int64_t heads, Tensor& dqkv) override {
    cuda::attention_backward(qkv, probs, dy, heads, dqkv, precision_);
  }

  void sgd_step(Tensor& p, const Tensor& g, Tensor& v, float lr, float momentum,
                float weight_decay) override {
    elementwise_args(p, g, "sgd");
    elementwise_args(p, v, "sgd");
    kern::sgd_step(p.f32(), g.f32(), v.f32(), lr, momentum, weight_decay, p.numel(), stream());
  }

  // The scalar factors are computed here exactly as on the CPU backend.
  void adamw_step(Tensor& p, const Tensor& g, Tensor& m, Tensor& v, float lr, float beta1,
                  float beta2, float eps, float weight_decay, long step) override {
    elementwise_args(p, g, "adamw");
    elementwise_args(p, m, "adamw");
    elementwise_args(p, v, "adamw");
    const float bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), step));
    const float bias2_sqrt =
        static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(beta2), step)));
    const float step_size = lr / bias1;
    const float decay = 1.f - lr * weight_decay;
    kern::adamw_step(p.f32(), g.f32(), m.f32(), v.f32(), beta1, beta2, eps, step_size, decay,
                     bias2_sqrt, p.numel(), stream());
  }

 private:
  struct Embedding {
    int64_t mb, T, V, C;
  };

  cudaStream_t stream() const { return ctx_.compute; }

  static void elementwise_args(const Tensor& a, const Tensor& b, const char* what) {
    on_gpu(a, what);
    on_gpu(b, what);
    same_numel(a, b, what);
  }

  // tokens (mb, T) i32; table (V, C); pos (Tmax, C); act (mb, T, C).
  static Embedding embedding_dims(const Tensor& tokens, const Tensor& table, const Tensor& pos,
                                  const Tensor& act, const char* what) {
    for (const Tensor* t : {&tokens, &table, &pos, &act}) on_gpu(*t, "embedding");
    PT_CHECK(tokens.dtype() == DType::I32 && tokens.ndim() == 2,
             "embedding tokens must be (mb, T) i32: " + shape_string(tokens.shape()));
    Embedding e{tokens.dim(0), tokens.dim(1), table.rows(), table.cols()};
    PT_CHECK(pos.cols() == e.C && e.T <= pos.rows(), "embedding wpe " + shape_string(pos.shape()));
    check_numel(act, e.mb * e.T * e.C, what);
    return e;
  }

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
};

}  // namespace

std::unique_ptr<Backend> make_backend(const BackendOptions& options) {
  return std::make_unique<CudaBackend>(options);
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::FP32;
  if (name == "tf32") return Precision::TF32;
  if (name == "bf16") return Precision::BF16;
  if (name == "fp16") return Precision::FP16;
  throw InputError("unknown precision '" + name + "': expected fp32, tf32, bf16 or fp16");
}

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
    case Precision::FP16: return "fp16";
  }
  return "?";
}

}  // namespace pt::cuda
