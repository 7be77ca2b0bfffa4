// cpu_kernels_gpt.hpp: the transformer kernel group of the CPU backend
// (internal to pt_tensor; cpu_kernels_gpt.cpp). Contracts and shapes are those
// of include/pipetrain/tensor/transformer_kernels.hpp.
#pragma once

#include <memory>

#include "pipetrain/tensor/transformer_kernels.hpp"

namespace pt {

// The attention GEMMs round their operands to `precision` (fp32: plain sgemm),
// as the CPU backend's matmul does.
std::unique_ptr<TransformerKernels> make_cpu_transformer_kernels(Precision precision);

}  // namespace pt
