// test_cuda_runtime.cpp: the GPU side of two of issue #40's fixes, which the
// CPU tests prove only with fakes (docs/cuda.md, "Issue #40's fixes"):
//   2.2 the CUDA backend's ComputeTimer (Backend::make_timer, events on the
//       compute stream) measures the kernels' time, not their launches'; the
//       regions of one step come back in order from one read(); the timer is
//       reused step after step;
//   2.4 the device caching allocator, on the real cudaMalloc: a request that
//       fits only once the cache is given back succeeds (release and retry),
//       a request larger than the GPU fails with the "out of GPU memory"
//       Error naming the bytes, and the step-boundary trim gives back exactly
//       the blocks idle since the previous trim.
// And issue #44's pinned staging: an asynchronous checkpoint's host copy
// (MemCategory::CheckpointStaging) is page-locked memory from cudaHostAlloc,
// other host tensors are not, and a device tensor copied into it arrives
// bitwise.
// Single process, device 0. Sizes derive from cudaMemGetInfo at the start, so
// memory used by others on the device is tolerated; the test gives back all
// it took. Timing checks have wide margins (factors of 2 to 4). Skips without
// a GPU (fails under PIPETRAIN_REQUIRE_GPU=1), as every CUDA test does.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "test_cuda_util.hpp"

namespace pt {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// ---- 2.2: the ComputeTimer on the GPU ----

// Square fp32 GEMMs through the backend's matmul (cuBLAS on the compute
// stream). A "unit" is `per_unit` GEMMs, calibrated to about 20 ms of GPU
// time, so the timed regions are long against launch costs whatever the GPU.
class GemmWork {
 public:
  GemmWork() : be_(cuda::make_backend()) {
    const Shape shape{kN, kN};
    a_ = Tensor::zeros(shape, DType::F32, MemCategory::Workspace, Device::CUDA);
    b_ = Tensor::zeros(shape, DType::F32, MemCategory::Workspace, Device::CUDA);
    c_ = Tensor::zeros(shape, DType::F32, MemCategory::Workspace, Device::CUDA);
    be_->fill(a_, 0.01f);
    be_->fill(b_, 0.02f);
    gemms(1);  // warm-up: cuBLAS's first call on a shape picks its kernel
    cuda::synchronize();
    const double t0 = now_s();
    gemms(2);
    cuda::synchronize();
    const double one = (now_s() - t0) / 2;
    per_unit_ = std::clamp(static_cast<int>(std::ceil(0.02 / std::max(one, 1e-6))), 1, 16);
    std::printf("  one %lldx%lld fp32 GEMM: %.2f ms; a unit is %d GEMM(s)\n",
                static_cast<long long>(kN), static_cast<long long>(kN), one * 1e3, per_unit_);
  }

  Backend& backend() { return *be_; }

  // Queues `units` units of GEMMs; returns at once (no synchronisation).
  void launch(int units) { gemms(units * per_unit_); }

  // Host time of `units` units with the device synchronised before and after.
  double synced_seconds(int units) {
    cuda::synchronize();
    const double t0 = now_s();
    launch(units);
    cuda::synchronize();
    return now_s() - t0;
  }

 private:
  static constexpr int64_t kN = 8192;  // 1.1 TFLOP per GEMM: ~20 ms on an H100 in fp32
  void gemms(int count) {
    for (int i = 0; i < count; ++i) be_->matmul(a_, false, b_, false, c_, 1.f, 0.f);
  }

  std::unique_ptr<Backend> be_;
  Tensor a_, b_, c_;
  int per_unit_ = 1;
};

void print_regions(const char* what, const std::vector<double>& s) {
  std::printf("  %s:", what);
  for (double v : s) std::printf(" %.2f ms", v * 1e3);
  std::printf("\n");
}

// Regions of the given units, with `gap` untimed units after each but the
// last, then one read(). Returns the readings; *host_s (optional) gets the
// host time from the first begin() to the end of read().
std::vector<double> timed_step(GemmWork& work, ComputeTimer& timer, const std::vector<int>& units,
                               int gap, double* host_s = nullptr) {
  cuda::synchronize();
  const double t0 = now_s();
  for (size_t i = 0; i < units.size(); ++i) {
    timer.begin();
    work.launch(units[i]);
    timer.end();
    if (i + 1 < units.size()) work.launch(gap);
  }
  std::vector<double> seconds = timer.read();
  if (host_s != nullptr) *host_s = now_s() - t0;
  return seconds;
}

TEST(CudaComputeTimer, MeasuresKernelTimeNotLaunchTime) {
  PT_REQUIRE_GPU();
  GemmWork work;
  const int units = 10;  // about 200 ms of GPU time
  const double synced = work.synced_seconds(units);

  std::unique_ptr<ComputeTimer> timer = work.backend().make_timer();
  cuda::synchronize();
  timer->begin();
  const double t0 = now_s();
  work.launch(units);
  const double launch_s = now_s() - t0;
  timer->end();
  const double t1 = now_s();
  const std::vector<double> s = timer->read();
  const double read_s = now_s() - t1;

  ASSERT_EQ(s.size(), 1u);
  std::printf("  same work: synchronised host clock %.1f ms, timer %.1f ms, launches alone "
              "%.3f ms, read() waited %.1f ms\n",
              synced * 1e3, s[0] * 1e3, launch_s * 1e3, read_s * 1e3);
  // The timer sees the kernels' time: at least half of the synchronised host
  // time of the same work, and not wildly more (a unit error would be 1000x).
  EXPECT_GE(s[0], 0.5 * synced) << "the timer reads less than half of the kernels' time";
  EXPECT_LE(s[0], 2.0 * synced + 0.05);
  // The launches alone take a small part of it: a host clock around the
  // region (what the executor measured before the fix) would miss the work.
  EXPECT_LT(launch_s, 0.25 * s[0]) << "launching took as long as the kernels: no measure of "
                                      "kernel time is possible with this work";
  // read() returned only once the work was done.
  EXPECT_GE(launch_s + read_s, 0.5 * s[0]);
}

TEST(CudaComputeTimer, RegionsOfOneStepComeBackInOrderFromOneRead) {
  PT_REQUIRE_GPU();
  GemmWork work;
  std::unique_ptr<ComputeTimer> timer = work.backend().make_timer();
  // 1, 2 and 4 units, 3 untimed units between regions: 7 timed of 13.
  double host_s = 0;
  const std::vector<double> s = timed_step(work, *timer, {1, 2, 4}, 3, &host_s);
  print_regions("regions of 1, 2, 4 units (3 untimed between)", s);
  std::printf("  host time of the step, read() included: %.1f ms\n", host_s * 1e3);
  ASSERT_EQ(s.size(), 3u) << "one value per region";
  for (double v : s) EXPECT_GT(v, 0.0);
  // In the order the regions were opened: each twice its predecessor.
  EXPECT_GT(s[1], 1.3 * s[0]);
  EXPECT_GT(s[2], 1.3 * s[1]);
  // Only the regions are counted (7/13 of the work), not the gaps between.
  double sum = 0;
  for (double v : s) sum += v;
  EXPECT_LT(sum, 0.85 * host_s) << "the untimed work between regions was counted";
  EXPECT_GT(sum, 0.3 * host_s);
  // The read consumed the step's regions.
  EXPECT_TRUE(timer->read().empty());
}

TEST(CudaComputeTimer, IsReusedStepAfterStep) {
  PT_REQUIRE_GPU();
  GemmWork work;
  std::unique_ptr<ComputeTimer> timer = work.backend().make_timer();
  // Step 1: two regions (two event pairs made).
  std::vector<double> s = timed_step(work, *timer, {1, 3}, 1);
  print_regions("step 1, regions of 1, 3 units", s);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_GT(s[0], 0.0);
  EXPECT_GT(s[1], 1.5 * s[0]);
  // Step 2: four regions (the two pairs reused, two more made).
  s = timed_step(work, *timer, {2, 1, 1, 2}, 1);
  print_regions("step 2, regions of 2, 1, 1, 2 units", s);
  ASSERT_EQ(s.size(), 4u);
  for (double v : s) EXPECT_GT(v, 0.0);
  EXPECT_GT(s[0], 1.3 * s[1]);
  EXPECT_GT(s[3], 1.3 * s[2]);
  // Step 3: one region (a reused pair); nothing of step 2 comes back.
  s = timed_step(work, *timer, {2}, 0);
  print_regions("step 3, one region of 2 units", s);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_GT(s[0], 0.0);
  // A step without regions reads nothing (and does not wait).
  EXPECT_TRUE(timer->read().empty());
}

TEST(CudaComputeTimer, MisuseIsAnError) {
  PT_REQUIRE_GPU();
  std::unique_ptr<Backend> be = cuda::make_backend();
  std::unique_ptr<ComputeTimer> timer = be->make_timer();
  EXPECT_THROW(timer->end(), Error);
  timer->begin();
  EXPECT_THROW(timer->begin(), Error);
  EXPECT_THROW(timer->read(), Error);
  timer->end();
  EXPECT_EQ(timer->read().size(), 1u);
}

// ---- 2.4: the device caching allocator on the real cudaMalloc ----

size_t gpu_free_bytes(size_t* total = nullptr) {
  size_t free_bytes = 0, total_bytes = 0;
  const cudaError_t rc = cudaMemGetInfo(&free_bytes, &total_bytes);
  EXPECT_EQ(rc, cudaSuccess) << cudaGetErrorString(rc);
  if (total != nullptr) *total = total_bytes;
  return free_bytes;
}

std::string mib(size_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

Tensor device_bytes(size_t bytes) {
  return Tensor::empty({static_cast<int64_t>(bytes / 4)}, DType::F32, MemCategory::Workspace,
                       Device::CUDA);
}

// Gives the whole cache back when the test ends, failed assertions included
// (declared before the tensors, so it runs after they went to the cache).
struct ReleaseCacheAtExit {
  ~ReleaseCacheAtExit() {
    try {
      cuda::release_cached_device_memory();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "releasing the device cache at the end: " << e.what();
    }
  }
};

TEST(CudaCachingAllocator, ReleasesTheCacheAndRetriesThenTrimsAtStepBoundaries) {
  PT_REQUIRE_GPU();
  const double t_start = now_s();
  ReleaseCacheAtExit release_at_exit;
  // Start from an empty cache; what stays reserved is live in tensors.
  cuda::release_cached_device_memory();
  const size_t r0 = cuda::device_bytes_reserved();
  const size_t l0 = cuda::device_memory_stats().live_total;
  size_t total = 0;
  const size_t f0 = gpu_free_bytes(&total);
  // Blocks of 1 GiB, smaller when little is free (at least 2 blocks fit).
  const size_t block = std::min(kGiB, f0 / 8 / (2 * kMiB) * (2 * kMiB));
  std::printf("  GPU %s free of %s at the start; %s in tensors, %s reserved; blocks of %s\n",
              mib(f0).c_str(), mib(total).c_str(), mib(l0).c_str(), mib(r0).c_str(),
              mib(block).c_str());
  if (block < 32 * kMiB) GTEST_SKIP() << "only " << mib(f0) << " free on the GPU";

  // 1. Fill the GPU with blocks of one size until between half a block and
  //    one and a half blocks are left, then free them: they stay cached.
  const size_t n = (f0 - block / 2) / block;
  ASSERT_GE(n, 2u);
  size_t f1 = 0;
  {
    std::vector<Tensor> blocks;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NO_THROW(blocks.push_back(device_bytes(block))) << "block " << i << " of " << n;
    }
    f1 = gpu_free_bytes();
    EXPECT_EQ(cuda::device_bytes_reserved(), r0 + n * block);
  }
  EXPECT_EQ(cuda::device_bytes_reserved(), r0 + n * block) << "freed tensors stay cached";
  EXPECT_EQ(cuda::device_memory_stats().live_total, l0);
  EXPECT_LE(gpu_free_bytes(), f1 + 64 * kMiB) << "the cache gave memory back by itself";

  // 2. A new size larger than what cudaMalloc has free, smaller than free
  //    plus cached: cudaMalloc refuses it, the allocator gives the cache
  //    back and retries once, and it fits.
  const size_t big = (f1 + (n / 2) * block) / (2 * kMiB) * (2 * kMiB);
  ASSERT_GT(big, f1 + block / 2);
  ASSERT_NE(big, block);  // not a cached size
  std::printf("  %zu blocks of %s cached, %s free; asking for %s\n", n, mib(block).c_str(),
              mib(f1).c_str(), mib(big).c_str());
  {
    Tensor t;
    try {
      t = device_bytes(big);
    } catch (const std::exception& e) {
      FAIL() << "a request that fits once the cache is released failed: " << e.what();
    }
    EXPECT_EQ(cuda::device_bytes_reserved(), r0 + big)
        << "the cached blocks were not given back (or the request did not need it)";
    EXPECT_EQ(cuda::device_memory_stats().live_total, l0 + big);
    const size_t f2 = gpu_free_bytes();
    std::printf("  after the release and retry: %s free, %s reserved\n", mib(f2).c_str(),
                mib(cuda::device_bytes_reserved()).c_str());
    EXPECT_GE(f2 + 512 * kMiB, f1 + n * block - big);
  }
  // The big block is cached now.
  EXPECT_EQ(cuda::device_bytes_reserved(), r0 + big);

  // 3. More than the whole GPU: refused again after the release, an Error
  //    that names the bytes requested, in use and cached.
  const size_t huge = (total + kGiB + 511) / 512 * 512;  // already the allocator's rounding
  try {
    Tensor t = device_bytes(huge);
    ADD_FAILURE() << "allocating " << mib(huge) << " on a GPU of " << mib(total) << " succeeded";
  } catch (const Error& e) {
    const std::string msg = e.what();
    std::printf("  the error: %s\n", msg.c_str());
    EXPECT_NE(msg.find("out of GPU memory"), std::string::npos) << msg;
    EXPECT_NE(msg.find("allocating " + std::to_string(huge) + " bytes"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find(mib(l0) + " in use in tensors"), std::string::npos) << msg;
    EXPECT_NE(msg.find(mib(big) + " cached: released and retried once"), std::string::npos)
        << msg;
    EXPECT_NE(msg.find("still reserved"), std::string::npos) << msg;
  }
  EXPECT_EQ(cuda::device_bytes_reserved(), r0) << "the cache was released before the retry";
  EXPECT_EQ(cuda::device_memory_stats().live_total, l0);

  // 4. Trims at step boundaries give back the blocks no allocation took
  //    since the previous trim, and keep those used in the step just ended.
  const size_t a_size = block, c_size = block / 2;
  cuda::trim_cached_device_memory();  // end of "step 0": the cache is empty
  const void* a_ptr = nullptr;
  {  // step 1: two sizes used
    Tensor a = device_bytes(a_size), c = device_bytes(c_size);
    a_ptr = a.raw();
  }
  const size_t fa = gpu_free_bytes();
  cuda::trim_cached_device_memory();  // end of step 1: both were used in it
  EXPECT_EQ(cuda::device_bytes_reserved(), r0 + a_size + c_size) << "blocks of the step kept";
  EXPECT_LE(gpu_free_bytes(), fa + 64 * kMiB);
  {  // step 2: only the first size, taken from the cache
    Tensor a = device_bytes(a_size);
    EXPECT_EQ(a.raw(), a_ptr) << "the cached block of that size was not reused";
    EXPECT_EQ(cuda::device_bytes_reserved(), r0 + a_size + c_size);
  }
  cuda::trim_cached_device_memory();  // end of step 2: the second size sat idle through it
  EXPECT_EQ(cuda::device_bytes_reserved(), r0 + a_size) << "the idle block was not trimmed";
  EXPECT_GE(gpu_free_bytes() + 64 * kMiB, fa + c_size);
  cuda::trim_cached_device_memory();  // end of step 3: the first size idle too
  EXPECT_EQ(cuda::device_bytes_reserved(), r0);
  EXPECT_GE(gpu_free_bytes() + 64 * kMiB, fa + a_size + c_size);

  // 5. Everything given back: the GPU as free as at the start.
  cuda::release_cached_device_memory();
  EXPECT_EQ(cuda::device_bytes_reserved(), r0);
  const size_t f_end = gpu_free_bytes();
  std::printf("  at the end: %s free (%s at the start); %.2f s\n", mib(f_end).c_str(),
              mib(f0).c_str(), now_s() - t_start);
  EXPECT_GE(f_end + 256 * kMiB, f0);
}

// ---- #44: the host copy of an asynchronous checkpoint is page-locked ----

cudaMemoryType host_memory_type(const void* ptr) {
  cudaPointerAttributes attr{};
  EXPECT_EQ(cudaPointerGetAttributes(&attr, ptr), cudaSuccess);
  return attr.type;
}

TEST(CudaPinnedStaging, CheckpointStagingIsPageLockedAndExact) {
  PT_REQUIRE_GPU();
  std::unique_ptr<Backend> be = cuda::make_backend();  // selects the device: hooks registered
  ASSERT_TRUE(pinned_host_memory_registered());
  const int64_t n = 3 * 1000 * 1000 + 7;
  Tensor host = Tensor::empty({n}, DType::F32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < n; ++i) host.f32()[i] = static_cast<float>(i % 9973) * 0.125f - 3.f;
  const Tensor dev = host.to(Device::CUDA, MemCategory::Parameters);
  const size_t live_before = pinned_host_bytes_live();
  {
    const Tensor staged = dev.to(Device::CPU, MemCategory::CheckpointStaging);
    EXPECT_TRUE(staged.pinned());
    EXPECT_EQ(host_memory_type(staged.raw()), cudaMemoryTypeHost) << "cudaHostAlloc memory";
    EXPECT_EQ(pinned_host_bytes_live() - live_before, staged.bytes());
    EXPECT_EQ(std::memcmp(staged.raw(), host.raw(), host.bytes()), 0) << "the copy is exact";
  }
  EXPECT_EQ(pinned_host_bytes_live(), live_before);
  EXPECT_FALSE(host.pinned());
  EXPECT_NE(host_memory_type(host.raw()), cudaMemoryTypeHost) << "ordinary host tensors stay pageable";
}

}  // namespace
}  // namespace pt
