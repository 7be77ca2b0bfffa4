// precision.cpp: rounding of GEMM operands to tf32, bf16 and fp16 (see
// precision.hpp), exact and branch-light so that whole operand blocks round
// at memory speed.
#include "pipetrain/tensor/precision.hpp"

#include <cstring>

#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

uint32_t bits_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

// Keeps the top (23 - dropped) mantissa bits, rounding to nearest even.
// Inf and NaN pass unchanged (a NaN stays a NaN: its top bit is kept set).
float round_mantissa(float x, int dropped) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7f800000u) == 0x7f800000u) return (u & 0x007fffffu) ? float_of(u | 0x00400000u) : x;
  const uint32_t half = (1u << (dropped - 1)) - 1u;
  const uint32_t lsb = (u >> dropped) & 1u;
  const uint32_t mask = ~((1u << dropped) - 1u);
  return float_of((u + half + lsb) & mask);  // a carry into the exponent is correct rounding
}

}  // namespace

Precision parse_precision(const std::string& name) {
  Precision precision = Precision::Fp32;
  if (!parse_kind(name, precision))
    throw InputError("unknown precision '" + name + "': expected fp32, tf32, bf16 or fp16");
  return precision;
}

float round_operand(float x, Precision p) {
  switch (p) {
    case Precision::Fp32: return x;
    case Precision::Tf32: return round_mantissa(x, 13);
    case Precision::Bf16: return round_mantissa(x, 16);
    case Precision::Fp16: return static_cast<float>(static_cast<_Float16>(x));
  }
  return x;
}

void round_block(const float* src, int64_t ld_src, int64_t rows, int64_t cols, Precision p,
                 float* dst, int64_t ld_dst) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* s = src + i * ld_src;
    float* d = dst + i * ld_dst;
    switch (p) {
      case Precision::Fp32: std::memcpy(d, s, static_cast<size_t>(cols) * sizeof(float)); break;
      case Precision::Tf32: for (int64_t j = 0; j < cols; ++j) d[j] = round_mantissa(s[j], 13); break;
      case Precision::Bf16: for (int64_t j = 0; j < cols; ++j) d[j] = round_mantissa(s[j], 16); break;
      case Precision::Fp16:
        for (int64_t j = 0; j < cols; ++j) d[j] = static_cast<float>(static_cast<_Float16>(s[j]));
        break;
    }
  }
}

}  // namespace pt
