// device_memory.cpp: cudaMalloc behind a caching allocator, per-category
// accounting of device tensors, and the Device::CUDA hooks of tensor.hpp
// (allocate, release, cross-device copy, zero).
#include "device_memory.hpp"

#include <map>
#include <mutex>
#include <string>

#include "check.hpp"
#include "context.hpp"
#include "pipetrain/cuda.hpp"

namespace pt::cuda {

namespace {

constexpr size_t kGranule = 512;  // sizes rounded up to this (cudaMalloc aligns 256)

size_t rounded(size_t bytes) { return (bytes + kGranule - 1) / kGranule * kGranule; }

class DeviceCache {
 public:
  void* allocate(size_t bytes, MemCategory cat) {
    if (bytes == 0) return nullptr;
    const size_t size = rounded(bytes);
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = take_cached(size);
    if (ptr == nullptr) ptr = fresh(size);
    count(cat, static_cast<long long>(bytes));
    return ptr;
  }

  void release(void* ptr, size_t bytes, MemCategory cat) {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    free_.emplace(rounded(bytes), ptr);
    count(cat, -static_cast<long long>(bytes));
  }

  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_cache();
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }
  size_t reserved() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reserved_;
  }
  void recategorize(size_t bytes, MemCategory from, MemCategory to) {
    std::lock_guard<std::mutex> lock(mutex_);
    count(from, -static_cast<long long>(bytes));
    count(to, static_cast<long long>(bytes));
  }

  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int c = 0; c < static_cast<int>(MemCategory::Count); ++c) stats_.peak[c] = stats_.live[c];
    stats_.peak_total = stats_.live_total;
  }

 private:
  void* take_cached(size_t size) {
    auto it = free_.find(size);
    if (it == free_.end()) return nullptr;
    void* ptr = it->second;
    free_.erase(it);
    return ptr;
  }

  // cudaMalloc; on failure frees the cache (a device synchronisation) and retries.
  void* fresh(size_t size) {
    context();
    void* ptr = nullptr;
    if (cudaMalloc(&ptr, size) != cudaSuccess) {
      (void)cudaGetLastError();
      drop_cache();
      if (cudaMalloc(&ptr, size) != cudaSuccess) {
        (void)cudaGetLastError();
        PT_FAIL("out of GPU memory allocating " + std::to_string(size) + " bytes (" +
                std::to_string(stats_.live_total >> 20) + " MiB live in tensors, " +
                std::to_string(reserved_ >> 20) + " MiB reserved)");
      }
    }
    reserved_ += size;
    return ptr;
  }

  void drop_cache() {
    if (free_.empty()) return;
    context();
    CUDA_CHECK(cudaDeviceSynchronize());
    for (auto& block : free_) {
      CUDA_CHECK(cudaFree(block.second));
      reserved_ -= block.first;
    }
    free_.clear();
  }

  void count(MemCategory cat, long long delta) {
    const int c = static_cast<int>(cat);
    stats_.live[c] += delta;
    stats_.live_total += delta;
    if (stats_.live[c] > stats_.peak[c]) stats_.peak[c] = stats_.live[c];
    if (stats_.live_total > stats_.peak_total) stats_.peak_total = stats_.live_total;
  }

  std::mutex mutex_;
  std::multimap<size_t, void*> free_;
  MemoryStats stats_;
  size_t reserved_ = 0;
};

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
