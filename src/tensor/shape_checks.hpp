// shape_checks.hpp: the argument checks of the kernels, shared by the core
// kernels (backend.cpp) and the transformer group (transformer_kernels.cpp).
// Private to pt_tensor. Each message names the kernel, the argument, its
// shape and what was expected; a failure is a pt::Error (a caller's bug).
#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt::shapes {

// "<kernel>: <name> (2, 3) has 6 elements, <other> (3, 3) has 9"
inline void same_numel(const char* kernel, const char* name, const Tensor& t, const char* other,
                       const Tensor& ref) {
  if (t.numel() == ref.numel()) return;
  PT_FAIL(std::string(kernel) + ": " + name + " " + shape_string(t.shape()) + " has " +
          std::to_string(t.numel()) + " elements, " + other + " " + shape_string(ref.shape()) +
          " has " + std::to_string(ref.numel()));
}

// "<kernel>: <name> (5) has 5 elements, expected 8 (<why>)"
inline void numel_is(const char* kernel, const char* name, const Tensor& t, int64_t n,
                     const char* why) {
  if (t.numel() == n) return;
  PT_FAIL(std::string(kernel) + ": " + name + " " + shape_string(t.shape()) + " has " +
          std::to_string(t.numel()) + " elements, expected " + std::to_string(n) + " (" + why +
          ")");
}

}  // namespace pt::shapes
