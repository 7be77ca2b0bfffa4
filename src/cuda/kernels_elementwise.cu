// kernels_elementwise.cu: elementwise kernels of the CUDA backend: bias,
// ReLU, GELU (tanh form), residual add, fill, scale, the SGD and AdamW
// updates, the fp32 -> bf16/fp16 casts of mixed precision (per GEMM operand,
// and the weight copies of Backend::round_to; the CPU's round_bits bit for
// bit, NaN included) and the exact bf16 -> fp32 cast of the fused
// attention's outputs. The arithmetic
// is written in the same order as the CPU backend and built with --fmad=false,
// so these results equal the CPU's bit for bit (GELU included: same exp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "device_common.cuh"
#include "kernels.hpp"

namespace pt::cuda::kern {

namespace {

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi), as cpu_backend.cpp
constexpr float kGeluCubic = 0.044715f;

// y (rows, n): block (x: column tile, y: row stripe).
__global__ void add_bias_kernel(float* y, const float* bias, int64_t rows, int64_t n) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= n) return;
  const float b = bias[j];
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) y[r * n + j] += b;
}

__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

__global__ void relu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride())
    dx[i] = x[i] > 0.f ? dy[i] : 0.f;
}

__global__ void gelu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    y[i] = 0.5f * v * (1.f + fast_tanh(u));
  }
}

__global__ void gelu_backward_kernel(const float* x, const float* dy, float* dx, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float v = x[i];
    const float u = kGeluScale * (v + kGeluCubic * v * v * v);
    const float t = fast_tanh(u);
    const float du = kGeluScale * (1.f + 3.f * kGeluCubic * v * v);
    const float grad = 0.5f * (1.f + t) + 0.5f * v * (1.f - t * t) * du;
    dx[i] = grad * dy[i];
  }
}

__global__ void add_kernel(const float* a, const float* b, float* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = a[i] + b[i];
}

__global__ void fill_kernel(float* x, float value, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) x[i] = value;
}

__global__ void scale_kernel(float* x, float factor, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) x[i] *= factor;
}

__global__ void sgd_kernel(float* p, const float* g, float* v, float lr, float momentum,
                           float weight_decay, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    const float grad = g[i] + weight_decay * p[i];
    v[i] = momentum * v[i] + grad;
    p[i] -= lr * v[i];
  }
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, float beta1,
                             float beta2, float eps, float step_size, float decay,
                             float bias2_sqrt, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) {
    float pi = p[i] * decay;
    const float gi = g[i];
    const float mi = beta1 * m[i] + (1.f - beta1) * gi;
    const float vi = beta2 * v[i] + (1.f - beta2) * gi * gi;
    const float denom = sqrtf(vi) / bias2_sqrt + eps;
    pi -= step_size * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

// fp32 -> bf16 bits as the CPU's round_bits (src/tensor/precision.cpp):
// round to nearest even on the bits; inf kept; a NaN quieted and cut to its
// top payload bits (where __float2bfloat16_rn would give one canonical NaN).
__device__ uint16_t bf16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return static_cast<uint16_t>(((u & 0x007fffffu) ? (u | 0x00400000u) : u) >> 16);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// fp32 -> fp16 bits as the CPU's round_bits: the hardware's round to nearest
// even (overflow to inf, gradual underflow) and the CPU's NaN rule.
__device__ uint16_t f16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x007fffffu) >> 13));
  return __half_as_ushort(__float2half_rn(x));
}

__global__ void cast_bf16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = bf16_bits(x[i]);
}

__global__ void cast_f16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = f16_bits(x[i]);
}

__global__ void bf16_to_float_kernel(const __nv_bfloat16* x, float* out, int64_t n) {
  for (int64_t i = global_index(); i < n; i += global_stride()) out[i] = __bfloat162float(x[i]);
}

}  // namespace

void add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows == 0 || n == 0) return;
  const dim3 grid(static_cast<unsigned>((n + kThreads - 1) / kThreads),
                  static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
  add_bias_kernel<<<grid, kThreads, 0, s>>>(y, bias, rows, n);
  PT_LAUNCH_CHECK();
}

void relu_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  relu_forward_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, y, n);
  PT_LAUNCH_CHECK();
}

void relu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  relu_backward_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, dy, dx, n);
  PT_LAUNCH_CHECK();
}

void gelu_forward(const float* x, float* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_forward_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, y, n);
  PT_LAUNCH_CHECK();
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  gelu_backward_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, dy, dx, n);
  PT_LAUNCH_CHECK();
}

void add(const float* a, const float* b, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(a, b, out, n);
  PT_LAUNCH_CHECK();
}

void fill(float* x, float value, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, value, n);
  PT_LAUNCH_CHECK();
}

void scale(float* x, float factor, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, factor, n);
  PT_LAUNCH_CHECK();
}

void sgd_step(float* p, const float* g, float* v, float lr, float momentum, float weight_decay,
              int64_t n, cudaStream_t s) {
  if (n == 0) return;
  sgd_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(p, g, v, lr, momentum, weight_decay, n);
  PT_LAUNCH_CHECK();
}

void adamw_step(float* p, const float* g, float* m, float* v, float beta1, float beta2,
                float eps, float step_size, float decay, float bias2_sqrt, int64_t n,
                cudaStream_t s) {
  if (n == 0) return;
  adamw_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(p, g, m, v, beta1, beta2, eps, step_size,
                                                     decay, bias2_sqrt, n);
  PT_LAUNCH_CHECK();
}

void cast_to_half(const float* x, void* out, int64_t n, bool to_bf16, cudaStream_t s) {
  if (n == 0) return;
  if (to_bf16)
    cast_bf16_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, static_cast<uint16_t*>(out), n);
  else
    cast_f16_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(x, static_cast<uint16_t*>(out), n);
  PT_LAUNCH_CHECK();
}

void bf16_to_float(const void* x, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  bf16_to_float_kernel<<<grid_for(n, 4), kThreads, 0, s>>>(static_cast<const __nv_bfloat16*>(x),
                                                           out, n);
  PT_LAUNCH_CHECK();
}

}  // namespace pt::cuda::kern
