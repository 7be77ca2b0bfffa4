// precision.hpp: the precision of GEMM operands (training.precision; the enum
// pt::Precision and its names are in base/deck_kinds.hpp): its parser for
// names outside a deck, and the rounding that emulates it on the CPU.
//
// Every precision keeps fp32 master weights, fp32 activations and fp32
// accumulation; only the two operands of each GEMM are rounded, as the CUDA
// backend does when it casts them for cuBLAS (docs/cuda.md, "Precision modes"):
//   fp32  no rounding
//   tf32  10 explicit mantissa bits (tensor-core TF32), round to nearest even
//   bf16  8-bit exponent, 7 mantissa bits, round to nearest even
//   fp16  5-bit exponent, 10 mantissa bits, round to nearest even; beyond
//         65504 an operand becomes inf (the loss scaler then skips the step),
//         below 2^-24 it becomes 0
// So the CPU backend with a reduced precision computes what the GPU computes
// up to the order of the fp32 accumulation inside the GEMM.
#pragma once

#include <cstdint>
#include <string>

#include "pipetrain/base/deck_kinds.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

// The precision named `name` (a name of kind_names(Precision), as a command
// line gives it); throws InputError naming the value otherwise.
Precision parse_precision(const std::string& name);

// The value an fp32 GEMM operand takes in precision p.
float round_operand(float x, Precision p);
// dst[i * ld_dst + j] = round_operand(src[i * ld_src + j]) for a rows x cols block.
void round_block(const float* src, int64_t ld_src, int64_t rows, int64_t cols, Precision p,
                 float* dst, int64_t ld_dst);

// Stored low-precision operands (the weight copies of model/weight_copies.hpp).
// The dtype that holds an operand of precision p: BF16 for bf16, F16 for
// fp16, F32 for fp32 and tf32 (tf32 is a tensor-core mode over fp32
// storage: nothing to store).
DType stored_dtype(Precision p);
// The 2-byte bits of round_operand(x, p), p = bf16 or fp16, and back:
// widen_bits(round_bits(x, p), p) == round_operand(x, p) bit for bit, for
// every x (inf and NaN included; a NaN keeps its sign and the top bits of
// its payload, quieted). Widening is exact.
uint16_t round_bits(float x, Precision p);
float widen_bits(uint16_t bits, Precision p);
// dst[i] = round_bits(src[i], p) for n elements.
void round_to_bits(const float* src, int64_t n, Precision p, uint16_t* dst);
// dst[i * ld_dst + j] = widen_bits(src[i * ld_src + j], p) for a rows x cols block.
void widen_block(const uint16_t* src, int64_t ld_src, int64_t rows, int64_t cols, Precision p,
                 float* dst, int64_t ld_dst);

}  // namespace pt
