// conv_kernels.cpp: the argument checks of the convolution kernel group,
// written once for every backend that provides it: each public kernel checks
// its shapes here and then calls the backend's do_<kernel>. Also the output
// sizes of convolution and pooling windows.
#include "pipetrain/tensor/conv_kernels.hpp"

#include "shape_checks.hpp"

namespace pt {

using shapes::numel_is;

namespace {

// "<kernel>: <name> (2, 3) must be (N, C, H, W) f32"
void is_image(const char* kernel, const char* name, const Tensor& t) {
  PT_CHECK(t.dtype() == DType::F32 && t.ndim() == 4,
           std::string(kernel) + ": " + name + " " + shape_string(t.shape()) +
               " must be (N, C, H, W) f32");
}

void shape_is(const char* kernel, const char* name, const Tensor& t, const Shape& want) {
  PT_CHECK(t.shape() == want, std::string(kernel) + ": " + name + " " + shape_string(t.shape()) +
                                  " must be " + shape_string(want));
}

// w (Cout, Cin, K, K) whose Cin is x's C.
void is_conv_weight(const char* kernel, const Tensor& w, int64_t in_channels) {
  PT_CHECK(w.dtype() == DType::F32 && w.ndim() == 4 && w.dim(2) == w.dim(3) &&
               w.dim(1) == in_channels,
           std::string(kernel) + ": w " + shape_string(w.shape()) + " must be (Cout, " +
               std::to_string(in_channels) + ", K, K) f32");
}

// The channels of x (N, C, H, W) split into `groups` equal groups.
void groups_divide(const char* kernel, const Tensor& x, int64_t groups) {
  PT_CHECK(groups >= 1 && x.dim(1) % groups == 0,
           std::string(kernel) + ": " + std::to_string(groups) + " groups do not divide the " +
               std::to_string(x.dim(1)) + " channels of x " + shape_string(x.shape()));
}

}  // namespace

int64_t window_output_size(int64_t size, int64_t kernel, int64_t stride, int64_t pad,
                           const char* what) {
  PT_CHECK(kernel >= 1 && stride >= 1 && pad >= 0 && pad < kernel,
           std::string(what) + ": kernel " + std::to_string(kernel) + ", stride " +
               std::to_string(stride) + ", padding " + std::to_string(pad) +
               " (expected kernel >= 1, stride >= 1, 0 <= padding < kernel)");
  PT_CHECK(size + 2 * pad >= kernel,
           std::string(what) + ": a window of " + std::to_string(kernel) +
               " does not fit an image side of " + std::to_string(size) + " padded by " +
               std::to_string(pad));
  return (size + 2 * pad - kernel) / stride + 1;
}

Shape conv2d_output_shape(const Shape& x, const Shape& w, Conv2dGeometry g) {
  PT_CHECK(x.size() == 4 && w.size() == 4 && w[1] == x[1] && w[2] == w[3],
           "conv2d: input " + shape_string(x) + " and weight " + shape_string(w) +
               " must be (N, C, H, W) and (Cout, C, K, K)");
  return {x[0], w[0], window_output_size(x[2], w[2], g.stride, g.pad, "conv2d"),
          window_output_size(x[3], w[3], g.stride, g.pad, "conv2d")};
}

Shape pool2d_output_shape(const Shape& x, Pool2dGeometry g) {
  PT_CHECK(x.size() == 4, "pool2d: input " + shape_string(x) + " must be (N, C, H, W)");
  return {x[0], x[1], window_output_size(x[2], g.kernel, g.stride, g.pad, "pool2d"),
          window_output_size(x[3], g.kernel, g.stride, g.pad, "pool2d")};
}

void ConvKernels::conv2d_forward(const Tensor& x, const Tensor& w, const Tensor* bias,
                                 Conv2dGeometry g, Tensor& y) {
  const char* k = "conv2d_forward";
  is_image(k, "x", x);
  is_conv_weight(k, w, x.dim(1));
  if (bias) numel_is(k, "bias", *bias, w.dim(0), "Cout of w");
  shape_is(k, "y", y, conv2d_output_shape(x.shape(), w.shape(), g));
  do_conv2d_forward(x, w, bias, g, y);
}

void ConvKernels::conv2d_backward_data(const Tensor& dy, const Tensor& w, Conv2dGeometry g,
                                       Tensor& dx) {
  const char* k = "conv2d_backward_data";
  is_image(k, "dx", dx);
  is_conv_weight(k, w, dx.dim(1));
  shape_is(k, "dy", dy, conv2d_output_shape(dx.shape(), w.shape(), g));
  do_conv2d_backward_data(dy, w, g, dx);
}

void ConvKernels::conv2d_backward_weights(const Tensor& x, const Tensor& dy, Conv2dGeometry g,
                                          Tensor& dw, Tensor* dbias) {
  const char* k = "conv2d_backward_weights";
  is_image(k, "x", x);
  is_conv_weight(k, dw, x.dim(1));
  if (dbias) numel_is(k, "dbias", *dbias, dw.dim(0), "Cout of dw");
  shape_is(k, "dy", dy, conv2d_output_shape(x.shape(), dw.shape(), g));
  do_conv2d_backward_weights(x, dy, g, dw, dbias);
}

int64_t ConvKernels::pool2d_workspace_numel(const Shape& x, Pool2dGeometry g) {
  pool2d_output_shape(x, g);  // checks the window
  return do_pool2d_workspace_numel(x, g);
}

void ConvKernels::pool2d_forward(const Tensor& x, Pool2dGeometry g, Tensor& y,
                                 Tensor* workspace) {
  const char* k = "pool2d_forward";
  is_image(k, "x", x);
  shape_is(k, "y", y, pool2d_output_shape(x.shape(), g));
  if (g.kind == PoolKind::Max) {
    PT_CHECK(workspace && workspace->dtype() == DType::I32,
             std::string(k) + ": max pooling needs an I32 workspace");
    numel_is(k, "workspace", *workspace, do_pool2d_workspace_numel(x.shape(), g),
             "pool2d_workspace_numel");
  }
  do_pool2d_forward(x, g, y, workspace);
}

void ConvKernels::pool2d_backward(const Tensor& dy, Pool2dGeometry g, const Tensor* workspace,
                                  Tensor& dx) {
  const char* k = "pool2d_backward";
  is_image(k, "dx", dx);
  shape_is(k, "dy", dy, pool2d_output_shape(dx.shape(), g));
  if (g.kind == PoolKind::Max) {
    PT_CHECK(workspace && workspace->dtype() == DType::I32,
             std::string(k) + ": max pooling needs forward's I32 workspace");
    numel_is(k, "workspace", *workspace, do_pool2d_workspace_numel(dx.shape(), g),
             "pool2d_workspace_numel");
  }
  do_pool2d_backward(dy, g, workspace, dx);
}

void ConvKernels::global_avg_pool_forward(const Tensor& x, Tensor& y) {
  const char* k = "global_avg_pool_forward";
  is_image(k, "x", x);
  shape_is(k, "y", y, {x.dim(0), x.dim(1)});
  do_global_avg_pool_forward(x, y);
}

void ConvKernels::global_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  const char* k = "global_avg_pool_backward";
  is_image(k, "dx", dx);
  shape_is(k, "dy", dy, {dx.dim(0), dx.dim(1)});
  do_global_avg_pool_backward(dy, dx);
}

// t (N, T, C) f32 whose T is the pixels and C the channels of image y.
static void is_tokens_of(const char* kernel, const char* name, const Tensor& t, const Tensor& image) {
  const Shape want = {image.dim(0), image.dim(2) * image.dim(3), image.dim(1)};
  PT_CHECK(t.dtype() == DType::F32 && t.shape() == want,
           std::string(kernel) + ": " + name + " " + shape_string(t.shape()) + " must be " +
               shape_string(want) + " f32 (N, H W, C) for the image " +
               shape_string(image.shape()));
}

void ConvKernels::image_to_tokens(const Tensor& x, Tensor& y) {
  const char* k = "image_to_tokens";
  is_image(k, "x", x);
  is_tokens_of(k, "y", y, x);
  do_image_to_tokens(x, y);
}

void ConvKernels::tokens_to_image(const Tensor& x, Tensor& y) {
  const char* k = "tokens_to_image";
  is_image(k, "y", y);
  is_tokens_of(k, "x", x, y);
  do_tokens_to_image(x, y);
}

void ConvKernels::group_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     int64_t groups, float eps, Tensor& y, Tensor& mean,
                                     Tensor& rstd) {
  const char* k = "group_norm_forward";
  is_image(k, "x", x);
  groups_divide(k, x, groups);
  const int64_t C = x.dim(1), stats = x.dim(0) * groups;
  numel_is(k, "gamma", gamma, C, "the channels of x");
  numel_is(k, "beta", beta, C, "the channels of x");
  shape_is(k, "y", y, x.shape());
  numel_is(k, "mean", mean, stats, "N x groups");
  numel_is(k, "rstd", rstd, stats, "N x groups");
  do_group_norm_forward(x, gamma, beta, groups, eps, y, mean, rstd);
}

void ConvKernels::group_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, int64_t groups, const Tensor& dy,
                                      Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const char* k = "group_norm_backward";
  is_image(k, "x", x);
  groups_divide(k, x, groups);
  const int64_t C = x.dim(1), stats = x.dim(0) * groups;
  numel_is(k, "gamma", gamma, C, "the channels of x");
  numel_is(k, "mean", mean, stats, "N x groups");
  numel_is(k, "rstd", rstd, stats, "N x groups");
  shape_is(k, "dy", dy, x.shape());
  shape_is(k, "dx", dx, x.shape());
  numel_is(k, "dgamma", dgamma, C, "the channels of x");
  numel_is(k, "dbeta", dbeta, C, "the channels of x");
  do_group_norm_backward(x, gamma, mean, rstd, groups, dy, dx, dgamma, dbeta);
}

void ConvKernels::batch_norm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                     float eps, Tensor& y, Tensor& mean, Tensor& rstd,
                                     Tensor* var) {
  const char* k = "batch_norm_forward";
  is_image(k, "x", x);
  const int64_t C = x.dim(1);
  numel_is(k, "gamma", gamma, C, "the channels of x");
  numel_is(k, "beta", beta, C, "the channels of x");
  shape_is(k, "y", y, x.shape());
  numel_is(k, "mean", mean, C, "the channels of x");
  numel_is(k, "rstd", rstd, C, "the channels of x");
  if (var) numel_is(k, "var", *var, C, "the channels of x");
  do_batch_norm_forward(x, gamma, beta, eps, y, mean, rstd, var);
}

void ConvKernels::batch_norm_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                       const Tensor& mean, const Tensor& var, float eps,
                                       Tensor& y) {
  const char* k = "batch_norm_inference";
  is_image(k, "x", x);
  const int64_t C = x.dim(1);
  numel_is(k, "gamma", gamma, C, "the channels of x");
  numel_is(k, "beta", beta, C, "the channels of x");
  numel_is(k, "mean", mean, C, "the channels of x");
  numel_is(k, "var", var, C, "the channels of x");
  shape_is(k, "y", y, x.shape());
  do_batch_norm_inference(x, gamma, beta, mean, var, eps, y);
}

void ConvKernels::batch_norm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                      const Tensor& rstd, const Tensor& dy, Tensor& dx,
                                      Tensor& dgamma, Tensor& dbeta) {
  const char* k = "batch_norm_backward";
  is_image(k, "x", x);
  const int64_t C = x.dim(1);
  numel_is(k, "gamma", gamma, C, "the channels of x");
  numel_is(k, "mean", mean, C, "the channels of x");
  numel_is(k, "rstd", rstd, C, "the channels of x");
  shape_is(k, "dy", dy, x.shape());
  shape_is(k, "dx", dx, x.shape());
  numel_is(k, "dgamma", dgamma, C, "the channels of x");
  numel_is(k, "dbeta", dbeta, C, "the channels of x");
  do_batch_norm_backward(x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
}

}  // namespace pt
