// pinned_pool.cpp: the size-keyed cache of page-locked host buffers.
#include "pinned_pool.hpp"

#include <cuda_runtime.h>

#include <map>
#include <mutex>

#include "check.hpp"
#include "context.hpp"

namespace pt::cuda {

namespace {

std::mutex g_pinned_mutex;
std::multimap<size_t, void*>* g_pinned_free = new std::multimap<size_t, void*>();  // never freed
size_t g_retired_bytes = 0;  // retired buffers are leaked on purpose

void* take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    auto it = g_pinned_free->find(bytes);
    if (it != g_pinned_free->end()) {
      void* p = it->second;
      g_pinned_free->erase(it);
      return p;
    }
  }
  context();
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}

void give_back(void* p, size_t bytes) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  g_pinned_free->emplace(bytes, p);
}

}  // namespace

void PinnedBuffer::retire() {
  if (ptr_ != nullptr) {
    std::lock_guard<std::mutex> lock(g_pinned_mutex);
    g_retired_bytes += bytes_;
  }
  ptr_ = nullptr;
  bytes_ = 0;
}

size_t retired_pinned_bytes() {
  std::lock_guard<std::mutex> lock(g_pinned_mutex);
  return g_retired_bytes;
}

PinnedBuffer::PinnedBuffer(size_t bytes) : ptr_(bytes ? take(bytes) : nullptr), bytes_(bytes) {}
PinnedBuffer::~PinnedBuffer() { give_back(ptr_, bytes_); }
PinnedBuffer::PinnedBuffer(PinnedBuffer&& other) noexcept : ptr_(other.ptr_), bytes_(other.bytes_) {
  other.ptr_ = nullptr;
  other.bytes_ = 0;
}
PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& other) noexcept {
  if (this != &other) {
    give_back(ptr_, bytes_);
    ptr_ = other.ptr_;
    bytes_ = other.bytes_;
    other.ptr_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

}  // namespace pt::cuda
