// tensor.cpp: CPU storage from the caching allocator (caching_allocator.hpp)
// with memory accounting; the registry of device-memory hooks (filled by the CUDA library when built)
// and of page-locked host memory for asynchronous checkpoints' host copies.
#include "pipetrain/tensor/tensor.hpp"

#include <cstdlib>
#include <cstring>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/caching_allocator.hpp"

namespace pt {

namespace {

constexpr size_t kAlignment = 64;  // cache line; also suits AVX-512 loads

// Host blocks: 64-byte aligned, sizes padded to the alignment (a 0-byte
// tensor still gets a block, so its data pointer is never null).
struct HostSource {
  size_t round(size_t bytes) const {
    return bytes == 0 ? kAlignment : (bytes + kAlignment - 1) / kAlignment * kAlignment;
  }
  void* obtain(size_t size) { return std::aligned_alloc(kAlignment, size); }
  void give_back(void* ptr, size_t) { std::free(ptr); }
  bool may_drop_cache() const { return true; }
  void before_dropping_cache() {}
  [[noreturn]] void out_of_memory(const OutOfMemoryReport& report) {
    PT_FAIL("out of host memory " + describe(report));
  }
};

using HostAllocator = CachingAllocator<HostSource>;

HostAllocator& allocator() {
  static HostAllocator* instance = new HostAllocator();  // never destroyed
  return *instance;
}

PinnedHostHooks g_pinned_hooks;

// Page-locked host blocks (register_pinned_host_memory), cached by size like
// HostSource's; their bytes are counted in allocator()'s statistics.
struct PinnedHostSource {
  size_t round(size_t bytes) const { return HostSource().round(bytes); }
  void* obtain(size_t size) { return g_pinned_hooks.allocate(size); }
  void give_back(void* ptr, size_t size) { g_pinned_hooks.release(ptr, size); }
  bool may_drop_cache() const { return true; }
  void before_dropping_cache() {}
  [[noreturn]] void out_of_memory(const OutOfMemoryReport& report) {
    PT_FAIL("out of page-locked host memory (an asynchronous checkpoint's host copy) " +
            describe(report));
  }
};

using PinnedAllocator = CachingAllocator<PinnedHostSource>;

PinnedAllocator& pinned_allocator() {
  static PinnedAllocator* instance = new PinnedAllocator();  // never destroyed
  return *instance;
}

bool use_pinned(Device dev, MemCategory cat) {
  return dev == Device::CPU && cat == MemCategory::CheckpointStaging && g_pinned_hooks.allocate != nullptr;
}

constexpr int kDevices = 2;  // Device::CPU, Device::CUDA
DeviceMemoryHooks g_device_hooks[kDevices];

const DeviceMemoryHooks& hooks_of(Device dev) {
  const DeviceMemoryHooks& h = g_device_hooks[static_cast<int>(dev)];
  PT_CHECK(h.allocate != nullptr, std::string("no memory registered for device '") +
                                      device_name(dev) +
                                      "' (CPU-only build, or pt::cuda::select_device not called)");
  return h;
}

}  // namespace

const char* device_name(Device dev) { return dev == Device::CPU ? "cpu" : "cuda"; }

void register_device_memory(Device dev, const DeviceMemoryHooks& hooks) {
  PT_CHECK(dev != Device::CPU, "CPU memory is built in");
  PT_CHECK(hooks.allocate && hooks.release && hooks.copy && hooks.zero && hooks.recategorize,
           "incomplete hooks");
  g_device_hooks[static_cast<int>(dev)] = hooks;
}

bool device_memory_registered(Device dev) {
  return dev == Device::CPU || g_device_hooks[static_cast<int>(dev)].allocate != nullptr;
}

void register_pinned_host_memory(const PinnedHostHooks& hooks) {
  PT_CHECK((hooks.allocate == nullptr) == (hooks.release == nullptr), "incomplete pinned-memory hooks");
  PT_CHECK(pinned_host_bytes_live() == 0, "page-locked host memory changed while tensors use it");
  pinned_allocator().release_cached();  // blocks of the previous hooks go back to them
  g_pinned_hooks = hooks;
}

bool pinned_host_memory_registered() { return g_pinned_hooks.allocate != nullptr; }

size_t pinned_host_bytes_live() { return pinned_allocator().stats().live_total; }

struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  MemCategory category = MemCategory::Workspace;
  Device device = Device::CPU;
  bool pinned = false;  // host storage from pinned_allocator()
  Storage(size_t n, MemCategory cat, Device dev)
      : bytes(n), category(cat), device(dev), pinned(use_pinned(dev, cat)) {
    if (pinned) {
      data = pinned_allocator().allocate(n, cat);
      allocator().account(cat, static_cast<long long>(n));
    } else {
      data = dev == Device::CPU ? allocator().allocate(n, cat) : hooks_of(dev).allocate(n, cat);
    }
  }
  ~Storage() {
    if (pinned) {
      pinned_allocator().release(data, bytes, category);
      allocator().account(category, -static_cast<long long>(bytes));
    } else if (device == Device::CPU) {
      allocator().release(data, bytes, category);
    } else {
      g_device_hooks[static_cast<int>(device)].release(data, bytes, category);
    }
  }
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::I32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::I32: return "i32";
    case DType::BF16: return "bf16";
    case DType::F16: return "f16";
  }
  return "?";
}

const char* category_name(MemCategory cat) {
  switch (cat) {
    case MemCategory::Parameters: return "parameters";
    case MemCategory::Gradients: return "gradients";
    case MemCategory::OptimizerState: return "optimizer_state";
    case MemCategory::Activations: return "activations";
    case MemCategory::Workspace: return "workspace";
    case MemCategory::CheckpointStaging: return "checkpoint_staging";
    case MemCategory::Count: break;
  }
  return "?";
}

std::string shape_string(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Tensor Tensor::empty(const Shape& shape, DType dtype, MemCategory cat, Device dev) {
  for (int64_t d : shape) PT_CHECK(d >= 0, "negative dimension in " + shape_string(shape));
  Tensor t;
  t.shape_ = shape;
  t.dtype_ = dtype;
  t.storage_ = std::make_shared<Storage>(t.bytes(), cat, dev);
  return t;
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, MemCategory cat, Device dev) {
  Tensor t = empty(shape, dtype, cat, dev);
  if (dev == Device::CPU) std::memset(t.raw(), 0, t.bytes());
  else hooks_of(dev).zero(t.raw(), t.bytes());
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? n + i : i;
  PT_CHECK(j >= 0 && j < n, "dim " + std::to_string(i) + " of " + shape_string(shape_));
  return shape_[j];
}

Device Tensor::device() const { return storage_ ? storage_->device : Device::CPU; }
bool Tensor::pinned() const { return storage_ && storage_->pinned; }
MemCategory Tensor::category() const {
  return storage_ ? storage_->category : MemCategory::Workspace;
}

void* Tensor::raw() { return storage_ ? storage_->data : nullptr; }
const void* Tensor::raw() const { return storage_ ? storage_->data : nullptr; }

float* Tensor::f32() {
  PT_CHECK(dtype_ == DType::F32, "tensor is not f32");
  return static_cast<float*>(raw());
}
const float* Tensor::f32() const {
  PT_CHECK(dtype_ == DType::F32, "tensor is not f32");
  return static_cast<const float*>(raw());
}
int32_t* Tensor::i32() {
  PT_CHECK(dtype_ == DType::I32, "tensor is not i32");
  return static_cast<int32_t*>(raw());
}
const int32_t* Tensor::i32() const {
  PT_CHECK(dtype_ == DType::I32, "tensor is not i32");
  return static_cast<const int32_t*>(raw());
}

uint16_t* Tensor::bits16() {
  PT_CHECK(dtype_ == DType::BF16 || dtype_ == DType::F16,
           std::string("tensor is ") + dtype_name(dtype_) + ", not bf16 or f16");
  return static_cast<uint16_t*>(raw());
}
const uint16_t* Tensor::bits16() const {
  PT_CHECK(dtype_ == DType::BF16 || dtype_ == DType::F16,
           std::string("tensor is ") + dtype_name(dtype_) + ", not bf16 or f16");
  return static_cast<const uint16_t*>(raw());
}

Tensor Tensor::reshaped(const Shape& shape) const {
  PT_CHECK(shape_numel(shape) == numel(),
           "cannot reshape " + shape_string(shape_) + " to " + shape_string(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

void Tensor::retag(MemCategory cat) {
  if (!storage_ || storage_->category == cat) return;
  if (storage_->pinned) pinned_allocator().recategorize(storage_->bytes, storage_->category, cat);
  if (storage_->device == Device::CPU)
    allocator().recategorize(storage_->bytes, storage_->category, cat);
  else
    hooks_of(storage_->device).recategorize(storage_->bytes, storage_->category, cat);
  storage_->category = cat;
}

Tensor Tensor::clone(MemCategory cat) const { return to(device(), cat); }

Tensor Tensor::to(Device dev) const { return dev == device() ? *this : to(dev, category()); }

Tensor Tensor::to(Device dev, MemCategory cat) const {
  if (!defined()) return Tensor();
  Tensor t = empty(shape_, dtype_, cat, dev);
  copy_tensor(*this, t);
  return t;
}

namespace {

// `bytes` from src (on `from`) to dst (on `to`): memcpy between host
// buffers, else the accelerator's copy hook.
void copy_bytes(void* dst, Device to, const void* src, Device from, size_t bytes) {
  if (bytes == 0) return;
  if (from == Device::CPU && to == Device::CPU) {
    std::memcpy(dst, src, bytes);
    return;
  }
  PT_CHECK(from == Device::CPU || to == Device::CPU || from == to,
           "a copy between two different accelerators");
  hooks_of(from == Device::CPU ? to : from).copy(dst, to, src, from, bytes);
}

}  // namespace

void copy_tensor(const Tensor& src, Tensor& dst) {
  PT_CHECK(src.bytes() == dst.bytes(), "copy_tensor: " + shape_string(src.shape()) + " to " +
                                           shape_string(dst.shape()));
  copy_bytes(dst.raw(), dst.device(), src.raw(), src.device(), src.bytes());
}

void copy_rows_into(const Tensor& src, Tensor& dst, int64_t first_row) {
  PT_CHECK(src.ndim() > 0 && dst.ndim() > 0 && src.dtype() == dst.dtype() &&
               src.device() == dst.device(),
           "copy_rows_into: " + shape_string(src.shape()) + " into " + shape_string(dst.shape()));
  const size_t row_bytes = dst.bytes() / static_cast<size_t>(dst.dim(0));
  PT_CHECK(src.bytes() == row_bytes * static_cast<size_t>(src.dim(0)) && first_row >= 0 &&
               first_row + src.dim(0) <= dst.dim(0),
           "copy_rows_into: " + shape_string(src.shape()) + " at row " + std::to_string(first_row) +
               " of " + shape_string(dst.shape()));
  if (src.bytes() == 0) return;
  char* at = static_cast<char*>(dst.raw()) + row_bytes * static_cast<size_t>(first_row);
  copy_bytes(at, dst.device(), src.raw(), src.device(), src.bytes());
}

MemoryStats memory_stats() { return allocator().stats(); }
void reset_memory_peaks() { allocator().reset_peaks(); }
void release_cached_memory() {
  allocator().release_cached();
  pinned_allocator().release_cached();
}

}  // namespace pt
