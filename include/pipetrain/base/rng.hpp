// rng.hpp: counter-based random numbers.
//
// Every random value is a pure function of (seed, stream, index), so a value
// does not depend on which rank draws it or in what order: parameter init and
// synthetic data are identical at every stage count and partition.
#pragma once

#include <cmath>
#include <cstdint>

namespace pt {

// A strong 64-bit mixer (the splitmix64 finaliser construction).
inline uint64_t mix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t index) {
  return mix64(mix64(mix64(seed) ^ stream) ^ index);
}

// Uniform in [0, 1) with 24 bits of resolution.
inline float uniform01(uint64_t seed, uint64_t stream, uint64_t index) {
  return static_cast<float>(random_bits(seed, stream, index) >> 40) * (1.0f / 16777216.0f);
}

// Standard normal (Box-Muller on two uniforms from consecutive counters).
inline float normal01(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = (static_cast<double>(random_bits(seed, stream, 2 * index) >> 11) + 1.0) *
              (1.0 / 9007199254740993.0);
  double u2 = static_cast<double>(random_bits(seed, stream, 2 * index + 1) >> 11) *
              (1.0 / 9007199254740992.0);
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

}  // namespace pt
