// test_payload_digest.cpp: the payload digest of the message and replica
// checks (tensor/payload_digest.hpp): every single flipped bit and every
// swap of two different words changes the checksum, the length counts, the
// value is pinned (the CUDA kernel is tested against the same function,
// tests/test_cuda_digest.cpp), and non-finite elements are counted per dtype.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/tensor/payload_digest.hpp"

namespace pt {
namespace {

std::vector<unsigned char> pattern(size_t bytes) {
  std::vector<unsigned char> b(bytes);
  uint64_t x = 12345;
  for (auto& c : b) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    c = static_cast<unsigned char>(x >> 56);
  }
  return b;
}

uint64_t checksum(const std::vector<unsigned char>& b, size_t bytes) {
  return host_payload_digest(b.data(), bytes, digest::FloatKind::None).checksum;
}

TEST(PayloadDigest, EveryFlippedBitChangesTheChecksum) {
  for (size_t bytes : {size_t(1), size_t(7), size_t(8), size_t(37), size_t(64)}) {
    std::vector<unsigned char> b = pattern(bytes);
    const uint64_t clean = checksum(b, bytes);
    for (size_t bit = 0; bit < 8 * bytes; ++bit) {
      b[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
      EXPECT_NE(checksum(b, bytes), clean) << bytes << " bytes, bit " << bit;
      b[bit / 8] ^= static_cast<unsigned char>(1u << (bit % 8));
    }
  }
}

TEST(PayloadDigest, PositionAndLengthCount) {
  std::vector<unsigned char> b = pattern(64);
  const uint64_t clean = checksum(b, 64);
  std::vector<unsigned char> swapped = b;
  std::memcpy(swapped.data(), b.data() + 8, 8);
  std::memcpy(swapped.data() + 8, b.data(), 8);
  EXPECT_NE(checksum(swapped, 64), clean);
  // Zero bytes past the end are not the same payload as no bytes.
  std::vector<unsigned char> zeros(16, 0);
  EXPECT_NE(checksum(zeros, 8), checksum(zeros, 16));
  EXPECT_NE(checksum(zeros, 0), checksum(zeros, 8));
  // Pinned to the definition (the value an independent reimplementation of
  // the formula in payload_digest.hpp gives): a change of it must be made on
  // the CPU and the GPU together.
  EXPECT_EQ(checksum(b, 64), 0x80a9f1aa4333030full) << std::hex << checksum(b, 64);
}

TEST(PayloadDigest, CountsNonFiniteElementsOfItsDtype) {
  const std::vector<float> f = {1.f, INFINITY, 2.f, NAN, -INFINITY};
  EXPECT_EQ(host_payload_digest(f.data(), f.size() * 4, digest::FloatKind::F32).nonfinite, 3);
  const std::vector<uint16_t> bf16 = {0x3f80, 0x7f80, 0x7fc0, 0x0001, 0xff80};
  EXPECT_EQ(host_payload_digest(bf16.data(), 10, digest::FloatKind::BF16).nonfinite, 3);
  const std::vector<uint16_t> f16 = {0x3c00, 0x7c00, 0x7e00};
  EXPECT_EQ(host_payload_digest(f16.data(), 6, digest::FloatKind::Half16).nonfinite, 2);
  EXPECT_EQ(host_payload_digest(f.data(), f.size() * 4, digest::FloatKind::None).nonfinite, 0);
  // Through the CPU backend, with the dtype the tensor has.
  Tensor t = Tensor::empty({5});
  std::memcpy(t.raw(), f.data(), 20);
  const PayloadDigest d = cpu_backend().payload_digest(t);
  EXPECT_EQ(d.nonfinite, 3);
  EXPECT_EQ(d.checksum, host_payload_digest(f.data(), 20, digest::FloatKind::F32).checksum);
}

}  // namespace
}  // namespace pt
