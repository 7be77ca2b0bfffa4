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

namespace pt {

// The precision named `name` (a name of kind_names(Precision), as a command
// line gives it); throws InputError naming the value otherwise.
Precision parse_precision(const std::string& name);

// The value an fp32 GEMM operand takes in precision p.
float round_operand(float x, Precision p);
// dst[i * ld_dst + j] = round_operand(src[i * ld_src + j]) for a rows x cols block.
void round_block(const float* src, int64_t ld_src, int64_t rows, int64_t cols, Precision p,
                 float* dst, int64_t ld_dst);

}  // namespace pt
