// cpu_kernels_gpt.hpp: the transformer kernel group of the CPU backend
// (internal to pt_tensor; cpu_kernels_gpt.cpp) and its fused attention group
// (cpu_fused_attention.cpp). Contracts and shapes are those of
// include/pipetrain/tensor/transformer_kernels.hpp and fused_attention_kernels.hpp.
#pragma once

#include <memory>

#include "pipetrain/tensor/fused_attention_kernels.hpp"
#include "pipetrain/tensor/transformer_kernels.hpp"

namespace pt {

// The attention GEMMs round their operands to `precision` (fp32: plain sgemm),
// as the CPU backend's matmul does.
std::unique_ptr<TransformerKernels> make_cpu_transformer_kernels(Precision precision);
// Flash-style fused attention, GEMM operands (and 16-bit outputs) in `precision`.
std::unique_ptr<FusedAttentionKernels> make_cpu_fused_attention(Precision precision);

}  // namespace pt
