// activation_copies.hpp: activations that the backward reads only as GEMM
// operands, kept in the GEMM precision (training.activation_copies).
//
// In bf16 and fp16 every GEMM rounds its fp32 operands to that precision. An
// activation that a layer keeps for its backward only to be a GEMM operand
// there (the input X of a weight gradient dW = dY^T X) is therefore kept as
// its rounded copy (BF16 / F16, 2 bytes an element, Backend::round_to), made
// once in the forward: the forward GEMM reads the copy, and so does the
// weight-gradient GEMM, as it reads a weight copy (model/weight_copies.hpp),
// with no cast. Rounding is idempotent, so the training is bitwise the same
// as with the fp32 activation kept; the stash of those tensors is halved
// and the backward's cast of them is gone.
//
// Which tensors: a Linear layer's input (the executor keeps it: the layer's
// Layer::input_operand), and in a GPT block the outputs of ln1 (qkv's
// input), ln2 (fc's input) and the GELU (the MLP projection's input), the
// attention output (the attention projection's input; with fused attention
// its backward's row term dy . y reads it too, which takes the copy: the
// fused forward writes 16-bit values, which the copy holds exactly), and in
// the head the output of ln_f (the LM head's input). Everything else a
// non-GEMM kernel reads in the backward stays fp32: a block's input and x1
// (LayerNorm backward), the fc output (GELU backward), qkv and the
// probabilities (attention backward).
//
// The copies are Workspace tensors when made; the executor counts the kept
// ones as MemCategory::Activations, so the memory statistics, the profiler's
// stash bytes and the planner see the smaller stash.
#pragma once

#include "pipetrain/model/model.hpp"

namespace pt {

// x rounded to be's GEMM precision (a new BF16 / F16 tensor on x's device)
// when that precision stores operands (bf16, fp16) and x is F32; else x.
Tensor gemm_operand_copy(Backend& be, const Tensor& x);

// Turns activation copies on or off for every layer of `stage` (the layers'
// default: off), where a run's stages come into being (the build, a
// rebalancing move's arriving layers, a profiled unit), as the deck's
// training.activation_copies says. On changes nothing in fp32 and tf32,
// whose GEMMs take f32 operands (gemm_operand_copy returns x).
void set_activation_copies(StageModel& stage, bool on);

}  // namespace pt
