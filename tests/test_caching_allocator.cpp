// test_caching_allocator.cpp: the policy of the CachingAllocator template
// (include/pipetrain/tensor/caching_allocator.hpp) with fake memory sources,
// no GPU: blocks are reused by exact rounded size and counted per category;
// when the source is out of memory, a source that allows it has its cache
// dropped and the request retried once, while a source that forbids it (the
// device: dropping would synchronise the device, which can wait forever on a
// NCCL receive) fails at once, with its cache untouched and the numbers its
// message needs.
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetrain/tensor/caching_allocator.hpp"

namespace pt {
namespace {

// What a fake source was asked to do, shared by the copies of the source.
struct Ledger {
  size_t budget = 0;      // bytes the fake "device" can still hand out
  int obtained = 0;       // successful obtain calls
  int refused = 0;        // failed obtain calls
  int given_back = 0;
  int drops = 0;          // before_dropping_cache calls (a device synchronisation)
  size_t oom_size = 0, oom_reserved = 0, oom_cached = 0, oom_live = 0;
};

struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The common part: 64-byte granules carved from a budget.
struct FakeSourceBase {
  Ledger* ledger;
  size_t round(size_t bytes) const { return bytes == 0 ? 0 : (bytes + 63) / 64 * 64; }
  void* obtain(size_t size) {
    if (size > ledger->budget) {
      ++ledger->refused;
      return nullptr;
    }
    ledger->budget -= size;
    ++ledger->obtained;
    return std::malloc(size);
  }
  void give_back(void* ptr, size_t size) {
    ledger->budget += size;
    ++ledger->given_back;
    std::free(ptr);
  }
  void before_dropping_cache() { ++ledger->drops; }
  [[noreturn]] void out_of_memory(size_t size, const MemoryStats& live, size_t reserved,
                                  size_t cached) {
    ledger->oom_size = size;
    ledger->oom_live = live.live_total;
    ledger->oom_reserved = reserved;
    ledger->oom_cached = cached;
    throw OutOfMemory("out of memory");
  }
};

// Says nothing about retrying: the default (host memory) policy applies.
struct RetryingSource : FakeSourceBase {};

// The device's policy: never drop the cache to retry.
struct FailFastSource : FakeSourceBase {
  static constexpr bool kRetryAfterDroppingCache = false;
};

template <class Source>
struct Fixture {
  Ledger ledger;
  CachingAllocator<Source> alloc{Source{{&ledger}}};
  explicit Fixture(size_t budget) { ledger.budget = budget; }
};

TEST(CachingAllocator, ReusesBlocksByExactRoundedSize) {
  Fixture<RetryingSource> f(1 << 20);
  void* a = f.alloc.allocate(100, MemCategory::Activations);  // 128-byte block
  f.alloc.release(a, 100, MemCategory::Activations);
  EXPECT_EQ(f.alloc.cached(), 128u);
  void* b = f.alloc.allocate(120, MemCategory::Gradients);  // same block size: reused
  EXPECT_EQ(a, b);
  EXPECT_EQ(f.ledger.obtained, 1);
  EXPECT_EQ(f.alloc.cached(), 0u);
  void* c = f.alloc.allocate(200, MemCategory::Gradients);  // another size: fresh
  EXPECT_EQ(f.ledger.obtained, 2);
  EXPECT_EQ(f.alloc.stats().live[static_cast<int>(MemCategory::Gradients)], 320u);
  EXPECT_EQ(f.alloc.reserved(), 128u + 256u);
  f.alloc.release(b, 120, MemCategory::Gradients);
  f.alloc.release(c, 200, MemCategory::Gradients);
  EXPECT_EQ(f.alloc.stats().live_total, 0u);
  f.alloc.release_cached();
  EXPECT_EQ(f.alloc.reserved(), 0u);
  EXPECT_EQ(f.ledger.given_back, 2);
}

TEST(CachingAllocator, DefaultPolicyDropsTheCacheAndRetriesOnce) {
  Fixture<RetryingSource> f(256);
  void* a = f.alloc.allocate(128, MemCategory::Workspace);
  f.alloc.release(a, 128, MemCategory::Workspace);  // 128 cached, 128 left in the budget
  void* b = f.alloc.allocate(256, MemCategory::Workspace);  // fits only once the cache is gone
  EXPECT_NE(b, nullptr);
  EXPECT_EQ(f.ledger.drops, 1);
  EXPECT_EQ(f.ledger.refused, 1);
  EXPECT_EQ(f.ledger.given_back, 1);
  EXPECT_EQ(f.alloc.reserved(), 256u);
  f.alloc.release(b, 256, MemCategory::Workspace);
  f.alloc.release_cached();  // the block goes back to the source (no leak)
}

TEST(CachingAllocator, FailFastPolicyNeverDropsTheCache) {
  Fixture<FailFastSource> f(256);
  void* live = f.alloc.allocate(64, MemCategory::Parameters);
  void* a = f.alloc.allocate(128, MemCategory::Workspace);
  f.alloc.release(a, 128, MemCategory::Workspace);  // 128 cached, 64 left in the budget
  EXPECT_THROW(f.alloc.allocate(200, MemCategory::Workspace), OutOfMemory);
  EXPECT_EQ(f.ledger.drops, 0) << "the device was synchronised to drop the cache";
  EXPECT_EQ(f.ledger.given_back, 0);
  EXPECT_EQ(f.ledger.refused, 1) << "exactly one attempt, no retry";
  EXPECT_EQ(f.ledger.oom_size, 256u);
  EXPECT_EQ(f.ledger.oom_live, 64u);
  EXPECT_EQ(f.ledger.oom_reserved, 192u);
  EXPECT_EQ(f.ledger.oom_cached, 128u);
  // The failed request changed nothing: the cached block is still reused.
  EXPECT_EQ(f.alloc.stats().live_total, 64u);
  void* again = f.alloc.allocate(128, MemCategory::Workspace);
  EXPECT_EQ(again, a);
  f.alloc.release(again, 128, MemCategory::Workspace);
  f.alloc.release(live, 64, MemCategory::Parameters);
  f.alloc.release_cached();  // an explicit release still drops (and "synchronises")
  EXPECT_EQ(f.ledger.drops, 1);
  EXPECT_EQ(f.alloc.reserved(), 0u);
}

}  // namespace
}  // namespace pt
