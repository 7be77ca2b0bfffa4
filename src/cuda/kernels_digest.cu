// kernels_digest.cu: the payload digest on the GPU (pipeline.check_messages
// and the replica check; tensor/payload_digest.hpp defines it). Each thread
// adds the terms of its words in 64-bit integers, each block adds its
// threads', and the blocks' sums meet with an integer atomicAdd: integer
// addition wraps and commutes, so the result is bitwise the CPU's whatever
// the order (unlike the floating-point reductions of kernels_reduce.cu,
// which need a fixed tree). One 16-byte read back, after the stream.
#include <cstring>

#include "context.hpp"
#include "device_common.cuh"
#include "device_memory.hpp"
#include "kernels.hpp"
#include "pipetrain/tensor/payload_digest.hpp"

namespace pt::cuda::kern {

namespace {

constexpr int64_t kWordsPerThread = 8;
constexpr int kMaxDigestBlocks = 1024;

// Bytes [8 i, 8 i + valid) of p as a little-endian word, zero-padded.
__device__ uint64_t load_word(const unsigned char* p, int64_t i, unsigned valid) {
  if (valid == 8) {
    uint64_t w;
    memcpy(&w, p + 8 * i, 8);  // the payload's base is at least 8-byte aligned
    return w;
  }
  uint64_t w = 0;
  for (unsigned b = 0; b < valid; ++b) w |= static_cast<uint64_t>(p[8 * i + b]) << (8 * b);
  return w;
}

// out[0] += Σ terms (mod 2^64), out[1] += non-finite elements.
__global__ void digest_kernel(const unsigned char* p, int64_t bytes, int kind,
                              unsigned long long* out) {
  __shared__ unsigned long long sums[kThreads];
  __shared__ unsigned long long counts[kThreads];
  const int64_t words = (bytes + 7) / 8;
  unsigned long long sum = 0, count = 0;
  for (int64_t i = global_index(); i < words; i += global_stride()) {
    const int64_t left = bytes - 8 * i;
    const unsigned valid = left >= 8 ? 8u : static_cast<unsigned>(left);
    const uint64_t w = load_word(p, i, valid);
    sum += digest::term(w, static_cast<uint64_t>(i));
    count += digest::nonfinite_in_word(w, valid, static_cast<digest::FloatKind>(kind));
  }
  sums[threadIdx.x] = sum;
  counts[threadIdx.x] = count;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) {
      sums[threadIdx.x] += sums[threadIdx.x + half];
      counts[threadIdx.x] += counts[threadIdx.x + half];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    atomicAdd(&out[0], sums[0]);
    atomicAdd(&out[1], counts[0]);
  }
}

}  // namespace

void payload_digest(const void* data, int64_t bytes, int float_kind, uint64_t* checksum,
                    int64_t* nonfinite, cudaStream_t s) {
  DeviceBuffer out(2 * sizeof(unsigned long long));
  CUDA_CHECK(cudaMemsetAsync(out.as<unsigned long long>(), 0, 2 * sizeof(unsigned long long), s));
  const int64_t words = (bytes + 7) / 8;
  if (words > 0) {
    const unsigned blocks = std::min<unsigned>(grid_for(words, kWordsPerThread), kMaxDigestBlocks);
    digest_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const unsigned char*>(data), bytes,
                                              float_kind, out.as<unsigned long long>());
    PT_LAUNCH_CHECK();
  }
  Context& ctx = context();
  CUDA_CHECK(cudaMemcpyAsync(ctx.readback, out.as<unsigned long long>(),
                             2 * sizeof(unsigned long long), cudaMemcpyDeviceToHost, s));
  if (s != ctx.compute) wait_for_stream(s, "a message digest on its own stream");
  sync_and_check();  // the compute stream, bounded
  unsigned long long host[2];
  std::memcpy(host, ctx.readback, sizeof host);
  *checksum = digest::finish(host[0], static_cast<uint64_t>(bytes));
  *nonfinite = static_cast<int64_t>(host[1]);
}

}  // namespace pt::cuda::kern
