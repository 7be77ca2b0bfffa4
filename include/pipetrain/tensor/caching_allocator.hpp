// caching_allocator.hpp: the one caching allocator behind tensor storage, for
// host memory (src/tensor/tensor.cpp) and device memory
// (src/cuda/device_memory.cpp), with live and peak bytes per MemCategory.
//
// Freed blocks are kept and reused by exact (rounded) size: shapes repeat
// every micro-batch, so after the first step no new memory is requested.
// Where the memory comes from is the Source, a type with
//   size_t round(size_t bytes)            // block size for a request; 0 = no block
//   void* obtain(size_t size)             // fresh block, or nullptr when out of memory
//   void give_back(void* ptr, size_t size)
//   void before_dropping_cache()          // e.g. wait for the device to stop using blocks
//   [[noreturn]] void out_of_memory(size_t size, const MemoryStats& live,
//                                   size_t reserved, size_t cached)
// and optionally
//   static constexpr bool kRetryAfterDroppingCache = false;
// When obtain fails, by default (host memory) the cache is dropped once and the
// request retried; a Source that sets kRetryAfterDroppingCache = false gets
// out_of_memory at once instead, its cache untouched. The device does: dropping
// the cache means a device synchronisation first, which can wait forever on a
// NCCL receive whose sender is itself blocked. release_cached() always drops.
// tests/test_caching_allocator.cpp checks both policies with fake sources.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "pipetrain/tensor/tensor.hpp"

namespace pt {

namespace detail {
// Source::kRetryAfterDroppingCache when the Source declares it, else true.
template <class Source, class = void>
struct RetryAfterDroppingCache : std::true_type {};
template <class Source>
struct RetryAfterDroppingCache<Source, std::void_t<decltype(Source::kRetryAfterDroppingCache)>>
    : std::bool_constant<Source::kRetryAfterDroppingCache> {};
}  // namespace detail

template <class Source>
class CachingAllocator {
 public:
  explicit CachingAllocator(Source source = Source()) : source_(std::move(source)) {}

  void* allocate(size_t bytes, MemCategory cat) {
    const size_t size = source_.round(bytes);
    if (size == 0) return nullptr;
    std::lock_guard<std::mutex> lock(mutex_);
    void* ptr = take_cached(size);
    if (ptr == nullptr) ptr = fresh(size);
    count(cat, static_cast<long long>(bytes));
    return ptr;
  }

  void release(void* ptr, size_t bytes, MemCategory cat) {
    if (ptr == nullptr) return;
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t size = source_.round(bytes);
    free_.emplace(size, ptr);
    cached_ += size;
    count(cat, -static_cast<long long>(bytes));
  }

  // Returns every cached (unused) block to the source.
  void release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    drop_cache();
  }

  MemoryStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return stats_;
  }

  // Bytes obtained from the source and not given back (live + cached).
  size_t reserved() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reserved_;
  }

  // Bytes of cached (free, reusable) blocks.
  size_t cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return cached_;
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
    cached_ -= size;
    return ptr;
  }

  void* fresh(size_t size) {
    void* ptr = source_.obtain(size);
    if (ptr == nullptr && detail::RetryAfterDroppingCache<Source>::value) {
      drop_cache();
      ptr = source_.obtain(size);
    }
    if (ptr == nullptr) source_.out_of_memory(size, stats_, reserved_, cached_);
    reserved_ += size;
    return ptr;
  }

  void drop_cache() {
    if (free_.empty()) return;
    source_.before_dropping_cache();
    for (auto& block : free_) {
      source_.give_back(block.second, block.first);
      reserved_ -= block.first;
    }
    free_.clear();
    cached_ = 0;
  }

  void count(MemCategory cat, long long delta) {
    const int c = static_cast<int>(cat);
    stats_.live[c] += delta;
    stats_.live_total += delta;
    if (stats_.live[c] > stats_.peak[c]) stats_.peak[c] = stats_.live[c];
    if (stats_.live_total > stats_.peak_total) stats_.peak_total = stats_.live_total;
  }

  Source source_;
  std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // cached blocks by size
  MemoryStats stats_;
  size_t reserved_ = 0;  // obtained and not given back
  size_t cached_ = 0;    // the part of reserved_ held in free_
};

}  // namespace pt
