// fused_attention.hpp: the fused attention kernel group of the CUDA backend
// (internal to pt_cuda; fused_attention.cpp): cuDNN's scaled-dot-product
// attention (SDPA) through its frontend graph API, bf16 inputs and outputs,
// fp32 statistics, causal, deterministic backward. Contracts and shapes are
// those of include/pipetrain/tensor/fused_attention_kernels.hpp.
#pragma once

#include <memory>

#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/tensor/fused_attention_kernels.hpp"

namespace pt::cuda {

// The group on the device of the context for a backend of `precision`, or
// nullptr where it cannot run: any precision but bf16, or a GPU below
// compute capability 8.0. cuDNN is first called by the first kernel.
std::unique_ptr<FusedAttentionKernels> make_fused_attention(Precision precision);

}  // namespace pt::cuda
