// kernels_conv.cu: the CUDA backend's own kernels of the convolution kernel
// group (cuda_conv.cpp; contracts in include/pipetrain/tensor/conv_kernels.hpp):
// max and average pooling, global average pooling, group and batch
// normalisation, and the per-channel sum of a convolution's bias gradient.
//
// Determinism without atomics: every backward is a gather. Each input
// element of a pooling backward visits the windows that hold it in a fixed
// order; each (image, group) or channel of a normalisation is one block
// whose statistics are summed in double by the fixed tree of block_sum, and
// each channel's parameter gradient is one more block. The normalisations
// evaluate every output in double and round once, as the CPU backend's
// loops do, so the two differ only by the order of their double sums.
#include "device_common.cuh"
#include "kernels.hpp"

namespace pt::cuda::kern {

namespace {

// ---- pooling ----

// The first and last output index (along one axis) whose window holds input
// index i: o s - pad <= i <= o s - pad + K - 1, clamped to [0, out).
__device__ __forceinline__ void windows_over(int64_t i, const PoolDims& d, int64_t out,
                                             int64_t& first, int64_t& last) {
  const int64_t hi = i + d.pad;                    // o s <= hi
  const int64_t lo = hi - d.kernel + 1;            // o s >= lo
  first = lo <= 0 ? 0 : (lo + d.stride - 1) / d.stride;
  last = hi / d.stride;
  if (last > out - 1) last = out - 1;
}

// The in-image part [h0, h1) x [w0, w1) of output (oh, ow)'s window.
struct Window {
  int64_t h0, h1, w0, w1;
};
__device__ __forceinline__ Window window_at(int64_t oh, int64_t ow, const PoolDims& d) {
  Window w;
  w.h0 = oh * d.stride - d.pad;
  w.w0 = ow * d.stride - d.pad;
  w.h1 = w.h0 + d.kernel < d.H ? w.h0 + d.kernel : d.H;
  w.w1 = w.w0 + d.kernel < d.W ? w.w0 + d.kernel : d.W;
  if (w.h0 < 0) w.h0 = 0;
  if (w.w0 < 0) w.w0 = 0;
  return w;
}

// y (planes, OH, OW); where[i]: the position h W + w of output i's maximum
// in its plane (the first in row-major order among equals), -1 for a window
// with no pixel inside the image.
__global__ void max_pool_forward_kernel(const float* x, PoolDims d, float* y, int32_t* where) {
  const int64_t n = d.planes * d.OH * d.OW;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t ow = i % d.OW, oh = (i / d.OW) % d.OH, plane = i / (d.OW * d.OH);
    const float* xp = x + plane * d.H * d.W;
    const Window w = window_at(oh, ow, d);
    float best = -INFINITY;
    int32_t at = -1;
    for (int64_t h = w.h0; h < w.h1; ++h)
      for (int64_t c = w.w0; c < w.w1; ++c)
        if (at < 0 || xp[h * d.W + c] > best) {
          best = xp[h * d.W + c];
          at = static_cast<int32_t>(h * d.W + c);
        }
    y[i] = at < 0 ? 0.f : best;
    where[i] = at;
  }
}

// Sums term(o, oh, ow, me) over the outputs o = (plane, oh, ow) whose
// windows hold pixel i of a (planes, H, W) input, in row-major order of the
// windows; o is the flat index into the (planes, OH, OW) output, me the
// pixel's position h W + w in its plane.
// Both pooling backwards are this gather, so they visit windows alike.
template <class Term>
__device__ __forceinline__ float sum_over_windows_holding(int64_t i, const PoolDims& d,
                                                          Term term) {
  const int64_t iw = i % d.W, ih = (i / d.W) % d.H, plane = i / (d.W * d.H);
  const int32_t me = static_cast<int32_t>(ih * d.W + iw);
  int64_t oh0, oh1, ow0, ow1;
  windows_over(ih, d, d.OH, oh0, oh1);
  windows_over(iw, d, d.OW, ow0, ow1);
  const int64_t base = plane * d.OH * d.OW;
  float sum = 0.f;
  for (int64_t oh = oh0; oh <= oh1; ++oh)
    for (int64_t ow = ow0; ow <= ow1; ++ow) sum += term(base + oh * d.OW + ow, oh, ow, me);
  return sum;
}

// dx (planes, H, W): each pixel sums dy over the windows whose maximum it
// was, windows in row-major order.
__global__ void max_pool_backward_kernel(const float* dy, const int32_t* where, PoolDims d,
                                         float* dx) {
  const int64_t n = d.planes * d.H * d.W;
  for (int64_t i = global_index(); i < n; i += global_stride())
    dx[i] = sum_over_windows_holding(i, d, [&](int64_t o, int64_t, int64_t, int32_t me) {
      return where[o] == me ? dy[o] : 0.f;
    });
}

// The pixels of a window inside the image (padding excluded).
__device__ __forceinline__ float window_count(const Window& w) {
  return static_cast<float>((w.h1 - w.h0) * (w.w1 - w.w0));
}

// y = the mean of each window's pixels inside the image.
__global__ void avg_pool_forward_kernel(const float* x, PoolDims d, float* y) {
  const int64_t n = d.planes * d.OH * d.OW;
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const int64_t ow = i % d.OW, oh = (i / d.OW) % d.OH, plane = i / (d.OW * d.OH);
    const float* xp = x + plane * d.H * d.W;
    const Window w = window_at(oh, ow, d);
    float sum = 0.f;
    for (int64_t h = w.h0; h < w.h1; ++h)
      for (int64_t c = w.w0; c < w.w1; ++c) sum += xp[h * d.W + c];
    y[i] = w.h1 > w.h0 && w.w1 > w.w0 ? sum / window_count(w) : 0.f;
  }
}

// dx: each pixel sums dy / (its window's count) over the windows holding it.
__global__ void avg_pool_backward_kernel(const float* dy, PoolDims d, float* dx) {
  const int64_t n = d.planes * d.H * d.W;
  for (int64_t i = global_index(); i < n; i += global_stride())
    dx[i] = sum_over_windows_holding(i, d, [&](int64_t o, int64_t oh, int64_t ow, int32_t) {
      return dy[o] / window_count(window_at(oh, ow, d));
    });
}

// y (planes) = mean of each plane of x (planes, HW); one block per plane.
__global__ void plane_mean_kernel(const float* x, int64_t HW, float* y) {
  const float* xp = x + static_cast<int64_t>(blockIdx.x) * HW;
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < HW; j += blockDim.x) sum += xp[j];
  sum = block_sum(sum);
  if (threadIdx.x == 0) y[blockIdx.x] = static_cast<float>(sum / static_cast<double>(HW));
}

// dx (planes, HW) = dy[plane] / HW.
__global__ void plane_spread_kernel(const float* dy, int64_t planes, int64_t HW, float* dx) {
  const int64_t n = planes * HW;
  for (int64_t i = global_index(); i < n; i += global_stride())
    dx[i] = dy[i / HW] / static_cast<float>(HW);
}

// ---- normalisation ----

// Element e of set s: its index into x and its channel.
__device__ __forceinline__ int64_t set_element(const NormSetDims& d, int64_t s, int64_t e,
                                               int64_t& channel) {
  const int64_t r = e / d.run, j = e % d.run;
  channel = (s % d.sets_per_image) * d.channels_per_set + j / d.HW;
  const int64_t first = (s / d.sets_per_image) * d.C * d.HW +
                        (s % d.sets_per_image) * d.channels_per_set * d.HW;
  return first + r * d.gap + j;
}

// One block per set: its mean, rstd (and biased variance when var != null)
// and y = (x - mean) rstd gamma + beta, each in double, rounded once.
__global__ void norm_forward_kernel(const float* x, const float* gamma, const float* beta,
                                    float eps, NormSetDims d, float* y, float* mean, float* rstd,
                                    float* var) {
  const int64_t s = blockIdx.x, n = d.runs * d.run;
  int64_t c = 0;
  double sum = 0.0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) sum += x[set_element(d, s, e, c)];
  const double mu = block_sum(sum) / static_cast<double>(n);
  double sq = 0.0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const double v = x[set_element(d, s, e, c)] - mu;
    sq += v * v;
  }
  const double variance = block_sum(sq) / static_cast<double>(n);
  const double r = 1.0 / sqrt(variance + static_cast<double>(eps));
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const int64_t i = set_element(d, s, e, c);
    y[i] = static_cast<float>((x[i] - mu) * r * gamma[c] + beta[c]);
  }
  if (threadIdx.x == 0) {
    mean[s] = static_cast<float>(mu);
    rstd[s] = static_cast<float>(r);
    if (var) var[s] = static_cast<float>(variance);
  }
}

// One block per set: with xhat = (x - mean) rstd and g = dy gamma,
// dx = rstd (g - mean(g) - xhat mean(g xhat)).
__global__ void norm_backward_data_kernel(const float* x, const float* gamma, const float* mean,
                                          const float* rstd, const float* dy, NormSetDims d,
                                          float* dx) {
  const int64_t s = blockIdx.x, n = d.runs * d.run;
  const double mu = mean[s], r = rstd[s];
  int64_t c = 0;
  double g_sum = 0.0, gx_sum = 0.0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const int64_t i = set_element(d, s, e, c);
    const double xhat = (x[i] - mu) * r, g = static_cast<double>(dy[i]) * gamma[c];
    g_sum += g;
    gx_sum += g * xhat;
  }
  const double g_mean = block_sum(g_sum) / static_cast<double>(n);
  const double gx_mean = block_sum(gx_sum) / static_cast<double>(n);
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const int64_t i = set_element(d, s, e, c);
    const double xhat = (x[i] - mu) * r, g = static_cast<double>(dy[i]) * gamma[c];
    dx[i] = static_cast<float>(r * (g - g_mean - xhat * gx_mean));
  }
}

// The set holding (image b, channel c).
__device__ __forceinline__ int64_t set_of(const NormSetDims& d, int64_t b, int64_t c) {
  const int64_t per_image = d.count == d.sets_per_image ? 0 : d.sets_per_image;
  return b * per_image + c / d.channels_per_set;
}

// One block per channel c: dgamma[c] += sum dy xhat, dbeta[c] += sum dy
// over its N HW elements, in double, added once.
__global__ void norm_backward_params_kernel(const float* x, const float* mean, const float* rstd,
                                            const float* dy, NormSetDims d, int64_t N,
                                            float* dgamma, float* dbeta) {
  const int64_t c = blockIdx.x, n = N * d.HW;
  double dg = 0.0, db = 0.0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const int64_t b = e / d.HW, i = (b * d.C + c) * d.HW + e % d.HW;
    const int64_t s = set_of(d, b, c);
    const double xhat = (x[i] - static_cast<double>(mean[s])) * static_cast<double>(rstd[s]);
    dg += static_cast<double>(dy[i]) * xhat;
    db += dy[i];
  }
  dg = block_sum(dg);
  db = block_sum(db);
  if (threadIdx.x == 0) {
    dgamma[c] = static_cast<float>(dgamma[c] + dg);
    dbeta[c] = static_cast<float>(dbeta[c] + db);
  }
}

// One block per channel: out[c] += the sum of dy (N, C, HW) over N, HW.
__global__ void channel_sum_kernel(const float* dy, int64_t N, int64_t C, int64_t HW,
                                   float* out) {
  const int64_t c = blockIdx.x, n = N * HW;
  double sum = 0.0;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x)
    sum += dy[((e / HW) * C + c) * HW + e % HW];
  sum = block_sum(sum);
  if (threadIdx.x == 0) out[c] = static_cast<float>(out[c] + sum);
}

// y (n, cols, rows) = x (n, rows, cols) per image; i indexes y.
__global__ void transpose_images_kernel(const float* x, int64_t n, int64_t rows, int64_t cols,
                                        float* y) {
  const int64_t size = rows * cols, total = n * size;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const int64_t image = i / size, at = i % size, c = at / rows, r = at % rows;
    y[i] = x[image * size + r * cols + c];
  }
}

__global__ void batch_norm_inference_kernel(const float* x, const float* gamma, const float* beta,
                                            const float* mean, const float* var, float eps,
                                            int64_t N, int64_t C, int64_t HW, float* y) {
  const int64_t total = N * C * HW;
  for (int64_t i = global_index(); i < total; i += global_stride()) {
    const int64_t c = (i / HW) % C;
    const double r = 1.0 / sqrt(static_cast<double>(var[c]) + static_cast<double>(eps));
    y[i] = static_cast<float>((static_cast<double>(x[i]) - mean[c]) * r * gamma[c] + beta[c]);
  }
}

// Blocks of a one-block-per-item launch; the kernel group's shapes stay far
// below the grid's limit (checked, not assumed).
unsigned item_blocks(int64_t items, const char* what) {
  PT_CHECK(items >= 1 && items < kMaxGridRows,
           std::string(what) + ": " + std::to_string(items) + " blocks");
  return static_cast<unsigned>(items);
}

}  // namespace

void max_pool_forward(const float* x, const PoolDims& d, float* y, int32_t* where,
                      cudaStream_t s) {
  max_pool_forward_kernel<<<grid_for(d.planes * d.OH * d.OW), kThreads, 0, s>>>(x, d, y, where);
  PT_LAUNCH_CHECK();
}

void max_pool_backward(const float* dy, const int32_t* where, const PoolDims& d, float* dx,
                       cudaStream_t s) {
  max_pool_backward_kernel<<<grid_for(d.planes * d.H * d.W), kThreads, 0, s>>>(dy, where, d, dx);
  PT_LAUNCH_CHECK();
}

void avg_pool_forward(const float* x, const PoolDims& d, float* y, cudaStream_t s) {
  avg_pool_forward_kernel<<<grid_for(d.planes * d.OH * d.OW), kThreads, 0, s>>>(x, d, y);
  PT_LAUNCH_CHECK();
}

void avg_pool_backward(const float* dy, const PoolDims& d, float* dx, cudaStream_t s) {
  avg_pool_backward_kernel<<<grid_for(d.planes * d.H * d.W), kThreads, 0, s>>>(dy, d, dx);
  PT_LAUNCH_CHECK();
}

void global_avg_pool_forward(const float* x, int64_t planes, int64_t HW, float* y,
                             cudaStream_t s) {
  plane_mean_kernel<<<item_blocks(planes, "global average pooling"), kThreads, 0, s>>>(x, HW, y);
  PT_LAUNCH_CHECK();
}

void global_avg_pool_backward(const float* dy, int64_t planes, int64_t HW, float* dx,
                              cudaStream_t s) {
  plane_spread_kernel<<<grid_for(planes * HW), kThreads, 0, s>>>(dy, planes, HW, dx);
  PT_LAUNCH_CHECK();
}

void norm_forward(const float* x, const float* gamma, const float* beta, float eps,
                  const NormSetDims& d, float* y, float* mean, float* rstd, float* var,
                  cudaStream_t s) {
  norm_forward_kernel<<<item_blocks(d.count, "normalisation"), kThreads, 0, s>>>(
      x, gamma, beta, eps, d, y, mean, rstd, var);
  PT_LAUNCH_CHECK();
}

void norm_backward(const float* x, const float* gamma, const float* mean, const float* rstd,
                   const float* dy, const NormSetDims& d, int64_t N, float* dx, float* dgamma,
                   float* dbeta, cudaStream_t s) {
  norm_backward_data_kernel<<<item_blocks(d.count, "normalisation backward"), kThreads, 0, s>>>(
      x, gamma, mean, rstd, dy, d, dx);
  PT_LAUNCH_CHECK();
  norm_backward_params_kernel<<<item_blocks(d.C, "normalisation backward"), kThreads, 0, s>>>(
      x, mean, rstd, dy, d, N, dgamma, dbeta);
  PT_LAUNCH_CHECK();
}

void transpose_images(const float* x, int64_t n, int64_t rows, int64_t cols, float* y, cudaStream_t s) {
  transpose_images_kernel<<<grid_for(n * rows * cols), kThreads, 0, s>>>(x, n, rows, cols, y);
  PT_LAUNCH_CHECK();
}

void batch_norm_inference(const float* x, const float* gamma, const float* beta, const float* mean,
                          const float* var, float eps, int64_t N, int64_t C, int64_t HW, float* y,
                          cudaStream_t s) {
  batch_norm_inference_kernel<<<grid_for(N * C * HW), kThreads, 0, s>>>(x, gamma, beta, mean, var, eps,
                                                                        N, C, HW, y);
  PT_LAUNCH_CHECK();
}

void add_channel_sums(const float* dy, int64_t N, int64_t C, int64_t HW, float* out,
                      cudaStream_t s) {
  channel_sum_kernel<<<item_blocks(C, "convolution bias gradient"), kThreads, 0, s>>>(dy, N, C,
                                                                                     HW, out);
  PT_LAUNCH_CHECK();
}

}  // namespace pt::cuda::kern
