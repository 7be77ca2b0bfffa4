// kernels_embedding.cu: token + position embedding, forward and backward.
//
// The backward pass must add many rows into the same wte row when a token
// repeats. Instead of atomics it sorts the keys (token << 32 | row) with CUB
// (keys are unique, so the order is fixed), and the first row of each token's
// run adds the whole run, in row order: the same additions in the same order
// as the CPU backend, hence the same bits.
#include <cub/device/device_radix_sort.cuh>

#include "context.hpp"
#include "device_common.cuh"
#include "device_memory.hpp"
#include "kernels.hpp"

namespace pt::cuda::kern {

namespace {

constexpr uint32_t kInvalidToken = 0xffffffffu;

__device__ void flag_bad_token(unsigned* word) {
  volatile unsigned* w = word;
  *w = *w | kBadToken;
}

// y (mb*T, C); grid (rows, column tiles).
__global__ void embedding_forward_kernel(const int32_t* tokens, const float* wte,
                                         const float* wpe, float* y, int64_t T, int64_t V,
                                         int64_t C, unsigned* error_word) {
  const int64_t r = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= C) return;
  const int32_t tok = tokens[r];
  const int64_t t = r % T;
  if (tok < 0 || tok >= V) {
    if (j == 0) flag_bad_token(error_word);
    y[r * C + j] = 0.f;
    return;
  }
  y[r * C + j] = wte[static_cast<int64_t>(tok) * C + j] + wpe[t * C + j];
}

__global__ void make_keys_kernel(const int32_t* tokens, int64_t n, int64_t V,
                                 unsigned long long* keys, unsigned* error_word) {
  for (int64_t r = global_index(); r < n; r += global_stride()) {
    const int32_t tok = tokens[r];
    uint32_t key_tok = static_cast<uint32_t>(tok);
    if (tok < 0 || tok >= V) {
      flag_bad_token(error_word);
      key_tok = kInvalidToken;
    }
    keys[r] = (static_cast<unsigned long long>(key_tok) << 32) | static_cast<uint32_t>(r);
  }
}

// grid (n sorted keys, column tiles): the block at the start of a token's run
// adds the run's dy rows into dwte[token], in row order.
__global__ void wte_runs_kernel(const unsigned long long* sorted, int64_t n, const float* dy,
                                float* dwte, int64_t C) {
  const int64_t i = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  const uint32_t tok = static_cast<uint32_t>(sorted[i] >> 32);
  if (j >= C || tok == kInvalidToken) return;
  if (i > 0 && static_cast<uint32_t>(sorted[i - 1] >> 32) == tok) return;
  float* out = dwte + static_cast<int64_t>(tok) * C + j;
  float acc = *out;
  for (int64_t k = i; k < n && static_cast<uint32_t>(sorted[k] >> 32) == tok; ++k) {
    const int64_t r = static_cast<int64_t>(sorted[k] & 0xffffffffull);
    acc += dy[r * C + j];
  }
  *out = acc;
}

// grid (T, column tiles): dwpe[t] += dy[b, t] for b in order.
__global__ void wpe_kernel(const float* dy, float* dwpe, int64_t mb, int64_t T, int64_t C) {
  const int64_t t = blockIdx.x;
  const int64_t j = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (j >= C) return;
  float acc = dwpe[t * C + j];
  for (int64_t b = 0; b < mb; ++b) acc += dy[(b * T + t) * C + j];
  dwpe[t * C + j] = acc;
}

unsigned column_tiles(int64_t C) { return static_cast<unsigned>((C + kThreads - 1) / kThreads); }

}  // namespace

void embedding_forward(const int32_t* tokens, const float* wte, const float* wpe, float* y,
                       int64_t mb, int64_t T, int64_t V, int64_t C, unsigned* error_word,
                       cudaStream_t s) {
  const int64_t rows = mb * T;
  if (rows == 0 || C == 0) return;
  PT_CHECK(rows <= kMaxGridRows, "too many tokens for one launch");
  const dim3 grid(static_cast<unsigned>(rows), column_tiles(C));
  embedding_forward_kernel<<<grid, kThreads, 0, s>>>(tokens, wte, wpe, y, T, V, C, error_word);
  PT_LAUNCH_CHECK();
}

void embedding_backward(const int32_t* tokens, const float* dy, float* dwte, float* dwpe,
                        int64_t mb, int64_t T, int64_t V, int64_t C, unsigned* error_word,
                        cudaStream_t s) {
  const int64_t n = mb * T;
  if (n == 0 || C == 0) return;
  PT_CHECK(n <= kMaxGridRows && n < (int64_t{1} << 31), "too many tokens for one launch");
  DeviceBuffer keys(2 * static_cast<size_t>(n) * sizeof(unsigned long long));
  unsigned long long* keys_in = keys.as<unsigned long long>();
  unsigned long long* keys_out = keys_in + n;
  make_keys_kernel<<<grid_for(n), kThreads, 0, s>>>(tokens, n, V, keys_in, error_word);
  PT_LAUNCH_CHECK();
  size_t temp_bytes = 0;
  CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, keys_in, keys_out,
                                            static_cast<int>(n), 0, 64, s));
  DeviceBuffer temp(temp_bytes);
  CUDA_CHECK(cub::DeviceRadixSort::SortKeys(temp.get(), temp_bytes, keys_in, keys_out,
                                            static_cast<int>(n), 0, 64, s));
  wte_runs_kernel<<<dim3(static_cast<unsigned>(n), column_tiles(C)), kThreads, 0, s>>>(
      keys_out, n, dy, dwte, C);
  PT_LAUNCH_CHECK();
  wpe_kernel<<<dim3(static_cast<unsigned>(T), column_tiles(C)), kThreads, 0, s>>>(dy, dwpe, mb,
                                                                                   T, C);
  PT_LAUNCH_CHECK();
}

}  // namespace pt::cuda::kern
