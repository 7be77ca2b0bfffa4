// bitwise.hpp: bit-for-bit comparisons the tests share (doubles, float
// vectors, host tensors), so that "bitwise equal" means one thing everywhere.
#pragma once

#include <cstring>
#include <vector>

#include "pipetrain/tensor/tensor.hpp"

namespace pt::test {

inline bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Host tensors of the same size with the same bytes.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.raw(), b.raw(), a.bytes()) == 0;
}

// Elements whose bits differ (over the common length).
inline size_t bitwise_differences(const std::vector<float>& a, const std::vector<float>& b) {
  size_t diff = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    diff += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  return diff;
}

}  // namespace pt::test
