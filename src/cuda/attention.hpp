// attention.hpp: multi-head attention (causal or not) on the fused qkv layout for the
// CUDA backend (internal to pt_cuda): cuBLAS strided-batched GEMMs over the
// heads of each sequence, plus the masked softmax kernels. Contracts and
// shapes are those of TransformerKernels::attention_* in
// include/pipetrain/tensor/transformer_kernels.hpp, checked by the caller.
#pragma once

#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/tensor/transformer_kernels.hpp"

namespace pt::cuda {

// probs (mb, H, T, T) from qkv (mb, T, 3C).
void attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs, AttentionMask mask,
                     Precision p);
// y (mb, T, C) = probs @ V per head.
void attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads, Tensor& y,
                      Precision p);
// dqkv (mb, T, 3C) from dy (mb, T, C).
void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                        int64_t heads, Tensor& dqkv, AttentionMask mask, Precision p);

}  // namespace pt::cuda
