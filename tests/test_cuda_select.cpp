// test_cuda_select.cpp: the GPU-free logic of the CUDA build: device index
// choice and its PIPETRAIN_DEVICE override, the grouping of ranks that share
// a GPU (by UUID) behind transport "auto", precision names, the version
// report, the CUDA environment set before start, and that Device::CUDA
// tensors fail with a clear message before a device is selected. Runs
// without a GPU, except that under PIPETRAIN_REQUIRE_GPU=1 a missing device
// fails DeviceCountNeverThrows.
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/base/error.hpp"
#include "test_cuda_util.hpp"

namespace pt {
namespace {

TEST(CudaSelect, LocalRankModDevices) {
  EXPECT_EQ(cuda::choose_device_index(0, 4, nullptr), 0);
  EXPECT_EQ(cuda::choose_device_index(5, 4, nullptr), 1);
  EXPECT_EQ(cuda::choose_device_index(3, 1, ""), 0);
}

TEST(CudaSelect, EnvironmentOverride) {
  EXPECT_EQ(cuda::choose_device_index(0, 4, "2"), 2);
  EXPECT_EQ(cuda::choose_device_index(3, 4, "2"), 2);
  EXPECT_EQ(cuda::choose_device_index(0, 4, "0,0,1,1"), 0);
  EXPECT_EQ(cuda::choose_device_index(2, 4, "0,0,1,1"), 1);
  EXPECT_EQ(cuda::choose_device_index(5, 4, "3,2"), 2);
  EXPECT_THROW(cuda::choose_device_index(0, 2, "2"), InputError);      // out of range
  EXPECT_THROW(cuda::choose_device_index(0, 2, "x"), InputError);      // not a number
  EXPECT_THROW(cuda::choose_device_index(0, 2, "0,,1"), InputError);   // empty item
  EXPECT_THROW(cuda::choose_device_index(0, 2, "-1"), InputError);
}

TEST(CudaSelect, RanksSharingAGpuAreGroupedByUuid) {
  using Groups = std::vector<std::vector<int>>;
  // Distinct UUIDs: no sharing, even where hosts and PCI bus ids repeat.
  EXPECT_EQ(cuda::ranks_sharing({"GPU-aa", "GPU-bb", "GPU-cc"}), Groups{});
  EXPECT_EQ(cuda::ranks_sharing({}), Groups{});
  EXPECT_EQ(cuda::ranks_sharing({"GPU-aa", "GPU-bb", "GPU-aa"}), (Groups{{0, 2}}));
  EXPECT_EQ(cuda::ranks_sharing({"GPU-bb", "GPU-aa", "GPU-aa", "GPU-bb", "GPU-bb"}),
            (Groups{{0, 3, 4}, {1, 2}}));
}

TEST(CudaSelect, VersionsAreReportedWithoutADevice) {
  const cuda::Versions v = cuda::versions();
  std::printf("  %s\n", v.describe().c_str());
  EXPECT_GE(v.runtime, 12000);
  EXPECT_GT(v.cublas, 0);
  EXPECT_GE(v.nccl, 20000);
  cuda::Versions old = v;
  old.driver = 12040;
  old.runtime = 13000;
  EXPECT_FALSE(old.driver_supports_runtime());
  EXPECT_NE(old.describe().find("driver supports CUDA 12.4 (too old"), std::string::npos)
      << old.describe();
}

TEST(CudaSelect, EnvironmentIsPreparedUnlessTheUserSetIt) {
  cuda::prepare_cuda_environment();
  ASSERT_NE(std::getenv("CUDA_MODULE_LOADING"), nullptr);
  ASSERT_NE(std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"), nullptr);
  const std::string loading = std::getenv("CUDA_MODULE_LOADING");
  setenv("CUDA_MODULE_LOADING", "LAZY", 1);  // as a user would
  cuda::prepare_cuda_environment();
  EXPECT_STREQ(std::getenv("CUDA_MODULE_LOADING"), "LAZY");
  setenv("CUDA_MODULE_LOADING", loading.c_str(), 1);
}

TEST(CudaSelect, PrecisionNames) {
  for (const char* name : {"fp32", "tf32", "bf16", "fp16"})
    EXPECT_STREQ(kind_name(parse_precision(name)), name);
  EXPECT_THROW(parse_precision("fp8"), InputError);
}

TEST(CudaSelect, DeviceCountNeverThrows) {
  std::string why;
  const int n = cuda::device_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) std::printf("  no GPU here: %s\n", why.c_str());
  if (test::gpu_required()) {
    EXPECT_GT(n, 0) << "PIPETRAIN_REQUIRE_GPU is set: " << why;
  }
}

TEST(CudaSelect, DeviceTensorBeforeSelectionIsAClearError) {
  if (device_memory_registered(Device::CUDA)) GTEST_SKIP() << "a device is already selected";
  try {
    Tensor::empty({4}, DType::F32, MemCategory::Workspace, Device::CUDA);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("select_device"), std::string::npos) << e.what();
  }
}

// No ambient device: a tensor whose device is not named is on the host.
TEST(CudaSelect, UnnamedDeviceIsTheHost) {
  Tensor t = Tensor::zeros({3});
  EXPECT_EQ(t.device(), Device::CPU);
  EXPECT_EQ(t.to(Device::CPU).raw(), t.raw());  // already there: no copy
}

}  // namespace
}  // namespace pt
