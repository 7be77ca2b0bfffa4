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
//   bool may_drop_cache()                 // false while dropping could block (a NCCL
//                                         // transfer in flight that the device waits on)
//   void before_dropping_cache()          // e.g. wait (bounded) for the device to stop using blocks
//   [[noreturn]] void out_of_memory(const OutOfMemoryReport& report)
// Cached blocks of other sizes are memory too. So when the source refuses a
// request and the cache holds anything, every cached block is given back
// and the request retried once (unless the source says dropping may block:
// then the refusal is reported at once, and the step's trim frees the cache);
// only a second refusal reaches out_of_memory, whose report names the bytes
// requested, in use, cached and released.
// Besides: release_cached() gives the whole cache back (before a rebalancing
// move, whose tensors have new sizes), and trim() the blocks no allocation
// reused since the previous trim (at step boundaries: a size the last step
// did not use, from a move or a probe, is not coming back).
// tests/test_caching_allocator.cpp checks the policy with fake sources.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "pipetrain/tensor/tensor.hpp"

namespace pt {

// What a request the source refused twice was up against.
struct OutOfMemoryReport {
  size_t requested = 0;  // bytes asked for, rounded to the source's block size
  size_t in_use = 0;     // bytes live in tensors
  size_t cached = 0;     // bytes in cached blocks when the source first refused
  size_t released = 0;   // cached bytes given back before the retry (all of them)
  size_t reserved = 0;   // bytes still obtained from the source (in use, rounded)
  bool retried = false;  // false: nothing was cached, or dropping could block
  bool drop_refused = false;  // the source refused to drop (a transfer in flight)
};

// "allocating 4096 bytes (0 MiB in use in tensors, 3 MiB cached: released
// and retried once, 0 MiB still reserved)": the allocator's part of an
// out-of-memory message; the Source adds who and what to change.
inline std::string describe(const OutOfMemoryReport& r) {
  const auto mib = [](size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; };
  return "allocating " + std::to_string(r.requested) + " bytes (" + mib(r.in_use) +
         " in use in tensors, " + mib(r.cached) + " cached: " +
         (r.retried        ? "released and retried once"
          : r.drop_refused ? "kept, since a NCCL transfer was in flight and freeing would wait "
                             "on it; the end of the step frees it"
                           : "nothing to release") +
         ", " +
         mib(r.reserved) + " still reserved)";
}

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
    free_.emplace(size, Cached{ptr, epoch_});
    cached_ += size;
    count(cat, -static_cast<long long>(bytes));
  }

  // Returns every cached (unused) block to the source; the bytes given back.
  size_t release_cached() {
    std::lock_guard<std::mutex> lock(mutex_);
    return drop_cached_before(kEveryEpoch);
  }

  // Returns the cached blocks that no allocation took since the previous
  // trim (they sat in the cache through a whole step); the bytes given back.
  size_t trim() {
    std::lock_guard<std::mutex> lock(mutex_);
    const size_t dropped = drop_cached_before(epoch_);
    ++epoch_;
    return dropped;
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

  // Counts bytes obtained elsewhere (page-locked host blocks, tensor.cpp)
  // under `cat`, so that one set of statistics covers all host memory.
  void account(MemCategory cat, long long bytes) {
    std::lock_guard<std::mutex> lock(mutex_);
    count(cat, bytes);
  }

  void reset_peaks() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int c = 0; c < static_cast<int>(MemCategory::Count); ++c) stats_.peak[c] = stats_.live[c];
    stats_.peak_total = stats_.live_total;
  }

 private:
  struct Cached {
    void* ptr;
    unsigned long long epoch;  // trims before it was released
  };
  static constexpr unsigned long long kEveryEpoch = ~0ull;

  void* take_cached(size_t size) {
    auto it = free_.find(size);
    if (it == free_.end()) return nullptr;
    void* ptr = it->second.ptr;
    free_.erase(it);
    cached_ -= size;
    return ptr;
  }

  // A block from the source; when it refuses, the cache is given back and
  // the request retried once before out_of_memory.
  void* fresh(size_t size) {
    void* ptr = source_.obtain(size);
    if (ptr == nullptr) {
      OutOfMemoryReport report;
      report.requested = size;
      report.in_use = stats_.live_total;
      report.cached = cached_;
      report.drop_refused = cached_ > 0 && !source_.may_drop_cache();
      report.retried = cached_ > 0 && !report.drop_refused;
      if (report.retried) {
        report.released = drop_cached_before(kEveryEpoch);
        ptr = source_.obtain(size);
      }
      report.reserved = reserved_;
      if (ptr == nullptr) source_.out_of_memory(report);
    }
    reserved_ += size;
    return ptr;
  }

  // Gives back the cached blocks released before trim number `epoch`.
  size_t drop_cached_before(unsigned long long epoch) {
    bool any = false;
    for (const auto& block : free_) any = any || block.second.epoch < epoch;
    if (!any) return 0;
    source_.before_dropping_cache();
    size_t dropped = 0;
    for (auto it = free_.begin(); it != free_.end();) {
      if (it->second.epoch >= epoch) {
        ++it;
        continue;
      }
      source_.give_back(it->second.ptr, it->first);
      dropped += it->first;
      it = free_.erase(it);
    }
    reserved_ -= dropped;
    cached_ -= dropped;
    return dropped;
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
  std::multimap<size_t, Cached> free_;  // cached blocks by size
  MemoryStats stats_;
  size_t reserved_ = 0;  // obtained and not given back
  size_t cached_ = 0;    // the part of reserved_ held in free_
  unsigned long long epoch_ = 0;  // trims so far
};

}  // namespace pt
