// stage_cost.hpp: what one pipeline stage costs, from the costs of the
// contiguous range of partition units it holds and its recomputation policy.
// The partition solver (plan/partition) and the schedule simulator
// (plan/simulate) both read stage costs from here, so that they agree on
// every formula (docs/planner.md, "Memory of a stage").
//
// Per micro-batch, for the units u of the stage (first unit = index 0):
//   time      F = sum forward_s;  B = sum backward_s + recompute time, where
//             recompute time = 0 (none), sum recompute_selective_s
//             (selective), sum recompute_s (every:K, full)
//   stash     kept from F to B, per micro-batch in flight:
//             none       sum stash_none_bytes
//             selective  sum stash_selective_bytes
//             every:K    sum of the inputs of the stage's layers 0, K, 2K, ... +
//                        sum stash_always_bytes (a unit's first layer takes
//                        its input as kept (UnitCost::kept_input: half of
//                        input_bytes for a Linear with activation copies),
//                        its later ones its output_bytes)
//             full       kept input of unit 0 + sum stash_always_bytes
//   transient above the stash, for the one micro-batch being computed, from
//   the layered transient L = max over the stage's units k of
//             workspace_bytes[k] - (output_bytes[k] unless k is the last)
//             - sum of stash_none_bytes of the units after k
//   (when unit k runs, the stash of the later units does not exist yet or
//   is freed already; docs/profile.md checks it against the executor):
//             none       F = L_F over the units' forward_workspace_bytes
//                        (the peak of F alone), B = L_B; their larger is L_F
//             selective  F = B = L_F with stash_selective_bytes for the later
//                        units and stash_none - stash_selective of unit k added
//             every:K    F = max workspace_bytes; B = F + the largest sum of
//                        stash_none over the units each K-layer segment
//                        touches (an upper bound)
//             full       F as none's; B = L_B + sum stash_none - the full stash
//   where L_F is L with the last unit's output taken off as well on a stage
//   that is not the last (the probe held both its output gradient, which a
//   run's F does not have yet, and its output, which a run has sent before
//   B), and L_B is L over the units'
//   backward_workspace_bytes (the peak of B alone: full's B re-creates the
//   stash but not the loss's forward buffers), with the last unit's output
//   taken off on a stage that is not the last (a run sends it after F)
//   persistent  sum (param_bytes + grad_bytes + optimizer_bytes)
//   data        training data the stage caches in host memory: the profile's
//               stage_data_bytes + sum data_bytes (the first stage's inputs,
//               the last stage's targets)
//   comm        2 x (input message + output message): a receive posted one
//               compute ahead and a send not yet completed, per direction;
//               stage 0 has no input message, the last stage no output message
// Peak bytes = persistent + data + comm + in_flight x stash + max(F transient, B transient).
//
// K of every:K counts executor layers, as at run time (schedule/recompute.hpp):
// each unit's UnitCost::layers maps units onto layers (a GPT unit is one
// layer, an MLP unit two: its Linear and its activation).
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/plan/cost.hpp"
#include "pipetrain/schedule/recompute.hpp"

namespace pt {

// A stage's recomputation policy: the runtime's, defined once in
// schedule/recompute.hpp (PlanRecompute::parse is RecomputePolicy::parse).
using PlanRecompute = RecomputePolicy;

struct StageCost {
  // Seconds per micro-batch, and once per step for the optimizer.
  double forward_s = 0.0;
  double backward_s = 0.0;   // including recomputation
  double recompute_s = 0.0;  // the part of backward_s that recomputes
  // W's seconds of a split backward when measured (a trace's own costs,
  // bubble_at_costs); < 0: the simulator's weight_grad_share of the backward.
  double weight_s = -1.0;
  // B of a split backward (its recompute included) when measured apart from
  // the fused backward (apply_step_split: pipeline.weight_grad = "step");
  // < 0: backward_s less W.
  double input_s = -1.0;
  double optimizer_s = 0.0;
  // Bytes per micro-batch of the messages to the neighbours.
  double input_message_bytes = 0.0;   // activation received, gradient sent (0 on stage 0)
  double output_message_bytes = 0.0;  // activation sent, gradient received (0 on the last stage)
  // Memory (see the top of this file).
  double persistent_bytes = 0.0;
  double data_bytes = 0.0;  // training data cached in host memory (CPU profiles)
  double comm_buffer_bytes = 0.0;
  double stash_bytes = 0.0;  // per micro-batch in flight
  double forward_transient_bytes = 0.0;
  double backward_transient_bytes = 0.0;

  double time_per_micro_batch_s() const { return forward_s + backward_s; }
  double base_bytes() const { return persistent_bytes + data_bytes + comm_buffer_bytes; }
  double peak_bytes(double in_flight) const;
};

// Prefix sums and range maxima over a profile's units, so that the cost of
// any contiguous range is O(1) (O(range / K) for every:K's transient).
class UnitRanges {
 public:
  explicit UnitRanges(const ModelProfile& profile);
  size_t size() const { return count_; }
  // Units [first, end) as a stage; `first_stage` / `last_stage` drop the
  // input / output message.
  StageCost cost(size_t first, size_t end, bool first_stage, bool last_stage,
                 const PlanRecompute& policy) const;
  double time_s(size_t first, size_t end, const PlanRecompute& policy) const;
  // A lower bound of cost(...).peak_bytes(in_flight) that never decreases as
  // the range grows at either end (the terms that can shrink are left out).
  double peak_lower_bound(size_t first, size_t end, const PlanRecompute& policy,
                          double in_flight) const;

 private:
  using Prefix = std::vector<double>;  // prefix[i] = sum of the first i units
  double sum(const Prefix& p, size_t first, size_t end) const { return p[end] - p[first]; }
  double range_max(const std::vector<std::vector<double>>& table, size_t first,
                   size_t end) const;
  double kept_inputs(size_t first, size_t end, size_t every) const;
  double segment_peak(size_t first, size_t end, size_t every) const;
  double stash_bytes(size_t first, size_t end, const PlanRecompute& policy) const;
  double recompute_time(size_t first, size_t end, const PlanRecompute& policy) const;
  double backward_layered_transient(size_t first, size_t end, bool last_stage) const;
  double forward_alone_transient(size_t first, size_t end, bool last_stage) const;
  double phase_transient(const std::vector<std::vector<double>>& terms_max,
                         const std::vector<double>& whole, const Prefix& stash, size_t first,
                         size_t end, bool last_stage) const;
  std::pair<double, double> transients(size_t first, size_t end, bool last_stage,
                                       const PlanRecompute& policy) const;

  size_t count_ = 0;
  UnitLayerMap layers_;  // the units' executor layers, for every:K
  Prefix forward_, backward_, recompute_, recompute_selective_, optimizer_;
  Prefix stash_none_, stash_selective_, stash_always_, persistent_, data_;
  double stage_data_ = 0.0;  // profile.stage_data_bytes: on every stage
  std::vector<double> input_bytes_, kept_input_, output_bytes_, workspace_, backward_workspace_,
      forward_workspace_, selective_last_;
  // Sparse tables of range maxima: workspace_bytes, and the layered
  // transient terms of units followed by others in their stage.
  std::vector<std::vector<double>> workspace_max_, none_terms_max_, selective_terms_max_,
      backward_terms_max_, forward_terms_max_;
};

// Where the partitionable units sit: units [leading, leading + partitionable)
// of the profile; the `leading` pinned units join the first stage and the
// `trailing` ones the last.
struct UnitLayout {
  size_t leading = 0;
  size_t partitionable = 0;
  size_t trailing = 0;
};
// Throws InputError when a pinned unit sits between partitionable ones or no
// unit is partitionable.
UnitLayout unit_layout(const ModelProfile& profile);

// Per-stage costs of a partition: units_per_stage counts partitionable units
// (pinned units join the first and last stage); policies has one entry per
// stage, or one for every stage. Counts that do not cover the partitionable
// units exactly, or an empty stage, give an InputError.
std::vector<StageCost> stage_costs(const ModelProfile& profile,
                                   const std::vector<int64_t>& units_per_stage,
                                   const std::vector<PlanRecompute>& policies);

// pipeline.weight_grad = "step": each stage's pass of weight gradients over
// a whole replica batch (SimulationInput::step_weight_s): W's share of the
// stage's backward without recompute, from `pass_profile`, a profile at
// those rows (runtime/profiler.hpp profile_weight_pass, or any profile of
// that micro-batch size).
std::vector<double> step_weight_seconds(const ModelProfile& pass_profile, double weight_grad_share,
                                        const std::vector<int64_t>& units_per_stage,
                                        const std::vector<PlanRecompute>& policies);

// Whether every unit of `profile` has the step's figures the stage chains
// measure (UnitCost::step_input_s and step_weight_s).
bool has_step_split(const ModelProfile& profile);

// pipeline.weight_grad = "step" from those figures: sets each stage's
// input_s in `stages` (stage_costs of the same partition: step_input_s
// summed, plus the stage's recompute) and returns each stage's pass of
// weight gradients over `micro_batches` (SimulationInput::step_weight_s).
// Requires has_step_split(profile).
std::vector<double> apply_step_split(const ModelProfile& profile,
                                     const std::vector<int64_t>& units_per_stage, int micro_batches,
                                     std::vector<StageCost>& stages);

// pipeline.weight_grad = "step": each stage's pass of weight gradients, by
// apply_step_split when `profile` has the step's figures (setting the
// stages' input_s), else by step_weight_seconds of `pass_profile` (null:
// none, an empty result).
std::vector<double> step_pass_seconds(const ModelProfile& profile, const ModelProfile* pass_profile,
                                      double weight_grad_share,
                                      const std::vector<int64_t>& units_per_stage,
                                      const std::vector<PlanRecompute>& policies, int micro_batches,
                                      std::vector<StageCost>& stages);

}  // namespace pt
