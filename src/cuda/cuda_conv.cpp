// cuda_conv.cpp: the convolution kernel group of the CUDA backend
// (conv_kernels.hpp), called with checked shapes; here only that every
// tensor is on the GPU.
//
// Convolutions run on cuDNN's legacy convolution API (cudnn_cnn.h) with
// NCHW fp32 descriptors over the tensors in place, cross-correlation, and
// the algorithm named, never searched: forward IMPLICIT_PRECOMP_GEMM (or
// IMPLICIT_GEMM where cuDNN does not support it for a shape), backward data
// ALGO_1 and backward filter ALGO_1, which cuDNN documents as deterministic
// (ALGO_0 of both accumulates with atomics), and FMA math (no TF32 tensor cores): every precision mode
// convolves in fp32, as the CPU backend's oneDNN does. Why this API and not
// the frontend's graphs: docs/cuda.md, "Convolutions". Descriptors and the
// chosen forward algorithm are made once per shape and kept; workspaces
// come from the caching allocator. The bias is added by cudnnAddTensor;
// its gradient and the pooling and normalisation kernels are the backend's
// own (kernels_conv.cu). One cuDNN handle, made on first use and bound to
// the compute stream; every call through CUDNN_CHECK.
#include "cuda_conv.hpp"

#include <array>
#include <climits>
#include <map>
#include <memory>
#include <string>

#include "check.hpp"
#include "context.hpp"
#include "cudnn_check.hpp"
#include "device_memory.hpp"
#include "kernels.hpp"

namespace pt::cuda {

namespace {

int as_int(int64_t v, const char* what) {
  PT_CHECK(v >= 0 && v <= INT_MAX, std::string("convolution on cuDNN: ") + what + " " +
                                       std::to_string(v) + " exceeds cuDNN's int");
  return static_cast<int>(v);
}

// The cuDNN descriptors of one convolution shape and geometry.
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;  // (N,Cin,H,W) (N,Cout,OH,OW) (1,Cout,1,1)
  cudnnFilterDescriptor_t w = nullptr;                               // (Cout, Cin, K, K)
  cudnnConvolutionDescriptor_t conv = nullptr;
  cudnnConvolutionFwdAlgo_t fwd_algo = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM;
  size_t fwd_bytes = 0, bwd_data_bytes = 0, bwd_filter_bytes = 0;  // workspaces

  // Unchecked: this may run at exit, after CUDA shut down.
  ~ConvPlan() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (bias) cudnnDestroyTensorDescriptor(bias);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

constexpr cudnnConvolutionBwdDataAlgo_t kBwdDataAlgo = CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
constexpr cudnnConvolutionBwdFilterAlgo_t kBwdFilterAlgo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;

void set_nchw(cudnnTensorDescriptor_t d, const Shape& s) {
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                         as_int(s[0], "N"), as_int(s[1], "C"),
                                         as_int(s[2], "H"), as_int(s[3], "W")));
}

// The group's pooling dimensions of x (N, C, H, W) under g.
kern::PoolDims pool_dims(const Shape& x, Pool2dGeometry g) {
  const Shape y = pool2d_output_shape(x, g);
  return {x[0] * x[1], x[2], x[3], y[2], y[3], g.kernel, g.stride, g.pad};
}

// The CPU backend's normalisation sets (cpu_kernels_conv.cpp), same meaning.
kern::NormSetDims group_norm_sets(const Shape& x, int64_t groups) {
  const int64_t C = x[1], HW = x[2] * x[3], cg = C / groups;
  return {x[0] * groups, groups, cg, HW, C, 1, cg * HW, 0};
}
kern::NormSetDims batch_norm_sets(const Shape& x) {
  const int64_t C = x[1], HW = x[2] * x[3];
  return {C, C, 1, HW, C, x[0], HW, C * HW};
}

class CudaConvKernels final : public ConvKernels {
 public:
  CudaConvKernels() : ctx_(context()), handle_(ctx_.compute) {}

 protected:
  void do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Conv2dGeometry g,
                         Tensor& y) override {
    check_on_gpu({&x, &w, &y}, "conv2d forward");
    if (bias) check_on_gpu(*bias, "conv2d forward bias");
    const ConvPlan& p = plan(x.shape(), w.shape(), g);
    DeviceBuffer workspace = scratch(p.fwd_bytes);
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnConvolutionForward(handle(), &one, p.x, x.f32(), p.w, w.f32(), p.conv,
                                        p.fwd_algo, workspace.get(), p.fwd_bytes, &zero, p.y,
                                        y.f32()));
    if (bias) CUDNN_CHECK(cudnnAddTensor(handle(), &one, p.bias, bias->f32(), &one, p.y, y.f32()));
  }

  void do_conv2d_backward_data(const Tensor& dy, const Tensor& w, Conv2dGeometry g,
                               Tensor& dx) override {
    check_on_gpu({&dy, &w, &dx}, "conv2d backward data");
    const ConvPlan& p = plan(dx.shape(), w.shape(), g);
    DeviceBuffer workspace = scratch(p.bwd_data_bytes);
    const float one = 1.f, zero = 0.f;
    CUDNN_CHECK(cudnnConvolutionBackwardData(handle(), &one, p.w, w.f32(), p.y, dy.f32(), p.conv,
                                             kBwdDataAlgo, workspace.get(), p.bwd_data_bytes,
                                             &zero, p.x, dx.f32()));
  }

  // beta = 1: cuDNN adds the new gradient into dw (dw + sum, rounded once,
  // as the CPU's separate add).
  void do_conv2d_backward_weights(const Tensor& x, const Tensor& dy, Conv2dGeometry g, Tensor& dw,
                                  Tensor* dbias) override {
    check_on_gpu({&x, &dy, &dw}, "conv2d backward weights");
    if (dbias) check_on_gpu(*dbias, "conv2d backward bias");
    const ConvPlan& p = plan(x.shape(), dw.shape(), g);
    DeviceBuffer workspace = scratch(p.bwd_filter_bytes);
    const float one = 1.f;
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle(), &one, p.x, x.f32(), p.y, dy.f32(),
                                               p.conv, kBwdFilterAlgo, workspace.get(),
                                               p.bwd_filter_bytes, &one, p.w, dw.f32()));
    if (dbias)
      kern::add_channel_sums(dy.f32(), dy.dim(0), dy.dim(1), dy.dim(2) * dy.dim(3), dbias->f32(),
                             stream());
  }

  // Max pooling keeps each window's argmax: one I32 per output element.
  int64_t do_pool2d_workspace_numel(const Shape& x, Pool2dGeometry g) override {
    if (g.kind != PoolKind::Max) return 0;
    return shape_numel(pool2d_output_shape(x, g));
  }

  void do_pool2d_forward(const Tensor& x, Pool2dGeometry g, Tensor& y,
                         Tensor* workspace) override {
    check_on_gpu({&x, &y}, "pool2d forward");
    const kern::PoolDims d = pool_dims(x.shape(), g);
    if (g.kind == PoolKind::Avg) return kern::avg_pool_forward(x.f32(), d, y.f32(), stream());
    PT_CHECK(workspace != nullptr, "max pooling forward on the GPU needs its workspace");
    check_on_gpu(*workspace, "max pooling workspace");
    kern::max_pool_forward(x.f32(), d, y.f32(), workspace->i32(), stream());
  }

  void do_pool2d_backward(const Tensor& dy, Pool2dGeometry g, const Tensor* workspace,
                          Tensor& dx) override {
    check_on_gpu({&dy, &dx}, "pool2d backward");
    const kern::PoolDims d = pool_dims(dx.shape(), g);
    if (g.kind == PoolKind::Avg) return kern::avg_pool_backward(dy.f32(), d, dx.f32(), stream());
    PT_CHECK(workspace != nullptr, "max pooling backward on the GPU needs forward's workspace");
    check_on_gpu(*workspace, "max pooling workspace");
    kern::max_pool_backward(dy.f32(), workspace->i32(), d, dx.f32(), stream());
  }

  void do_global_avg_pool_forward(const Tensor& x, Tensor& y) override {
    check_on_gpu({&x, &y}, "global average pooling");
    kern::global_avg_pool_forward(x.f32(), x.dim(0) * x.dim(1), x.dim(2) * x.dim(3), y.f32(),
                                  stream());
  }

  void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    check_on_gpu({&dy, &dx}, "global average pooling backward");
    kern::global_avg_pool_backward(dy.f32(), dx.dim(0) * dx.dim(1), dx.dim(2) * dx.dim(3),
                                   dx.f32(), stream());
  }

  void do_image_to_tokens(const Tensor& x, Tensor& y) override {
    check_on_gpu({&x, &y}, "image to tokens");
    kern::transpose_images(x.f32(), x.dim(0), x.dim(1), x.dim(2) * x.dim(3), y.f32(), stream());
  }

  void do_tokens_to_image(const Tensor& x, Tensor& y) override {
    check_on_gpu({&x, &y}, "tokens to image");
    kern::transpose_images(x.f32(), y.dim(0), y.dim(2) * y.dim(3), y.dim(1), y.f32(), stream());
  }

  void do_batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                               const Tensor& mean, const Tensor& var, float eps, Tensor& y) override {
    check_on_gpu({&x, &gamma, &beta, &mean, &var, &y}, "batch norm inference");
    kern::batch_norm_inference(x.f32(), gamma.f32(), beta.f32(), mean.f32(), var.f32(), eps, x.dim(0),
                               x.dim(1), x.dim(2) * x.dim(3), y.f32(), stream());
  }

  void do_group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                             int64_t groups, float eps, Tensor& y, Tensor& mean,
                             Tensor& rstd) override {
    check_on_gpu({&x, &gamma, &beta, &y, &mean, &rstd}, "group norm");
    kern::norm_forward(x.f32(), gamma.f32(), beta.f32(), eps, group_norm_sets(x.shape(), groups),
                       y.f32(), mean.f32(), rstd.f32(), nullptr, stream());
  }

  void do_group_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                              const Tensor& rstd, int64_t groups, const Tensor& dy, Tensor& dx,
                              Tensor& dgamma, Tensor& dbeta) override {
    check_on_gpu({&x, &gamma, &mean, &rstd, &dy, &dx, &dgamma, &dbeta}, "group norm backward");
    kern::norm_backward(x.f32(), gamma.f32(), mean.f32(), rstd.f32(), dy.f32(),
                        group_norm_sets(x.shape(), groups), x.dim(0), dx.f32(), dgamma.f32(),
                        dbeta.f32(), stream());
  }

  void do_batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                             Tensor& y, Tensor& mean, Tensor& rstd, Tensor* var) override {
    check_on_gpu({&x, &gamma, &beta, &y, &mean, &rstd}, "batch norm");
    if (var) check_on_gpu(*var, "batch norm variance");
    kern::norm_forward(x.f32(), gamma.f32(), beta.f32(), eps, batch_norm_sets(x.shape()), y.f32(),
                       mean.f32(), rstd.f32(), var ? var->f32() : nullptr, stream());
  }

  void do_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                              const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                              Tensor& dbeta) override {
    check_on_gpu({&x, &gamma, &mean, &rstd, &dy, &dx, &dgamma, &dbeta}, "batch norm backward");
    kern::norm_backward(x.f32(), gamma.f32(), mean.f32(), rstd.f32(), dy.f32(),
                        batch_norm_sets(x.shape()), x.dim(0), dx.f32(), dgamma.f32(),
                        dbeta.f32(), stream());
  }

 private:
  using Key = std::array<int64_t, 8>;  // x (N, Cin, H, W), Cout, K, stride, pad

  cudaStream_t stream() const { return ctx_.compute; }

  cudnnHandle_t handle() { return handle_.get(); }

  static DeviceBuffer scratch(size_t bytes) {
    return bytes > 0 ? DeviceBuffer(bytes) : DeviceBuffer();
  }

  // The plan of x (N, Cin, H, W) under w (Cout, Cin, K, K) and g, made on
  // first use.
  const ConvPlan& plan(const Shape& x, const Shape& w, Conv2dGeometry g) {
    const Key key{x[0], x[1], x[2], x[3], w[0], w[2], g.stride, g.pad};
    auto found = plans_.find(key);
    if (found != plans_.end()) return *found->second;
    auto p = std::make_unique<ConvPlan>();
    const Shape y = conv2d_output_shape(x, w, g);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bias));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    set_nchw(p->x, x);
    set_nchw(p->y, y);
    set_nchw(p->bias, {1, w[0], 1, 1});
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                           as_int(w[0], "Cout"), as_int(w[1], "Cin"),
                                           as_int(w[2], "K"), as_int(w[3], "K")));
    const int pad = as_int(g.pad, "padding"), stride = as_int(g.stride, "stride");
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, pad, pad, stride, stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, CUDNN_FMA_MATH));
    check_output_shape(*p, y);
    choose_forward(*p, x, w);
    CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(handle(), p->w, p->y, p->conv, p->x,
                                                             kBwdDataAlgo, &p->bwd_data_bytes));
    CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle(), p->x, p->y, p->conv, p->w, kBwdFilterAlgo, &p->bwd_filter_bytes));
    return *plans_.emplace(key, std::move(p)).first->second;
  }

  // cuDNN's output shape must be the group's (conv2d_output_shape).
  static void check_output_shape(const ConvPlan& p, const Shape& y) {
    int n = 0, c = 0, h = 0, w = 0;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &c, &h, &w));
    const Shape got{n, c, h, w};
    PT_CHECK(got == y, "cuDNN's convolution output " + shape_string(got) + " is not " +
                           shape_string(y));
  }

  // IMPLICIT_PRECOMP_GEMM, or IMPLICIT_GEMM (supported for every shape)
  // where cuDNN does not support the first; both deterministic.
  void choose_forward(ConvPlan& p, const Shape& x, const Shape& w) {
    for (cudnnConvolutionFwdAlgo_t algo : {CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
                                           CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM}) {
      const cudnnStatus_t status = cudnnGetConvolutionForwardWorkspaceSize(
          handle(), p.x, p.w, p.conv, p.y, algo, &p.fwd_bytes);
      if (status == CUDNN_STATUS_SUCCESS) {
        p.fwd_algo = algo;
        return;
      }
      // cuDNN 9 reports "not supported" in sub-codes (3001-3009): the category decides.
      if (CUDNN_STATUS_CATEGORY(status) != CUDNN_STATUS_NOT_SUPPORTED) CUDNN_CHECK(status);
    }
    PT_FAIL("cuDNN supports no implicit-GEMM forward convolution for x " + shape_string(x) +
            " and w " + shape_string(w));
  }

  Context& ctx_;
  CudnnHandle handle_;  // bound to the compute stream; outlives the plans (declared first)
  std::map<Key, std::unique_ptr<ConvPlan>> plans_;
};

}  // namespace

std::unique_ptr<ConvKernels> make_conv_kernels() { return std::make_unique<CudaConvKernels>(); }

}  // namespace pt::cuda
