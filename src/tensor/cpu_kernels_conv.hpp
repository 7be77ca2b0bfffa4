// cpu_kernels_conv.hpp: the convolution kernel group of the CPU backend
// (internal to pt_tensor; cpu_kernels_conv.cpp). Contracts and shapes are
// those of include/pipetrain/tensor/conv_kernels.hpp.
#pragma once

#include <memory>

#include "pipetrain/tensor/conv_kernels.hpp"

namespace pt::cpu {

std::unique_ptr<ConvKernels> make_cpu_conv_kernels();

// Gives OpenBLAS and oneDNN's OpenMP the thread count (set_blas_threads)
// before the first kernel that uses them (cpu_gemm.cpp).
void ensure_blas_threads();

}  // namespace pt::cpu
