// cuda_conv.hpp: the convolution kernel group of the CUDA backend (internal
// to pt_cuda; cuda_conv.cpp): convolutions through cuDNN with fixed
// deterministic algorithms, pooling and normalisation in own kernels
// (kernels_conv.cu). Contracts and shapes are those of
// include/pipetrain/tensor/conv_kernels.hpp.
#pragma once

#include <memory>

#include "pipetrain/tensor/conv_kernels.hpp"

namespace pt::cuda {

// On the device of the context, in fp32 whatever the backend's precision
// (as the CPU backend's convolutions). cuDNN is first called by the first
// convolution.
std::unique_ptr<ConvKernels> make_conv_kernels();

}  // namespace pt::cuda
