// conv_kernels.hpp: the kernel group of the convolutional layers: 2-D
// convolution, max / average / global average pooling, group normalisation
// (layer normalisation over (C, H, W) is groups = 1) and batch normalisation
// with the statistics of the micro-batch at hand.
//
// A KernelGroup (backend.hpp): a backend that provides it returns it from
// kernel_group("conv"). The CPU backend does (src/tensor/cpu_kernels_conv.cpp,
// oneDNN's convolution and pooling primitives, normalisations as loops), and
// so does the CUDA backend (src/cuda/cuda_conv.cpp: cuDNN's convolutions,
// own pooling and normalisation kernels); on a backend without it a
// convolutional layer fails with require_kernels' one message naming the
// backend. As in Backend, each kernel
// is a public non-virtual function that checks the shapes
// (src/tensor/conv_kernels.cpp) and calls the backend's protected do_<kernel>.
// Every kernel is deterministic: same inputs and thread count, same bits.
//
// Layout: images are NCHW, f32, dense: (N, C, H, W) with W fastest (why:
// docs/cnn.md). Weights are (Cout, Cin, K, K). Kernels that "add" into a
// gradient accumulate over micro-batches, as Linear's weight gradient does.
#pragma once

#include <cstdint>

#include "pipetrain/tensor/backend.hpp"

namespace pt {

// A square convolution window: K from the weight's shape, the same stride
// and zero padding on both axes and both sides.
struct Conv2dGeometry {
  int64_t stride = 1;
  int64_t pad = 0;
};

enum class PoolKind { Max, Avg };

// A square pooling window. Avg divides by the window's elements inside the
// image (padding excluded), so a window over the border is a true mean.
struct Pool2dGeometry {
  PoolKind kind = PoolKind::Max;
  int64_t kernel = 2;
  int64_t stride = 2;
  int64_t pad = 0;
};

// (H + 2 pad - K) / stride + 1, or an Error naming `what` when the window
// does not fit (K > H + 2 pad) or an argument is not positive.
int64_t window_output_size(int64_t size, int64_t kernel, int64_t stride, int64_t pad,
                           const char* what);
// (N, Cout, OH, OW) of x (N, Cin, H, W) under w (Cout, Cin, K, K).
Shape conv2d_output_shape(const Shape& x, const Shape& w, Conv2dGeometry g);
// (N, C, OH, OW) of x (N, C, H, W).
Shape pool2d_output_shape(const Shape& x, Pool2dGeometry g);

class ConvKernels : public KernelGroup {
 public:
  static constexpr const char* kGroup = "conv";

  // y (N, Cout, OH, OW) = x (N, Cin, H, W) conv w (Cout, Cin, K, K) + bias
  // (Cout) when given (a cross-correlation, as every framework's "conv").
  void conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias, Conv2dGeometry g,
                      Tensor& y);
  // dx (N, Cin, H, W) from dy (N, Cout, OH, OW) and w; overwritten.
  void conv2d_backward_data(const Tensor& dy, const Tensor& w, Conv2dGeometry g, Tensor& dx);
  // ADDS the weight gradient of x and dy into dw (Cout, Cin, K, K), and the
  // bias gradient (dy summed over N, OH, OW) into dbias (Cout) when given.
  void conv2d_backward_weights(const Tensor& x, const Tensor& dy, Conv2dGeometry g, Tensor& dw,
                               Tensor* dbias);

  // The elements of the I32 tensor that max pooling keeps between forward
  // and backward (where each window's maximum was; the layout is the
  // backend's own), 0 for average pooling. x: (N, C, H, W).
  int64_t pool2d_workspace_numel(const Shape& x, Pool2dGeometry g);
  // y (N, C, OH, OW) = pooling of x (N, C, H, W); max pooling writes
  // `workspace` (pool2d_workspace_numel elements, I32), average ignores it.
  void pool2d_forward(const Tensor& x, Pool2dGeometry g, Tensor& y, Tensor* workspace);
  // dx (N, C, H, W), overwritten, from dy (N, C, OH, OW) (and forward's
  // workspace for max pooling: each window's gradient goes to its maximum).
  void pool2d_backward(const Tensor& dy, Pool2dGeometry g, const Tensor* workspace, Tensor& dx);
  // y (N, C) = mean of x (N, C, H, W) over H, W; dx (N, C, H, W) = dy / (H W).
  void global_avg_pool_forward(const Tensor& x, Tensor& y);
  void global_avg_pool_backward(const Tensor& dy, Tensor& dx);

  // The pixels of an image as a sequence of tokens (the hybrid family's
  // patch tokens): y (N, H W, C) holds x (N, C, H, W) transposed, pixel
  // p = h W + w being token p of its C channels. tokens_to_image is the
  // inverse, from x (N, H W, C) to y (N, C, H, W). Exact copies.
  void image_to_tokens(const Tensor& x, Tensor& y);
  void tokens_to_image(const Tensor& x, Tensor& y);

  // Group normalisation: the C channels of each image fall into `groups`
  // groups of C / groups consecutive channels; each (image, group) is
  // normalised over its channels and pixels with its own mean and biased
  // variance, then y = xhat * gamma[c] + beta[c]. x, y: (N, C, H, W);
  // gamma, beta: (C); writes mean, rstd (N, groups) for the backward.
  // groups = 1 is layer normalisation over (C, H, W) with per-channel affine.
  void group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                          int64_t groups, float eps, Tensor& y, Tensor& mean, Tensor& rstd);
  // Writes dx (N, C, H, W); ADDS into dgamma, dbeta (C).
  void group_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, int64_t groups, const Tensor& dy, Tensor& dx,
                           Tensor& dgamma, Tensor& dbeta);
  // Batch normalisation with the statistics of this micro-batch: channel c
  // is normalised over (N, H, W). Writes y, mean (C), rstd (C) and, when
  // given, var (C), the biased variance, for the running statistics.
  void batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                          Tensor& y, Tensor& mean, Tensor& rstd, Tensor* var);
  // Batch normalisation with given statistics (evaluation with running
  // statistics): y = (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c],
  // each output evaluated in double and rounded once. x, y: (N, C, H, W);
  // gamma, beta, mean, var: (C).
  void batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                            const Tensor& mean, const Tensor& var, float eps, Tensor& y);
  // Writes dx (N, C, H, W); ADDS into dgamma, dbeta (C).
  void batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                           const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                           Tensor& dbeta);

 protected:
  // The kernels above, called with arguments whose shapes were checked.
  virtual void do_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                 Conv2dGeometry g, Tensor& y) = 0;
  virtual void do_conv2d_backward_data(const Tensor& dy, const Tensor& w, Conv2dGeometry g,
                                       Tensor& dx) = 0;
  virtual void do_conv2d_backward_weights(const Tensor& x, const Tensor& dy, Conv2dGeometry g,
                                          Tensor& dw, Tensor* dbias) = 0;
  virtual int64_t do_pool2d_workspace_numel(const Shape& x, Pool2dGeometry g) = 0;
  virtual void do_pool2d_forward(const Tensor& x, Pool2dGeometry g, Tensor& y,
                                 Tensor* workspace) = 0;
  virtual void do_pool2d_backward(const Tensor& dy, Pool2dGeometry g, const Tensor* workspace,
                                  Tensor& dx) = 0;
  virtual void do_global_avg_pool_forward(const Tensor& x, Tensor& y) = 0;
  virtual void do_global_avg_pool_backward(const Tensor& dy, Tensor& dx) = 0;
  virtual void do_image_to_tokens(const Tensor& x, Tensor& y) = 0;
  virtual void do_tokens_to_image(const Tensor& x, Tensor& y) = 0;
  virtual void do_group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     int64_t groups, float eps, Tensor& y, Tensor& mean,
                                     Tensor& rstd) = 0;
  virtual void do_group_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, int64_t groups, const Tensor& dy,
                                      Tensor& dx, Tensor& dgamma, Tensor& dbeta) = 0;
  virtual void do_batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, Tensor& y, Tensor& mean, Tensor& rstd,
                                     Tensor* var) = 0;
  virtual void do_batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& mean, const Tensor& var, float eps,
                                       Tensor& y) = 0;
  virtual void do_batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dy, Tensor& dx,
                                      Tensor& dgamma, Tensor& dbeta) = 0;
};

}  // namespace pt
