// cpu_kernels_gpt.hpp: the CPU transformer kernels behind CpuBackend
// (internal to pt_tensor). Contracts and shapes are those of the matching
// Backend methods in include/pipetrain/tensor/backend.hpp.
#pragma once

#include "pipetrain/tensor/backend.hpp"

namespace pt::cpu {


void add(const Tensor& a, const Tensor& b, Tensor& out);

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                       Tensor& y, Tensor& mean, Tensor& rstd);
void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                        const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                        Tensor& dbeta);

void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y);
void embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte, Tensor& dwpe);

// The attention GEMMs round their operands to `p` (fp32: plain sgemm).
void attention_probs(GemmPrecision p, const Tensor& qkv, int64_t heads, Tensor& probs);
void attention_values(GemmPrecision p, const Tensor& qkv, const Tensor& probs, int64_t heads,
                      Tensor& y);
void attention_backward(GemmPrecision p, const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                        int64_t heads, Tensor& dqkv);

}  // namespace pt::cpu
