// pinned_pool.hpp: page-locked host buffers for the host-staged transport,
// cached by size (cudaHostAlloc is slow and may synchronise the device, so
// after the first step no new buffer is requested). Internal to pt_cuda.
// A buffer that MPI may still be using is retired instead (retired_pinned_bytes).
#pragma once

#include <cstddef>

namespace pt::cuda {

class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);  // from the cache, or cudaHostAlloc
  ~PinnedBuffer();                      // back to the cache
  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;

  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  // Gives the memory up for good: never back to the cache, never freed (MPI
  // may still use it). This object becomes empty.
  void retire();

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Bytes of pinned memory retired so far (this process).
size_t retired_pinned_bytes();

}  // namespace pt::cuda
