// device.hpp: paper-scale planning inputs without a machine to measure:
// a device description (peak FLOP/s, an achievable fraction of it, memory,
// links) and an analytic GPT whose unit costs follow from FLOP counts and
// activation sizes (derivations in src/plan/device.cpp and docs/planner.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/base/model_config.hpp"
#include "pipetrain/plan/cost.hpp"

namespace pt {

struct DeviceSpec {
  std::string name;
  double peak_flops = 0.0;    // dense FLOP/s in the training precision
  double efficiency = 0.45;   // achieved fraction of peak_flops (MFU-like)
  double memory_bytes = 0.0;  // device memory
  double memory_bandwidth_bytes_per_s = 0.0;  // for the memory-bound optimizer step
  int devices_per_node = 1;
  LinkCost intra_node;  // between devices of one node, one direction
  LinkCost inter_node;  // between nodes, one direction
  double achieved_flops() const { return peak_flops * efficiency; }
};

// NVIDIA H200 SXM in an 8-GPU HGX node with 400 Gb/s InfiniBand per GPU
// (values and sources in src/plan/device.cpp).
DeviceSpec h200_device();

// The link between stage s and s + 1 for stages placed one per device,
// devices_per_node per node in order: intra_node within a node, else inter_node.
std::vector<LinkCost> stage_links(const DeviceSpec& device, int num_stages);

// A GPT as the analytic cost model sees it: its widths (the runtime's
// GptDims, with the vocabulary padding and the attention kind, which change
// its costs) and the bytes each kind of element takes.
struct GptSpec {
  std::string name;
  GptDims dims;
  // Bytes per element or parameter (mixed precision; see device.cpp).
  double activation_bytes = 2.0;   // bf16 activations and messages
  double param_bytes = 2.0;        // bf16 working weights
  double grad_bytes = 4.0;         // fp32 gradient accumulation over micro-batches
  double optimizer_bytes = 12.0;   // fp32 master weights + Adam's two fp32 moments
  double logits_grad_bytes = 4.0;  // the loss gradient (T x V) kept in fp32
};

// GPT-3 175B (Brown et al. 2020, table 2.1): 96 blocks, d_model 12288, 96
// heads, 2048 tokens, the GPT-2 vocabulary of 50257.
GptSpec gpt3_175b();

// Unit costs for micro-batches of `micro_batch_sequences` sequences: the
// embedding (pinned first), one unit per block, the head (final LayerNorm,
// LM head, loss; pinned last). Times are FLOPs / device.achieved_flops(),
// the padded vocabulary columns included;
// the optimizer step is memory-bound (bytes / memory bandwidth). The link
// is device.inter_node (stage_links gives per-link costs).
ModelProfile gpt_profile(const GptSpec& gpt, const DeviceSpec& device,
                         int64_t micro_batch_sequences);

// Parameters of the model (embedding, blocks, head), for reports: the
// model's own, with the vocabulary V, and the ones stored, with the padded
// rows of embed.wte and head.lm_head (Vp; the same without padding), which
// the memory and the optimizer step count.
struct GptParameterCount {
  double model = 0.0;
  double stored = 0.0;
};
GptParameterCount gpt_parameter_count(const GptSpec& gpt);

}  // namespace pt
