// device_memory.cpp: cudaMalloc behind the caching allocator, per-category
// accounting of device tensors, and the Device::CUDA hooks of tensor.hpp
// (allocate, release, cross-device copy, zero).
#include "device_memory.hpp"

#include <string>

#include "check.hpp"
#include "context.hpp"
#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/tensor/caching_allocator.hpp"

namespace pt::cuda {

namespace {

constexpr size_t kGranule = 512;  // sizes rounded up to this (cudaMalloc aligns 256)

// cudaMalloc blocks. On failure the allocator drops its cache (after a device
// synchronisation, so no kernel still uses a block) and retries once.
struct CudaSource {
  size_t round(size_t bytes) const { return (bytes + kGranule - 1) / kGranule * kGranule; }
  void* obtain(size_t size) {
    context();
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, size) == cudaSuccess) return ptr;
    (void)cudaGetLastError();
    return nullptr;
  }
  void give_back(void* ptr, size_t) { CUDA_CHECK(cudaFree(ptr)); }
  void before_dropping_cache() {
    context();
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  [[noreturn]] void out_of_memory(size_t size, const MemoryStats& live, size_t reserved) {
    PT_FAIL("out of GPU memory allocating " + std::to_string(size) + " bytes (" +
            std::to_string(live.live_total >> 20) + " MiB live in tensors, " +
            std::to_string(reserved >> 20) + " MiB reserved)");
  }
};

using DeviceCache = CachingAllocator<CudaSource>;

DeviceCache& cache() {
  static DeviceCache* instance = new DeviceCache();  // never destroyed
  return *instance;
}

// Copies involving host memory finish before returning (the host side may be
// pageable and reused at once); device-to-device copies stay in stream order.
void copy_hook(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) {
  Context& ctx = context();
  CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.compute));
  if (dst_dev == Device::CPU || src_dev == Device::CPU) sync_and_check();
}

void recategorize_hook(size_t bytes, MemCategory from, MemCategory to) {
  cache().recategorize(bytes, from, to);
}

void zero_hook(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, context().compute));
}

}  // namespace

void* device_allocate(size_t bytes, MemCategory cat) { return cache().allocate(bytes, cat); }
void device_release(void* ptr, size_t bytes, MemCategory cat) { cache().release(ptr, bytes, cat); }

void install_memory_hooks() {
  DeviceMemoryHooks hooks;
  hooks.allocate = device_allocate;
  hooks.release = device_release;
  hooks.copy = copy_hook;
  hooks.zero = zero_hook;
  hooks.recategorize = recategorize_hook;
  register_device_memory(Device::CUDA, hooks);
}

DeviceBuffer::DeviceBuffer(size_t bytes)
    : ptr_(device_allocate(bytes, MemCategory::Workspace)), bytes_(bytes) {}
DeviceBuffer::~DeviceBuffer() { device_release(ptr_, bytes_, MemCategory::Workspace); }
DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
  other.ptr_ = nullptr;
  other.bytes_ = 0;
}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    device_release(ptr_, bytes_, MemCategory::Workspace);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

MemoryStats device_memory_stats() { return cache().stats(); }
size_t device_bytes_reserved() { return cache().reserved(); }
void reset_device_memory_peaks() { cache().reset_peaks(); }
void release_cached_device_memory() { cache().release_cached(); }

}  // namespace pt::cuda
