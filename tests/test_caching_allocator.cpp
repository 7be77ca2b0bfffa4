// test_caching_allocator.cpp: the policy of the CachingAllocator template
// (include/pipetrain/tensor/caching_allocator.hpp) with a fake memory source
// of limited capacity, no GPU (the device's cudaMalloc source uses the same
// template): blocks are reused by exact rounded size and counted per
// category; when the source refuses a request the whole cache is given back
// and the request retried once (#40 2.4: the device used to fail at once
// with gigabytes cached), and a second refusal reports the bytes requested,
// in use, cached and released; trim() gives back only the blocks no
// allocation reused since the previous trim (a step boundary).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <stdexcept>
#include <string>
#include <vector>

#include "pipetrain/base/timed_wait.hpp"
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
  int ooms = 0;           // out_of_memory calls
  OutOfMemoryReport oom;  // the last one's report
  bool may_drop = true;   // false: a transfer in flight (the source refuses to drop)
};

struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// 64-byte granules carved from a budget: a device of limited capacity.
struct FakeSource {
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
  bool may_drop_cache() const { return ledger->may_drop; }
  void before_dropping_cache() { ++ledger->drops; }
  [[noreturn]] void out_of_memory(const OutOfMemoryReport& report) {
    ++ledger->ooms;
    ledger->oom = report;
    throw OutOfMemory("out of memory " + describe(report));
  }
};

struct Fixture {
  Ledger ledger;
  CachingAllocator<FakeSource> alloc{FakeSource{&ledger}};
  explicit Fixture(size_t budget) { ledger.budget = budget; }
};

TEST(CachingAllocator, ReusesBlocksByExactRoundedSize) {
  Fixture f(1 << 20);
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
  EXPECT_EQ(f.alloc.release_cached(), 128u + 256u);
  EXPECT_EQ(f.alloc.reserved(), 0u);
  EXPECT_EQ(f.ledger.given_back, 2);
  EXPECT_EQ(f.ledger.drops, 1) << "one synchronisation for the whole release";
}

// The case of #40 2.4: the cache holds blocks of other sizes, the source
// has too little left for a new size; giving the cache back makes it fit.
TEST(CachingAllocator, RefusedRequestReleasesTheCacheAndRetriesOnce) {
  Fixture f(1024);
  void* live = f.alloc.allocate(64, MemCategory::Parameters);
  void* a = f.alloc.allocate(256, MemCategory::Workspace);
  void* b = f.alloc.allocate(320, MemCategory::Workspace);
  f.alloc.release(a, 256, MemCategory::Workspace);
  f.alloc.release(b, 320, MemCategory::Workspace);  // 576 cached, 384 left in the budget
  void* c = f.alloc.allocate(900, MemCategory::Workspace);  // 960: fits once the cache is back
  EXPECT_NE(c, nullptr);
  EXPECT_EQ(f.ledger.refused, 1) << "the first attempt, before the release";
  EXPECT_EQ(f.ledger.drops, 1) << "one synchronisation before the blocks were freed";
  EXPECT_EQ(f.ledger.given_back, 2);
  EXPECT_EQ(f.ledger.ooms, 0);
  EXPECT_EQ(f.alloc.cached(), 0u);
  EXPECT_EQ(f.alloc.reserved(), 64u + 960u);
  EXPECT_EQ(f.alloc.stats().live_total, 64u + 900u);
  f.alloc.release(c, 900, MemCategory::Workspace);
  f.alloc.release(live, 64, MemCategory::Parameters);
  f.alloc.release_cached();  // everything back to the source (no leak)
  EXPECT_EQ(f.ledger.budget, 1024u);
}

// The device cache synchronises under a DeadlineScope; single-process
// programs (GoogleTests, bench_cuda stage) never start MPI, and the scope
// must not call MPI then (Open MPI aborts a call before MPI_Init).
TEST(CachingAllocator, ADeadlineScopeNeedsNoMpi) {
  int initialized = 1;
  MPI_Initialized(&initialized);
  ASSERT_EQ(initialized, 0) << "this test program must not start MPI";
  { DeadlineScope deadline("a test wait"); }
  SUCCEED();
}

// With a NCCL transfer in flight a device synchronisation could wait on a
// peer that waits on this rank: the refusal is reported at once, cache kept.
TEST(CachingAllocator, NoReleaseWhileTheSourceSaysDroppingCouldBlock) {
  Fixture f(1024);
  void* a = f.alloc.allocate(256, MemCategory::Workspace);
  f.alloc.release(a, 256, MemCategory::Workspace);  // 256 cached, 768 left
  f.ledger.may_drop = false;
  EXPECT_THROW(f.alloc.allocate(900, MemCategory::Workspace), OutOfMemory);
  EXPECT_EQ(f.ledger.drops, 0) << "no synchronisation while a transfer is in flight";
  EXPECT_EQ(f.ledger.given_back, 0);
  EXPECT_EQ(f.ledger.refused, 1);
  EXPECT_FALSE(f.ledger.oom.retried);
  EXPECT_TRUE(f.ledger.oom.drop_refused);
  EXPECT_EQ(f.ledger.oom.cached, 256u);
  EXPECT_NE(describe(f.ledger.oom).find("NCCL transfer was in flight"), std::string::npos)
      << describe(f.ledger.oom);
  EXPECT_EQ(f.alloc.cached(), 256u);
  f.ledger.may_drop = true;  // the step ended: the retry works again
  void* c = f.alloc.allocate(900, MemCategory::Workspace);
  EXPECT_EQ(f.ledger.drops, 1);
  f.alloc.release(c, 900, MemCategory::Workspace);
  f.alloc.release_cached();
  EXPECT_EQ(f.ledger.budget, 1024u);
}

TEST(CachingAllocator, SecondRefusalReportsRequestedInUseCachedAndReleased) {
  Fixture f(256);
  void* live = f.alloc.allocate(64, MemCategory::Parameters);
  void* a = f.alloc.allocate(128, MemCategory::Workspace);
  f.alloc.release(a, 128, MemCategory::Workspace);  // 128 cached, 64 left in the budget
  try {
    f.alloc.allocate(200, MemCategory::Workspace);  // 256 > 192 even without the cache
    FAIL() << "an allocation larger than the source succeeded";
  } catch (const OutOfMemory& e) {
    const std::string text = e.what();
    EXPECT_NE(text.find("allocating 256 bytes"), std::string::npos) << text;
    EXPECT_NE(text.find("released and retried once"), std::string::npos) << text;
  }
  EXPECT_EQ(f.ledger.refused, 2) << "exactly one retry";
  EXPECT_EQ(f.ledger.drops, 1);
  EXPECT_EQ(f.ledger.ooms, 1);
  EXPECT_EQ(f.ledger.oom.requested, 256u);
  EXPECT_EQ(f.ledger.oom.in_use, 64u);
  EXPECT_EQ(f.ledger.oom.cached, 128u);
  EXPECT_EQ(f.ledger.oom.released, 128u);
  EXPECT_EQ(f.ledger.oom.reserved, 64u);
  EXPECT_TRUE(f.ledger.oom.retried);
  // The failed request left the allocator consistent.
  EXPECT_EQ(f.alloc.stats().live_total, 64u);
  EXPECT_EQ(f.alloc.reserved(), 64u);
  f.alloc.release(live, 64, MemCategory::Parameters);
  f.alloc.release_cached();
  EXPECT_EQ(f.ledger.budget, 256u);
}

TEST(CachingAllocator, NothingCachedMeansNoRetry) {
  Fixture f(128);
  EXPECT_THROW(f.alloc.allocate(200, MemCategory::Workspace), OutOfMemory);
  EXPECT_EQ(f.ledger.refused, 1);
  EXPECT_EQ(f.ledger.drops, 0) << "a synchronisation with nothing to free";
  EXPECT_FALSE(f.ledger.oom.retried);
  EXPECT_EQ(f.ledger.oom.cached, 0u);
}

// trim() at each step boundary: a block reused during the step stays; one
// that sat in the cache from one trim to the next goes back.
TEST(CachingAllocator, TrimGivesBackOnlyBlocksIdleSinceThePreviousTrim) {
  Fixture f(1 << 20);
  void* a = f.alloc.allocate(128, MemCategory::Activations);
  void* b = f.alloc.allocate(640, MemCategory::Workspace);  // a size of this step only
  f.alloc.release(a, 128, MemCategory::Activations);
  f.alloc.release(b, 640, MemCategory::Workspace);
  EXPECT_EQ(f.alloc.trim(), 0u) << "both were used in the step that just ended";
  EXPECT_EQ(f.ledger.drops, 0);
  void* a2 = f.alloc.allocate(128, MemCategory::Activations);  // the next step reuses a only
  EXPECT_EQ(a2, a);
  f.alloc.release(a2, 128, MemCategory::Activations);
  EXPECT_EQ(f.alloc.trim(), 640u);
  EXPECT_EQ(f.ledger.drops, 1);
  EXPECT_EQ(f.ledger.given_back, 1);
  EXPECT_EQ(f.alloc.cached(), 128u);
  EXPECT_EQ(f.alloc.reserved(), 128u);
  EXPECT_EQ(f.alloc.trim(), 128u) << "a was not reused in the step after";
  EXPECT_EQ(f.alloc.reserved(), 0u);
}

}  // namespace
}  // namespace pt
