// cuda_transformer.hpp: the transformer kernel group of the CUDA backend
// (internal to pt_cuda; cuda_transformer.cpp). Contracts and shapes are those
// of include/pipetrain/tensor/transformer_kernels.hpp.
#pragma once

#include <memory>

#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/tensor/transformer_kernels.hpp"

namespace pt::cuda {

// On the device of the context, with the attention GEMMs in `precision`.
std::unique_ptr<TransformerKernels> make_transformer_kernels(Precision precision);

}  // namespace pt::cuda
