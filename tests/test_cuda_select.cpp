// test_cuda_select.cpp: the GPU-free logic of the CUDA build: device index
// choice and its PIPETRAIN_DEVICE override, duplicate-GPU detection behind
// transport "auto", precision names, and that Device::CUDA tensors fail with
// a clear message before a device is selected. Runs without a GPU.
#include <gtest/gtest.h>

#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/base/error.hpp"

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

TEST(CudaSelect, DuplicateDevicesDetected) {
  EXPECT_FALSE(cuda::has_duplicate({"a|0000:19:00.0", "a|0000:2a:00.0", "b|0000:19:00.0"}));
  EXPECT_TRUE(cuda::has_duplicate({"a|0000:19:00.0", "b|0000:19:00.0", "a|0000:19:00.0"}));
  EXPECT_FALSE(cuda::has_duplicate({}));
}

TEST(CudaSelect, PrecisionNames) {
  for (const char* name : {"fp32", "tf32", "bf16", "fp16"})
    EXPECT_STREQ(cuda::precision_name(cuda::parse_precision(name)), name);
  EXPECT_THROW(cuda::parse_precision("fp8"), InputError);
}

TEST(CudaSelect, DeviceCountNeverThrows) {
  std::string why;
  const int n = cuda::device_count(&why);
  EXPECT_GE(n, 0);
  if (n == 0) std::printf("  no GPU here: %s\n", why.c_str());
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

TEST(CudaSelect, DefaultDeviceGuardRestores) {
  EXPECT_EQ(default_device(), Device::CPU);
  {
    DefaultDeviceGuard guard(Device::CUDA);
    EXPECT_EQ(default_device(), Device::CUDA);
  }
  EXPECT_EQ(default_device(), Device::CPU);
  Tensor t = Tensor::zeros({3});
  EXPECT_EQ(t.device(), Device::CPU);
  EXPECT_EQ(t.to(Device::CPU).raw(), t.raw());  // already there: no copy
}

}  // namespace
}  // namespace pt
