// fused_attention_kernels.hpp: the optional kernel group of fused causal
// attention (model.attention = "fused", issue #42): the whole attention of
// the fused qkv in one forward and one backward kernel that never keep the
// (T, T) probabilities between them, as flash attention and cuDNN's
// scaled-dot-product attention (SDPA) compute it.
//
// A KernelGroup (backend.hpp) that a backend may provide beside
// TransformerKernels: the CPU backend always does (src/tensor/
// cpu_fused_attention.cpp, exact in every precision, the reference the GPU
// is tested against), the CUDA backend with training.precision = "bf16" on a
// GPU of compute capability 8.0 or newer (src/cuda/fused_attention.cpp,
// cuDNN SDPA). The GPT block asks for it only when the deck chooses "fused";
// TransformerKernels' attention_* stay the fp32 reference path.
// As in the other groups, each kernel is a public non-virtual function that
// checks the shapes (src/tensor/fused_attention_kernels.cpp) and calls the
// backend's protected do_<kernel>. Every kernel is deterministic (cuDNN:
// its deterministic backward).
//
// Shapes: mb micro-batch, T sequence, C model width, H heads, D = C / H.
// qkv (mb, T, 3C) is laid out as in TransformerKernels: queries in columns
// [0, C), keys [C, 2C), values [2C, 3C), head h at offset h * D within each.
#pragma once

#include <cstdint>

#include "pipetrain/tensor/backend.hpp"

namespace pt {

class FusedAttentionKernels : public KernelGroup {
 public:
  static constexpr const char* kGroup = "fused_attention";

  // y (mb, T, C): head h of y[b] = softmax(Q K^T / sqrt(D) + causal mask) V.
  // stats (mb, H, T): the natural log of each row's softmax denominator,
  // stats[b, h, i] = log sum_{j <= i} exp(q_i . k_j / sqrt(D)) (cuDNN's
  // "Stats"), which is all backward needs to rebuild the probabilities.
  void forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats);
  // Writes dqkv (mb, T, 3C) from dy (mb, T, C) and qkv, y, stats of forward.
  // y is F32, or (activation copies, model/activation_copies.hpp) its copy
  // in the 16-bit GEMM precision, BF16 or F16: in those precisions forward
  // writes values the copy holds exactly, so the result is the same.
  void backward(const Tensor& qkv, const Tensor& y, const Tensor& stats, const Tensor& dy,
                int64_t heads, Tensor& dqkv);

 protected:
  // The kernels above, called with arguments whose shapes were checked.
  virtual void do_forward(const Tensor& qkv, int64_t heads, Tensor& y, Tensor& stats) = 0;
  virtual void do_backward(const Tensor& qkv, const Tensor& y, const Tensor& stats,
                           const Tensor& dy, int64_t heads, Tensor& dqkv) = 0;
};

}  // namespace pt
