// device_memory.hpp: the caching allocator of device memory behind
// Device::CUDA tensors, and DeviceBuffer, an untyped scratch block from the
// same cache for the backend's internal workspaces (internal to pt_cuda).
//
// Blocks are reused by exact (rounded) size. Reuse is safe without events
// because every kernel runs on the one compute stream, and the transports,
// whose streams touch tensor memory too, first wait for the compute stream
// and finish before the executor releases their buffers.
#pragma once

#include <cstddef>

#include "pipetrain/tensor/tensor.hpp"

namespace pt::cuda {

void* device_allocate(size_t bytes, MemCategory cat);
void device_release(void* ptr, size_t bytes, MemCategory cat);

// Scratch device memory, counted as MemCategory::Workspace; freed (to the
// cache) when it goes out of scope, in compute-stream order.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const { return static_cast<T*>(ptr_); }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pt::cuda
