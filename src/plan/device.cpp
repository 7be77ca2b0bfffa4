// device.cpp: the H200 description and the analytic GPT unit costs.
//
// H200 SXM, from NVIDIA's H200 Tensor Core GPU datasheet (2024):
//   BF16 Tensor Core 1,979 TFLOP/s "with sparsity"; dense is half: 989 TFLOP/s
//   GPU memory 141 GB HBM3e, 4.8 TB/s
//   NVLink 900 GB/s per GPU, the sum of both directions: 450 GB/s one way
// Between nodes, one 400 Gb/s NDR InfiniBand adapter (ConnectX-7) per GPU, as
// in HGX H200 / DGX H200 systems: 50 GB/s one way. The latencies (3 us NVLink,
// 5 us InfiniBand, point to point through NCCL) are assumptions, not
// datasheet values. The default efficiency 0.45 is a typical model-FLOPs
// utilisation of large GPT training on Hopper (40-50%); it is an input.
//
// GPT costs per micro-batch of b sequences, T tokens, width C, H heads, MLP
// ratio R, vocabulary V padded to Vp (model.vocab_multiple; Vp = V without
// padding), e bytes per activation element (bf16: 2).
//
// FLOPs (2 per multiply-add), forward, per sequence:
//   block  qkv 6TC^2 + scores 2T^2C + weighted values 2T^2C + projection
//          2TC^2 + MLP 4RTC^2  = (8 + 4R) T C^2 + 4 T^2 C
//          (full T x T attention, as pipetrain computes it and as
//          model_train_flops_per_sample counts it; with fused attention
//          too, although cuDNN's causal kernel skips the tiles above the
//          diagonal: one count for both kinds, the MFU's, and the one
//          efficiency absorbs the difference)
//   head   LM head 2 T C Vp (LayerNorm and loss are elementwise, not counted).
//          The Vp - V padded columns are computed like the others, so times
//          count them (UnitCost::forward_flops); the model FLOPs and MFU
//          count only V (CostUnitInfo::forward_flops, the runtime's).
// Backward = 2 x forward (each GEMM has an input-gradient and a
// weight-gradient GEMM of its own size). Recompute (every:K, full) = the
// forward; the head recomputes only its LayerNorm (the last layer of a
// segment skips the LM head GEMM), so 0. Selective recomputes the
// probabilities from the kept q and k: the scores, 2 T^2 C.
// Fused attention (model.attention = "fused", flash-style: cuDNN's SDPA,
// the CPU's cpu_fused_attention.cpp) keeps no probabilities; its backward
// recomputes the scores from q and k before its four products, so the
// block's backward is 2 x forward + 2 T^2 C under every policy, and
// selective recomputes nothing (it is "none", as the runtime runs it).
//
// Activation bytes kept by a block for backward (recompute none), derived
// from what each operation's backward reads:
//   LayerNorm 1: its input (the block input) T C, its output (qkv GEMM input) T C
//   qkv: q, k, v 3 T C (scores and weighted-value backward)
//   softmax probabilities H T^2 (weighted-value and softmax backward);
//     fused attention: each row's log-sum-exp instead, fp32: 4 H T bytes
//   attention output before the projection T C (projection GEMM input;
//     the fused backward reads it too, for its row term dy . y)
//   residual sum (LayerNorm 2 input) T C, LayerNorm 2 output (fc1 input) T C
//   fc1 output (GELU input) R T C, GELU output (fc2 input) R T C
//   LayerNorm statistics: mean and 1/std per token per LayerNorm, fp32: 16 T bytes
// Total e b ((8 + 2R) T C + H T^2) + 16 b T bytes; selective drops e b H T^2.
// Fused: e b (8 + 2R) T C + 4 b H T + 16 b T under none and selective alike.
// This is the per-element count of docs/memory.md at e bytes (pipetrain
// itself keeps fp32, e = 4). Workspace above the stash (estimate): the
// probability gradient during the attention backward and a few T C
// gradients, e b (H T^2 + 4 T C); fused, whose tiles stay on chip, e b 4 T C.
// The head's loss gradient is b T Vp in fp32 (padded columns 0 but stored).
//
// Parameters: the embedding table and the LM head hold Vp rows (the padded
// ones are stored, updated and stepped like the others): memory and the
// optimizer step count Vp; the model's own count (reports) V.
//
// Bytes per parameter (mixed precision with Adam): bf16 working weights 2,
// fp32 gradient accumulation 4, fp32 master weights 4 and two fp32 moments 8
// -> 18. The optimizer step reads the gradient, master weights and moments
// and writes master weights, moments and the bf16 copy: 4 + 2 x 12 + 2 = 30
// bytes per parameter, at the memory bandwidth.
#include "pipetrain/plan/device.hpp"

#include <cstdio>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/gpt.hpp"

namespace pt {

namespace {

constexpr double kFp32 = 4.0;
constexpr double kTokenIdBytes = 4.0;  // int32 token ids

// v: the vocabulary rows the kernels compute and the memory holds, Vp.
struct Dims {
  double b, t, c, h, r, v, e;
  bool fused;  // fused attention: no probabilities kept, scores recomputed in backward
};

Dims dims_of(const GptSpec& g, int64_t micro_batch_sequences) {
  const GptDims& m = g.dims;
  return {static_cast<double>(micro_batch_sequences), static_cast<double>(m.seq_len),
          static_cast<double>(m.d_model),              static_cast<double>(m.heads),
          static_cast<double>(m.mlp_ratio),            static_cast<double>(m.padded_vocab()),
          g.activation_bytes,                          m.attention == AttentionKind::Fused};
}

void check_gpt(const GptSpec& g, int64_t micro_batch_sequences) {
  const GptDims& m = g.dims;
  if (m.blocks < 1 || m.d_model < 1 || m.heads < 1 || m.seq_len < 1 || m.vocab_size < 1 ||
      m.vocab_multiple < 1 || m.mlp_ratio < 1 || m.d_model % m.heads != 0 ||
      micro_batch_sequences < 1)
    throw InputError("GPT description '" + g.name +
                     "': blocks, d_model, heads, seq_len, vocab_size, vocab_multiple, mlp_ratio "
                     "and the micro-batch size must be >= 1 and heads must divide d_model");
}


// Persistent bytes of `params` parameters, and the optimizer step's time.
void set_parameters(UnitCost& u, double params, const GptSpec& g, const DeviceSpec& dev) {
  u.param_bytes = params * g.param_bytes;
  u.grad_bytes = params * g.grad_bytes;
  u.optimizer_bytes = params * g.optimizer_bytes;
  const double traffic = g.grad_bytes + 2.0 * g.optimizer_bytes + g.param_bytes;
  u.optimizer_s = params * traffic / dev.memory_bandwidth_bytes_per_s;
}

// backward_extra_flops: the backward's work beyond twice the forward (fused
// attention's recomputed scores).
void set_times(UnitCost& u, double forward_flops, double backward_extra_flops,
               double recompute_flops, double selective_flops, const DeviceSpec& dev) {
  const double rate = dev.achieved_flops();
  u.forward_flops = forward_flops;
  u.forward_s = forward_flops / rate;
  u.backward_s = (2.0 * forward_flops + backward_extra_flops) / rate;
  u.recompute_s = recompute_flops / rate;
  u.recompute_selective_s = selective_flops / rate;
}

UnitCost embedding_unit(const GptSpec& g, const Dims& d, const DeviceSpec& dev) {
  UnitCost u;
  u.name = "embedding";
  u.partitionable = false;
  // A gather forward, a scatter-add backward: bandwidth-bound, b T C elements each way.
  const double moved = 2.0 * d.b * d.t * d.c * d.e;
  u.forward_s = moved / dev.memory_bandwidth_bytes_per_s;
  u.backward_s = u.forward_s;
  u.recompute_s = u.forward_s;
  u.input_bytes = kTokenIdBytes * d.b * d.t;
  u.output_bytes = d.e * d.b * d.t * d.c;
  u.stash_none_bytes = u.input_bytes;  // the token ids
  u.stash_selective_bytes = u.input_bytes;
  u.workspace_bytes = u.output_bytes;
  set_parameters(u, gpt_embedding_parameters(g.dims), g, dev);
  return u;
}

// What a block keeps of its softmax for the backward: the probabilities
// (reference), or each row's fp32 log-sum-exp (fused).
double softmax_state_bytes(const Dims& d) {
  return d.fused ? kFp32 * d.b * d.h * d.t : d.e * d.b * d.h * d.t * d.t;
}

UnitCost block_unit(const GptSpec& g, const Dims& d, const DeviceSpec& dev, int64_t index) {
  UnitCost u;
  u.name = "block" + std::to_string(index);
  const double per_sequence = (8.0 + 4.0 * d.r) * d.t * d.c * d.c + 4.0 * d.t * d.t * d.c;
  const double scores = d.b * 2.0 * d.t * d.t * d.c;
  // Fused: the backward recomputes the scores itself; selective drops nothing.
  set_times(u, d.b * per_sequence, d.fused ? scores : 0.0, d.b * per_sequence,
            d.fused ? 0.0 : scores, dev);
  const double softmax = softmax_state_bytes(d);
  u.input_bytes = d.e * d.b * d.t * d.c;
  u.output_bytes = u.input_bytes;
  u.stash_none_bytes = d.e * d.b * (8.0 + 2.0 * d.r) * d.t * d.c + softmax + 4.0 * kFp32 * d.b * d.t;
  u.stash_selective_bytes = u.stash_none_bytes - (d.fused ? 0.0 : softmax);
  u.workspace_bytes = (d.fused ? 0.0 : softmax) + 4.0 * u.input_bytes;
  set_parameters(u, gpt_block_parameters(g.dims), g, dev);
  return u;
}

UnitCost head_unit(const GptSpec& g, const Dims& d, const DeviceSpec& dev) {
  UnitCost u;
  u.name = "head";
  u.partitionable = false;
  set_times(u, d.b * 2.0 * d.t * d.c * d.v, 0.0, 0.0, 0.0, dev);
  const double logits_grad = g.logits_grad_bytes * d.b * d.t * d.v;
  u.input_bytes = d.e * d.b * d.t * d.c;
  u.output_bytes = 0.0;  // the loss stays on the last stage
  // LayerNorm input and output, its statistics, the loss gradient.
  u.stash_none_bytes = 2.0 * u.input_bytes + 2.0 * kFp32 * d.b * d.t + logits_grad;
  u.stash_selective_bytes = u.stash_none_bytes;
  u.stash_always_bytes = logits_grad;
  u.workspace_bytes = logits_grad;  // the logits before they turn into the loss gradient
  set_parameters(u, gpt_head_parameters(g.dims), g, dev);
  return u;
}

}  // namespace

DeviceSpec h200_device() {
  DeviceSpec d;
  d.name = "H200 SXM (bf16)";
  d.peak_flops = 989e12;
  d.efficiency = 0.45;
  d.memory_bytes = 141e9;
  d.memory_bandwidth_bytes_per_s = 4.8e12;
  d.devices_per_node = 8;
  d.intra_node = LinkCost{3e-6, 450e9};
  d.inter_node = LinkCost{5e-6, 50e9};
  return d;
}

std::vector<LinkCost> stage_links(const DeviceSpec& device, int num_stages) {
  if (device.devices_per_node < 1)
    throw InputError("device '" + device.name + "': devices_per_node must be >= 1");
  std::vector<LinkCost> links;
  for (int s = 0; s + 1 < num_stages; ++s) {
    const bool same_node = (s + 1) % device.devices_per_node != 0;
    links.push_back(same_node ? device.intra_node : device.inter_node);
  }
  return links;
}

GptSpec gpt3_175b() {
  GptSpec g;
  g.name = "GPT-3 175B";
  g.dims.blocks = 96;
  g.dims.d_model = 12288;
  g.dims.heads = 96;
  g.dims.seq_len = 2048;
  g.dims.vocab_size = 50257;
  return g;
}

GptParameterCount gpt_parameter_count(const GptSpec& gpt) {
  check_gpt(gpt, 1);
  // The model layer's counts of the layers as built (model/gpt.hpp): the
  // stored ones with the padded vocabulary, the model's own without it.
  const auto total = [&](const GptDims& dims) {
    return gpt_embedding_parameters(dims) + static_cast<double>(dims.blocks) * gpt_block_parameters(dims) +
           gpt_head_parameters(dims);
  };
  GptDims unpadded = gpt.dims;
  unpadded.vocab_multiple = 1;
  GptParameterCount count;
  count.stored = total(gpt.dims);
  count.model = total(unpadded);
  return count;
}

namespace {

// "GPT-3 175B (96 blocks, d_model 12288, 96 heads, seq 2048, vocab 50257
// padded to 50304, fused attention; 175.2B parameters, 1.155M more stored in
// the padded vocabulary rows)": the padding, the attention kind and the
// stored excess only where they apply.
std::string describe(const GptSpec& gpt) {
  const GptDims& m = gpt.dims;
  const GptParameterCount params = gpt_parameter_count(gpt);
  char count[128];
  if (params.stored == params.model)
    std::snprintf(count, sizeof count, "%.4gB parameters", params.model * 1e-9);
  else
    std::snprintf(count, sizeof count, "%.4gB parameters, %.4gM more stored in the padded vocabulary rows",
                  params.model * 1e-9, (params.stored - params.model) * 1e-6);
  return gpt.name + " (" + std::to_string(m.blocks) + " blocks, d_model " +
         std::to_string(m.d_model) + ", " + std::to_string(m.heads) + " heads, seq " +
         std::to_string(m.seq_len) + ", vocab " + std::to_string(m.vocab_size) +
         (m.padded_vocab() == m.vocab_size ? "" : " padded to " + std::to_string(m.padded_vocab())) +
         (m.attention == AttentionKind::Fused ? ", fused attention" : "") + "; " + count + ")";
}

}  // namespace

ModelProfile gpt_profile(const GptSpec& gpt, const DeviceSpec& device,
                         int64_t micro_batch_sequences) {
  check_gpt(gpt, micro_batch_sequences);
  if (!(device.achieved_flops() > 0.0) || !(device.memory_bandwidth_bytes_per_s > 0.0))
    throw InputError("device '" + device.name +
                     "': peak_flops, efficiency and memory bandwidth must be > 0");
  const Dims d = dims_of(gpt, micro_batch_sequences);
  ModelProfile p;
  p.model = describe(gpt);
  p.backend = device.name;
  p.kernels = "analytic: FLOPs / (peak x " + std::to_string(device.efficiency) + ")";
  p.micro_batch_rows = micro_batch_sequences;
  p.units.push_back(embedding_unit(gpt, d, device));
  for (int64_t i = 0; i < gpt.dims.blocks; ++i) p.units.push_back(block_unit(gpt, d, device, i));
  p.units.push_back(head_unit(gpt, d, device));
  p.link = device.inter_node;
  return p;
}

}  // namespace pt
