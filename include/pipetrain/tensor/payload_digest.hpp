// payload_digest.hpp: the checksum and non-finite count of a message's
// payload (pipeline.check_messages, docs/reliability.md "Checks on the data
// between stages") and of a parameter (the replica check), one definition
// for the CPU and the CUDA kernel.
//
// The payload is read as 64-bit little-endian words w_0 .. w_{n-1} (the last
// one padded with zero bytes). Each word is mixed with its position by a
// bijective 64-bit finaliser, and the terms are added modulo 2^64:
//
//   sum      = Σ_i mix(w_i ^ (i + 1) · K)          (mod 2^64)
//   checksum = mix(sum ^ bytes · L)
//
// Integer addition is associative and commutative, so a parallel reduction
// on a GPU, in any order, gives bitwise the CPU's value; the position in
// each term makes the sum sensitive to where a word is (two swapped words
// change it), and the bijective mix makes any change of one word change its
// term, so one flipped bit always changes the checksum. Floating-point values
// are hashed as bit patterns: no rounding enters.
#pragma once

#include <cstddef>
#include <cstdint>

#ifdef __CUDACC__
#define PT_DIGEST_HD __host__ __device__
#else
#define PT_DIGEST_HD
#endif

namespace pt {

// What payload_digest reports: the checksum above, and how many elements are
// inf or NaN (0 for integer tensors).
struct PayloadDigest {
  uint64_t checksum = 0;
  int64_t nonfinite = 0;
};

namespace digest {

constexpr uint64_t kPositionKey = 0x9e3779b97f4a7c15ull;  // odd: (i + 1) · K differs for every i
constexpr uint64_t kLengthKey = 0xc2b2ae3d27d4eb4full;

// A bijection of 64-bit words with good avalanche (the splitmix64 finaliser's
// constants): every input bit changes about half the output bits.
PT_DIGEST_HD inline uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

// Word i's term of the sum.
PT_DIGEST_HD inline uint64_t term(uint64_t word, uint64_t index) {
  return mix(word ^ ((index + 1) * kPositionKey));
}

PT_DIGEST_HD inline uint64_t finish(uint64_t sum, uint64_t bytes) {
  return mix(sum ^ (bytes * kLengthKey));
}

// How elements mark inf/NaN: an exponent field of all ones.
enum class FloatKind : int { None = 0, F32 = 1, Half16 = 2, BF16 = 3 };

// Non-finite elements among the first `valid` bytes of a word (whole elements).
PT_DIGEST_HD inline int nonfinite_in_word(uint64_t word, unsigned valid, FloatKind kind) {
  int count = 0;
  if (kind == FloatKind::F32) {
    for (unsigned lane = 0; lane + 4 <= valid && lane < 8; lane += 4) {
      const uint32_t bits = static_cast<uint32_t>(word >> (8 * lane));
      count += (bits & 0x7f800000u) == 0x7f800000u;
    }
  } else if (kind == FloatKind::Half16 || kind == FloatKind::BF16) {
    const uint32_t mask = kind == FloatKind::Half16 ? 0x7c00u : 0x7f80u;
    for (unsigned lane = 0; lane + 2 <= valid && lane < 8; lane += 2) {
      const uint32_t bits = static_cast<uint32_t>(word >> (8 * lane)) & 0xffffu;
      count += (bits & mask) == mask;
    }
  }
  return count;
}

}  // namespace digest

// The digest of `bytes` bytes of host memory holding elements of `kind`.
PayloadDigest host_payload_digest(const void* data, size_t bytes, digest::FloatKind kind);

}  // namespace pt
