// gpt.hpp: the layers of a decoder-only (GPT-style) transformer.
//
// Partition units are the transformer blocks. The first stage also holds the
// embedding, the last stage also the head (final LayerNorm + LM head, untied
// from the token embedding) and the softmax cross-entropy over the vocabulary.
// Shapes: tokens (mb, T) i32 -> embedding (mb, T, C) -> blocks (mb, T, C) ->
// head logits (mb, T, Vp). No dropout. Vp = GptDims::padded_vocab(), the
// vocabulary V rounded up to model.vocab_multiple (V itself by default):
// the rows V..Vp-1 of embed.wte and head.lm_head are initialised to zero,
// no token id reaches them, and the loss (over the first V logits) gives
// them zero gradient, so they stay zero.
//
// Parameter names (shared with tests/reference/gpt_reference.py):
//   embed.wte (Vp, C), embed.wpe (T, C)
//   block{i}.ln1.weight (C), block{i}.ln1.bias (C)
//   block{i}.attn.qkv.weight (3C, C), block{i}.attn.qkv.bias (3C)
//   block{i}.attn.proj.weight (C, C), block{i}.attn.proj.bias (C)
//   block{i}.ln2.weight (C), block{i}.ln2.bias (C)
//   block{i}.mlp.fc.weight (R*C, C), block{i}.mlp.fc.bias (R*C)
//   block{i}.mlp.proj.weight (C, R*C), block{i}.mlp.proj.bias (C)
//   head.ln_f.weight (C), head.ln_f.bias (C), head.lm_head.weight (Vp, C)
// Initialisation (GPT-2 style, from counter-based RNG keyed by the seed and
// the parameter's name, so independent of the partition): weights N(0, 0.02),
// the two residual projections N(0, 0.02 / sqrt(2 * n_blocks)), biases 0,
// LayerNorm weight 1 and bias 0.
// Beyond the core kernels the layers compute with the backend's
// TransformerKernels group, fetched through gpt_kernels; with
// attention = Fused the blocks' attention runs on its FusedAttentionKernels
// group instead (gpt_fused_attention), and a block keeps each row's
// log-sum-exp (mb, H, T) where the reference path keeps the probabilities
// (mb, H, T, T).
#pragma once

#include <memory>
#include <string>

#include "pipetrain/base/model_config.hpp"
#include "pipetrain/model/layers.hpp"
#include "pipetrain/tensor/fused_attention_kernels.hpp"
#include "pipetrain/tensor/transformer_kernels.hpp"

namespace pt {

// The transformer kernels of `be`, which every GPT layer computes with;
// InputError 'model family "gpt" needs the transformer kernels, which backend
// "<name>" does not provide' when it lacks them.
TransformerKernels& gpt_kernels(Backend& be);
// The fused attention kernels of `be`, which blocks with attention = Fused
// compute with; InputError 'model.attention = "fused" needs the
// fused_attention kernels, which backend "<name>" does not provide' when it
// lacks them (the CUDA backend in a precision other than bf16, or on a GPU
// older than compute capability 8.0).
FusedAttentionKernels& gpt_fused_attention(Backend& be);

// tokens (mb, T) i32 -> (mb, T, C): wte[token] + wpe[position].
std::unique_ptr<Layer> make_gpt_embedding(const GptDims& dims, uint64_t seed);
// Pre-LayerNorm block: x + attn(ln1(x)), then + mlp(ln2(x)); causal attention.
// `init`: see ParamInit (layers.hpp).
std::unique_ptr<Layer> make_gpt_block(const GptDims& dims, int64_t index, uint64_t seed,
                                      ParamInit init = ParamInit::FromSeed);
// (mb, T, C) -> logits (mb, T, Vp): ln_f then lm_head (no bias).
std::unique_ptr<Layer> make_gpt_head(const GptDims& dims, uint64_t seed);

// Parameter elements of each, as stored: wte (Vp, C) + wpe (T, C); two
// LayerNorms (C, C) and qkv, attention projection, MLP fc and projection
// with their biases; ln_f (C, C) + lm_head (Vp, C).
double gpt_embedding_parameters(const GptDims& dims);
double gpt_block_parameters(const GptDims& dims);
double gpt_head_parameters(const GptDims& dims);

}  // namespace pt
