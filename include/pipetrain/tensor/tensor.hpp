// tensor.hpp: dense tensors that know their device, dtype and memory category.
//
// A Tensor is a shape plus a shared, reference-counted block of storage.
// Storage comes from a caching allocator (blocks of the same size are reused,
// so a training step does not page-fault on fresh memory) and every live byte
// is counted under a MemCategory, so that per-stage memory can be reported.
// Only Device::CPU storage is allocated here. Device::CUDA storage comes from
// hooks that the CUDA library registers (pt::cuda::select_device /
// init_device), so a CPU-only build has no CUDA symbols; device bytes are
// counted by that library (pt::cuda::device_memory_stats), not here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace pt {

enum class Device { CPU, CUDA };
// BF16 and F16 hold the raw 2-byte bits of a bfloat16 or IEEE half value:
// the low-precision weight copies of mixed precision (model/weight_copies.hpp).
enum class DType { F32, I32, BF16, F16 };
// CheckpointStaging: the host copy of an asynchronous checkpoint while its
// background write is in flight (output.checkpoint_async).
enum class MemCategory { Parameters, Gradients, OptimizerState, Activations, Workspace, CheckpointStaging, Count };

size_t dtype_size(DType dtype);
const char* dtype_name(DType dtype);  // "f32" | "i32" | "bf16" | "f16"
const char* category_name(MemCategory cat);

using Shape = std::vector<int64_t>;
std::string shape_string(const Shape& shape);  // "(8, 512)"
int64_t shape_numel(const Shape& shape);

struct Storage;  // defined in tensor.cpp

// Storage of a non-CPU device, registered by the library that drives it.
struct DeviceMemoryHooks {
  void* (*allocate)(size_t bytes, MemCategory cat) = nullptr;
  void (*release)(void* ptr, size_t bytes, MemCategory cat) = nullptr;
  // Copies bytes from src (on src_dev) to dst (on dst_dev); at most one side is
  // the CPU. Host memory may be reused when it returns; device memory is
  // ordered with the device's compute stream.
  void (*copy)(void* dst, Device dst_dev, const void* src, Device src_dev, size_t bytes) = nullptr;
  void (*zero)(void* ptr, size_t bytes) = nullptr;  // in compute-stream order
  // Moves `bytes` from one category's count to another's (Tensor::retag).
  void (*recategorize)(size_t bytes, MemCategory from, MemCategory to) = nullptr;
};
void register_device_memory(Device dev, const DeviceMemoryHooks& hooks);
bool device_memory_registered(Device dev);

// Page-locked host memory, registered by the accelerator's library (the CUDA
// library: cudaHostAlloc / cudaFreeHost). While registered, host tensors of
// MemCategory::CheckpointStaging (an asynchronous checkpoint's host copy) come
// from it, so the device-to-host copy of a save is a DMA at full link speed and
// does not pass through a driver bounce buffer. They are cached like other host
// blocks and counted in memory_stats() under their category as usual.
// Registering empty hooks goes back to ordinary memory (allowed only while no
// page-locked block is live).
struct PinnedHostHooks {
  void* (*allocate)(size_t bytes) = nullptr;  // nullptr when out of page-locked memory
  void (*release)(void* ptr, size_t bytes) = nullptr;
};
void register_pinned_host_memory(const PinnedHostHooks& hooks);
bool pinned_host_memory_registered();
// Bytes of page-locked host memory live in tensors (this process).
size_t pinned_host_bytes_live();
const char* device_name(Device dev);  // "cpu" | "cuda"

class Tensor {
 public:
  Tensor() = default;
  // Uninitialised storage. The device defaults to the host for tests and
  // host-only code; every allocation in src/ names its device (checked by
  // tests/check_layers.sh), taken from the backend or the tensor it is
  // shaped like, so none depends on where the caller happens to run.
  static Tensor empty(const Shape& shape, DType dtype = DType::F32,
                      MemCategory cat = MemCategory::Workspace, Device dev = Device::CPU);
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32,
                      MemCategory cat = MemCategory::Workspace, Device dev = Device::CPU);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const;          // negative i counts from the end
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t bytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const;
  MemCategory category() const;

  // Rows x cols view: all leading dimensions folded into rows.
  int64_t rows() const { return numel() / (shape_.empty() ? 1 : shape_.back()); }
  int64_t cols() const { return shape_.empty() ? 1 : shape_.back(); }

  float* f32();
  const float* f32() const;
  int32_t* i32();
  const int32_t* i32() const;
  // The 2-byte elements of a BF16 or F16 tensor.
  uint16_t* bits16();
  const uint16_t* bits16() const;
  void* raw();
  const void* raw() const;

  // Same storage, another shape with the same element count.
  Tensor reshaped(const Shape& shape) const;
  // A deep copy in a (possibly different) memory category, on the same device.
  Tensor clone(MemCategory cat) const;
  // A deep copy on `dev` (this tensor itself when it is already there).
  Tensor to(Device dev) const;
  Tensor to(Device dev, MemCategory cat) const;  // always a copy
  // Counts this tensor's storage under another category from now on (e.g. a
  // workspace output that the executor keeps for backward becomes an
  // activation). Shared storage is re-counted once.
  void retag(MemCategory cat);
  // True for host storage from page-locked memory (register_pinned_host_memory).
  bool pinned() const;

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  DType dtype_ = DType::F32;
};

// dst := src, byte for byte, between any two devices (same byte count).
void copy_tensor(const Tensor& src, Tensor& dst);
// dst[first_row : first_row + src.dim(0)] := src along dim 0, on one device:
// src's rows have the byte size of dst's (stacking micro-batches).
void copy_rows_into(const Tensor& src, Tensor& dst, int64_t first_row);

// Live and peak bytes of CPU tensors per category, for this process.
struct MemoryStats {
  size_t live[static_cast<int>(MemCategory::Count)] = {};
  size_t peak[static_cast<int>(MemCategory::Count)] = {};
  size_t live_total = 0;
  size_t peak_total = 0;
};
MemoryStats memory_stats();
void reset_memory_peaks();  // peaks := current live values
// Frees cached (unused) blocks of the caching allocator.
void release_cached_memory();

}  // namespace pt
