// device_memory.cpp: cudaMalloc behind the caching allocator, per-category
// accounting of device tensors, and the Device::CUDA hooks of tensor.hpp
// (allocate, release, cross-device copy, zero), and page-locked host memory
// for asynchronous checkpoints' host copies.
#include "device_memory.hpp"

#include <mpi.h>

#include <string>

#include "check.hpp"
#include "context.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/comm_ledger.hpp"
#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/tensor/caching_allocator.hpp"

namespace pt::cuda {

namespace {

constexpr size_t kGranule = 512;  // sizes rounded up to this (cudaMalloc aligns 256)

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// "rank 3" (MPI world rank) when MPI is running, else "this process".
std::string who() {
  int rank = 0;
  if (!mpi_running() || MPI_Comm_rank(MPI_COMM_WORLD, &rank) != MPI_SUCCESS) return "this process";
  return "rank " + std::to_string(rank);
}

// ", GPU 1234 MiB free of 140000 MiB" (cudaMemGetInfo does not synchronise).
std::string device_free() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return "";
  }
  return ", GPU " + mib(free_bytes) + " free of " + mib(total);
}

// cudaMalloc blocks. When cudaMalloc refuses a request, the allocator gives
// its cache back and retries once (caching_allocator.hpp). cudaFree
// synchronises the device, and the device may be running a NCCL receive whose
// sender waits for this rank; so the device is synchronised first, under a
// DeadlineScope: past the wait limit the watchdog names this wait and ends the
// job instead of letting it hang. At a step boundary (trim) and before a
// rebalancing move (release) no transfer is pending and the wait is short.
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
  // A NCCL receive posted ahead of its send keeps the device busy until the
  // peer sends, which may wait for this rank: never synchronise then.
  bool may_drop_cache() const { return CommLedger::in_flight_anywhere() == 0; }
  void before_dropping_cache() {
    context();
    DeadlineScope deadline("the device synchronisation before pipetrain frees its cached GPU "
                           "memory (a NCCL transfer that cannot complete would block it)");
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  [[noreturn]] void out_of_memory(const OutOfMemoryReport& report) {
    PT_FAIL(who() + ": out of GPU memory " + describe(report) + device_free() +
            ". Use smaller micro-batches (a larger pipeline.micro_batches for the same "
            "training.batch_size), pipeline.recompute = \"selective\", \"full\" or \"auto\", "
            "or more stages");
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

// Page-locked host blocks for asynchronous checkpoints' host copies
// (register_pinned_host_memory); nullptr when the driver refuses, which the
// host allocator reports as out of page-locked memory.
void* pinned_host_allocate(size_t bytes) {
  void* p = nullptr;
  if (cudaHostAlloc(&p, bytes, cudaHostAllocPortable) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}

void pinned_host_release(void* ptr, size_t) { CUDA_CHECK(cudaFreeHost(ptr)); }

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
  PinnedHostHooks pinned;
  pinned.allocate = pinned_host_allocate;
  pinned.release = pinned_host_release;
  register_pinned_host_memory(pinned);
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

double device_free_memory_bytes() {
  size_t free_bytes = 0, total = 0;
  if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0;
  }
  return static_cast<double>(free_bytes);
}
void release_cached_device_memory() { cache().release_cached(); }
void trim_cached_device_memory() { cache().trim(); }

}  // namespace pt::cuda
