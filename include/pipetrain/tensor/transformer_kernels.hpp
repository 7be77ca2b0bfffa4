// transformer_kernels.hpp: the kernel group of the transformer (GPT) layers:
// LayerNorm, token + position embedding and multi-head attention, causal
// (the GPT) or over every token (the hybrid's blocks, model.causal = false).
//
// A KernelGroup (backend.hpp): a backend that provides it returns it from
// kernel_group("transformer"); both built-in backends do (the CPU one in
// src/tensor/cpu_kernels_gpt.cpp, the CUDA one in src/cuda/transformer_kernels.cpp).
// The GPT layers ask for it through require_kernels<TransformerKernels>, so a
// backend without it fails with one message naming the backend and the
// family. As in Backend, each kernel is a public non-virtual function that
// checks the shapes (src/tensor/transformer_kernels.cpp) and calls the
// backend's protected do_<kernel>. Every kernel is deterministic.
//
// Shapes: mb micro-batch, T sequence, C model width, H heads, D = C / H head
// width, V vocabulary; (rows, C) views fold every leading dimension into rows.
#pragma once

#include <cstdint>

#include "pipetrain/tensor/backend.hpp"

namespace pt {

// Which keys a query attends to: Causal, keys up to its own position (a
// language model); None, every key of the sequence (image tokens).
enum class AttentionMask { Causal, None };

class TransformerKernels : public KernelGroup {
 public:
  static constexpr const char* kGroup = "transformer";

  // LayerNorm over the last dimension, biased variance, eps inside the sqrt:
  // y = (x - mean) * rstd * gamma + beta. x, y: (rows, C); gamma, beta: (C);
  // writes mean, rstd: (rows) for the backward pass.
  void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                         Tensor& y, Tensor& mean, Tensor& rstd);
  // Writes dx (rows, C) and ADDS into dgamma, dbeta (C). mean, rstd: from forward.
  void layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                          const Tensor& rstd, const Tensor& dy, Tensor& dx, Tensor& dgamma,
                          Tensor& dbeta);

  // y[b, t] = wte[tokens[b, t]] + wpe[t]. tokens: (mb, T) i32; wte: (V, C);
  // wpe: (Tmax, C) with T <= Tmax; y: (mb, T, C).
  void embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe, Tensor& y);
  // ADDS dy (mb, T, C) into dwte[tokens[b, t]] (V, C) and dwpe[t] (Tmax, C), in (b, t) order.
  void embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte, Tensor& dwpe);

  // Multi-head self-attention on the fused qkv (mb, T, 3C): columns
  // [0, C) are the queries, [C, 2C) the keys, [2C, 3C) the values, head h in
  // columns [h*D, (h+1)*D) of each. Split in two so that backward can run from
  // probabilities recomputed by attention_probs (selective recomputation).
  //
  // probs (mb, H, T, T) = softmax(Q K^T / sqrt(D) + mask): with
  // AttentionMask::Causal query i sees keys j <= i and the entries above the
  // diagonal are exactly 0; with AttentionMask::None every query sees every key.
  void attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs,
                       AttentionMask mask = AttentionMask::Causal);
  // y (mb, T, C): head h of y[b] = probs[b, h] @ V[b, h].
  void attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads, Tensor& y);
  // Writes dqkv (mb, T, 3C) from dy (mb, T, C), the probs and qkv of forward.
  // `mask`: forward's.
  void attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                          int64_t heads, Tensor& dqkv, AttentionMask mask = AttentionMask::Causal);

 protected:
  // The kernels above, called with arguments whose shapes were checked.
  virtual void do_layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                    float eps, Tensor& y, Tensor& mean, Tensor& rstd) = 0;
  virtual void do_layernorm_backward(const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& dy, Tensor& dx,
                                     Tensor& dgamma, Tensor& dbeta) = 0;
  virtual void do_embedding_forward(const Tensor& tokens, const Tensor& wte, const Tensor& wpe,
                                    Tensor& y) = 0;
  virtual void do_embedding_backward(const Tensor& tokens, const Tensor& dy, Tensor& dwte,
                                     Tensor& dwpe) = 0;
  virtual void do_attention_probs(const Tensor& qkv, int64_t heads, Tensor& probs,
                                  AttentionMask mask) = 0;
  virtual void do_attention_values(const Tensor& qkv, const Tensor& probs, int64_t heads,
                                   Tensor& y) = 0;
  virtual void do_attention_backward(const Tensor& qkv, const Tensor& probs, const Tensor& dy,
                                     int64_t heads, Tensor& dqkv, AttentionMask mask) = 0;
};

}  // namespace pt
