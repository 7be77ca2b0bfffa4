// vec_math.hpp: exp and tanh for float without branches or library calls, so
// that CPU loops over them vectorise (std::exp/std::tanh are scalar libm
// calls). The same source compiles for the GPU (nvcc: __host__ __device__), so
// both backends do the same operations in the same order (with
// -ffp-contract=off and --fmad=false, the same bits).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define PT_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define PT_HOST_DEVICE inline
#endif

// Hot CPU loops get a second, AVX-512 (x86-64-v4) copy, which the loader picks
// on CPUs that have it (GCC's target_clones); the default build targets
// x86-64-v3. Elementwise loops give the same bits in both copies (no
// reassociation: -ffp-contract=off and no -ffast-math).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__CUDACC__)
#define PT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "default")))
#else
#define PT_CPU_CLONES
#endif

namespace pt {

// e^x: x = n ln2 + r with |r| <= ln2/2 (ln2 split in a high and a low part so
// n ln2 is exact), e^r by its degree-6 Taylor polynomial (truncation below
// 1.3e-7 relative), 2^n by building the float exponent. x is clamped to
// [-87, 88] so 2^n stays a normal float.
PT_HOST_DEVICE float fast_exp(float x) {
  x = x < -87.f ? -87.f : x;
  x = 88.f < x ? 88.f : x;
  const float n = floorf(x * 1.44269504f + 0.5f);
  const float r = (x - n * 0.693145752f) - n * 1.42860677e-6f;
  float p = 1.f / 720.f;
  p = p * r + 1.f / 120.f;
  p = p * r + 1.f / 24.f;
  p = p * r + 1.f / 6.f;
  p = p * r + 0.5f;
  p = p * r + 1.f;
  p = p * r + 1.f;
  // Shifted as unsigned: for a NaN x (a diverged run) the int conversion of n
  // gives INT_MIN on x86, so n + 127 is negative, and a left shift of a
  // negative int is undefined (found by UBSan). Same bits for every x.
  const uint32_t bits = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

// tanh(u) = 1 - 2 / (e^{2u} + 1); absolute error below 3e-7.
PT_HOST_DEVICE float fast_tanh(float u) { return 1.f - 2.f / (fast_exp(2.f * u) + 1.f); }

}  // namespace pt
