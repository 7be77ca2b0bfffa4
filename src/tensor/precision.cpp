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
// Inf passes unchanged; a NaN stays a NaN of its sign, quieted (its top
// mantissa bit set) and cut to the kept bits, so that the result is a value
// of the narrower format.
float round_mantissa(float x, int dropped) {
  const uint32_t u = bits_of(x);
  const uint32_t mask = ~((1u << dropped) - 1u);
  if ((u & 0x7f800000u) == 0x7f800000u)
    return (u & 0x007fffffu) ? float_of((u | 0x00400000u) & mask) : x;
  const uint32_t half = (1u << (dropped - 1)) - 1u;
  const uint32_t lsb = (u >> dropped) & 1u;
  return float_of((u + half + lsb) & mask);  // a carry into the exponent is correct rounding
}

// fp32 -> fp16 bits, round to nearest even (the hardware conversion); a NaN
// becomes the quiet NaN of its sign with the top 9 bits of its payload,
// written out so that the rule does not depend on how the compiler converts
// (x86's F16C gives the same; the CUDA kernel writes the same rule).
uint16_t half_bits(float x) {
  const uint32_t u = bits_of(x);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>(((u >> 16) & 0x8000u) | 0x7e00u | ((u & 0x007fffffu) >> 13));
  const _Float16 h = static_cast<_Float16>(x);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}

float half_value(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
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
    case Precision::Fp16: return half_value(half_bits(x));
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

DType stored_dtype(Precision p) {
  if (p == Precision::Bf16) return DType::BF16;
  if (p == Precision::Fp16) return DType::F16;
  return DType::F32;
}

uint16_t round_bits(float x, Precision p) {
  PT_CHECK(p == Precision::Bf16 || p == Precision::Fp16,
           std::string("round_bits: ") + kind_name(p) + " has no 2-byte format");
  if (p == Precision::Fp16) return half_bits(x);
  return static_cast<uint16_t>(bits_of(round_mantissa(x, 16)) >> 16);
}

float widen_bits(uint16_t bits, Precision p) {
  PT_CHECK(p == Precision::Bf16 || p == Precision::Fp16,
           std::string("widen_bits: ") + kind_name(p) + " has no 2-byte format");
  if (p == Precision::Fp16) return half_value(bits);
  return float_of(static_cast<uint32_t>(bits) << 16);
}

void round_to_bits(const float* src, int64_t n, Precision p, uint16_t* dst) {
  PT_CHECK(p == Precision::Bf16 || p == Precision::Fp16,
           std::string("round_to_bits: ") + kind_name(p) + " has no 2-byte format");
  if (p == Precision::Fp16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = half_bits(src[i]);
    return;
  }
  for (int64_t i = 0; i < n; ++i)
    dst[i] = static_cast<uint16_t>(bits_of(round_mantissa(src[i], 16)) >> 16);
}

void widen_block(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, Precision p,
                 float* dst, int64_t ld_dst) {
  PT_CHECK(p == Precision::Bf16 || p == Precision::Fp16,
           std::string("widen_block: ") + kind_name(p) + " has no 2-byte format");
  for (int64_t i = 0; i < rows; ++i) {
    const uint16_t* s = src + i * ld_src;
    float* d = dst + i * ld_dst;
    if (p == Precision::Bf16) {
      for (int64_t j = 0; j < cols; ++j) d[j] = float_of(static_cast<uint32_t>(s[j]) << 16);
    } else {
      for (int64_t j = 0; j < cols; ++j) d[j] = half_value(s[j]);
    }
  }
}

}  // namespace pt
