// device_common.cuh: device helpers shared by the kernel files: launch
// geometry, deterministic block reductions, and the float exp of the CPU
// backend (src/tensor/vec_math.hpp) so GELU and softmax match it closely.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../tensor/vec_math.hpp"
#include "check.hpp"

namespace pt::cuda::kern {

constexpr int kThreads = 256;  // every kernel: a multiple of 32

inline unsigned grid_for(int64_t n, int64_t per_thread = 1) {
  const int64_t blocks = (n + kThreads * per_thread - 1) / (kThreads * per_thread);
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(blocks, 1), 1 << 20));
}

// Rows given to a row kernel per launch (grid.x limit).
constexpr int64_t kMaxGridRows = 1 << 30;

#define PT_LAUNCH_CHECK() CUDA_CHECK(cudaGetLastError())

__device__ __forceinline__ int64_t global_index() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t global_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

__device__ __forceinline__ double warp_sum(double v) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, off));
  return v;
}

// Sum over the block, returned to every thread. Fixed tree for a given
// blockDim, so bitwise reproducible. Every thread of the block must call it.
__device__ __forceinline__ double block_sum(double v) {
  __shared__ double part[32];
  __shared__ double total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double w = lane < static_cast<int>((blockDim.x + 31) >> 5) ? part[lane] : 0.0;
    w = warp_sum(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  const double out = total;
  __syncthreads();  // the slots may be reused by the next call
  return out;
}

__device__ __forceinline__ float block_max(float v) {
  __shared__ float part[32];
  __shared__ float total;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_max(v);
  if (lane == 0) part[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < static_cast<int>((blockDim.x + 31) >> 5) ? part[lane] : -INFINITY;
    w = warp_max(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  const float out = total;
  __syncthreads();
  return out;
}

// fast_exp and fast_tanh: pt::fast_exp / pt::fast_tanh from src/tensor/vec_math.hpp,
// the CPU backend's own source compiled for the device.

}  // namespace pt::cuda::kern
