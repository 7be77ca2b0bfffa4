// cost.hpp: what the planner knows about a model on a machine: the measured
// (or described) cost of every partition unit per micro-batch, and of the
// links between stages. A profile (runtime/profiler, `pipetrain profile`,
// io/profile_h5 for profile.h5) fills these; the partition solver
// (plan/partition) and the schedule simulator (plan/simulate) read them.
//
// Units are the model's partition units in forward order. The MLP has one per
// Linear layer (with its activation). The GPT has the token+position
// embedding (pinned to the first stage), one per transformer block, and the
// final LayerNorm + LM head + loss (pinned to the last stage); only the
// blocks are counted by pipeline.partition, so pinned units have
// partitionable = false and always join the first or last stage.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pt {

struct UnitCost {
  std::string name;            // "linear3", "embedding", "block2", "head"
  bool partitionable = true;   // false: pinned to the first (embedding) or last (head) stage
  // Executor layers the unit holds, in which recompute every:K counts
  // (schedule/recompute.hpp): a GPT unit 1, an MLP unit 2 (Linear and
  // activation; the model's last Linear has none: 1).
  int64_t layers = 1;
  // Seconds per micro-batch on the profiled backend.
  double forward_s = 0.0;      // forward
  double backward_s = 0.0;     // backward (input and weight gradients)
  double recompute_s = 0.0;    // forward re-run inside backward when recomputed
  double recompute_selective_s = 0.0;  // what backward re-runs under recompute = selective
  double recompute_end_s = 0.0;  // the same when the unit ends its recompute segment (its
                                 // last layer only refills what its backward needs)
  double optimizer_s = 0.0;    // the optimizer step of the unit's parameters (once per batch)
  // pipeline.weight_grad = "step", per micro-batch, measured by the stage
  // chains (runtime/profile_chain.cpp) with the profile's micro-batch count:
  // B without weight gradients while the step's deferred tensors are held,
  // and the unit's share of the stage's one pass of weight gradients
  // (stacking included) divided by the micro-batches. < 0: not measured (the
  // planner then splits backward_s by the model's weight-gradient share).
  double step_input_s = -1.0;
  double step_weight_s = -1.0;
  double forward_flops = 0.0;  // matmul FLOPs the forward computes, a padded vocabulary's
                               // columns included (CostUnitInfo::computed_flops): what
                               // takes time, by which a stage's time is shared out
  // Bytes per micro-batch.
  double input_bytes = 0.0;            // the unit's input (its message when a stage starts here)
  // The input as the unit's first layer keeps it at a recompute segment
  // start: in bf16/fp16 with activation copies a Linear keeps its input
  // rounded, half of input_bytes (model/activation_copies.hpp); < 0: as
  // input_bytes (a profile written before this was measured).
  double kept_input_bytes = -1.0;
  double kept_input() const { return kept_input_bytes >= 0.0 ? kept_input_bytes : input_bytes; }
  double output_bytes = 0.0;           // its output: the message when a stage ends here
                                       // (last unit: the loss gradient, kept under every policy)
  double stash_none_bytes = 0.0;       // kept from F to B with recompute = none (input + saved)
  double stash_selective_bytes = 0.0;  // ... with recompute = selective
  double stash_always_bytes = 0.0;     // part of both kept under every policy (the loss gradient)
  double workspace_bytes = 0.0;        // transient peak above the stash during its F or B
  // The same peak during B alone (<= workspace_bytes; what recompute "full"
  // adds its re-created stash to). 0: not measured, workspace_bytes is used.
  double backward_workspace_bytes = 0.0;
  // The same peak during F alone (<= workspace_bytes; the F transient the
  // simulator charges at an F, where the stage may also hold a send not yet
  // complete and a gradient receive posted ahead). 0: not measured,
  // workspace_bytes is used.
  double forward_workspace_bytes = 0.0;
  // Bytes per unit, independent of micro-batches.
  double param_bytes = 0.0;
  double grad_bytes = 0.0;
  double optimizer_bytes = 0.0;
  // The host copy an asynchronous checkpoint holds while it is written
  // (output.checkpoint_async): parameters and optimizer state again. Not
  // measured: the deck's plan sets it (deck_plan.cpp), 0 otherwise.
  double checkpoint_staging_bytes = 0.0;
  double data_bytes = 0.0;  // training data cached for the unit's stage in host memory:
                            // the inputs on the first unit, the targets on the last
};

// A point-to-point link between neighbouring stages: time(bytes) =
// latency_s + bytes / bandwidth_bytes_per_s.
struct LinkCost {
  double latency_s = 0.0;
  double bandwidth_bytes_per_s = 0.0;
  double time_s(double bytes) const {
    return latency_s + (bandwidth_bytes_per_s > 0.0 ? bytes / bandwidth_bytes_per_s : 0.0);
  }
};

// A data-parallel gradient reduction timed through the run's own reducer
// (runtime/profile_reduction.hpp) at D replicas: the fp32 gradient bytes of
// each timed stage and the reduction's median seconds, slowest replica
// group; `link` is the link that replica_reduction_s (plan/alternatives.hpp)
// must be given to reproduce them (fit_reduction_link).
struct MeasuredReduction {
  int replicas = 2;
  std::vector<double> grad_bytes;  // (sizes)
  std::vector<double> seconds;     // (sizes)
  LinkCost link;
};

struct ModelProfile {
  std::string model;           // one-line description of the deck's model
  std::string backend;         // "cpu" | "cuda" | a device description's name
  std::string kernels;         // GEMM library and kernels the times were measured with
  int64_t micro_batch_rows = 0;  // samples per micro-batch the times are for
  std::vector<UnitCost> units;   // forward order
  LinkCost link;
  double step_overhead_s = 0.0;  // per step, outside the schedule (loss, norm, clip)
  double stage_data_bytes = 0.0; // host bytes of training data every stage holds
  // How the unit times were measured: "warm" (a unit's state stays in the
  // caches between its micro-batches, as in a run whose stages fit them) or
  // "cold" (caches evicted before every timed pass, as in a run whose stages
  // do not), with the reason, e.g. "cold: a stage's 96.0 MiB of parameters,
  // gradients and optimizer state exceed its 16.0 MiB share of the 32.0 MiB
  // last-level cache". "" for device descriptions.
  std::string cache;
  // How the unit times were corrected by whole stages measured as the run
  // runs them (runtime/profile_chain.cpp), e.g. "stage chains [8, 8]: F x
  // 1.021 1.034, B x 1.287 1.301, recompute x 1.05 1.04"; "" when not.
  std::string calibration;
  // Data-parallel reductions measured on the profiling ranks, one per replica
  // count D > 1 timed; empty: the replicas are modelled over `link`.
  std::vector<MeasuredReduction> reductions;
};

// The reduction timed at D; null when there is none.
inline const MeasuredReduction* reduction_at(const std::vector<MeasuredReduction>& reductions, int replicas) {
  for (const MeasuredReduction& r : reductions)
    if (r.replicas == replicas) return &r;
  return nullptr;
}
inline const MeasuredReduction* reduction_at(const ModelProfile& profile, int replicas) {
  return reduction_at(profile.reductions, replicas);
}
// The link replicas reduce over at D: the measured reduction's fitted link
// when there is one for D, else `fallback`.
inline LinkCost replica_link_of(const std::vector<MeasuredReduction>& reductions, int replicas,
                                const LinkCost& fallback) {
  const MeasuredReduction* r = reduction_at(reductions, replicas);
  return r ? r->link : fallback;
}
inline LinkCost replica_link_of(const ModelProfile& profile, int replicas, const LinkCost& fallback) {
  return replica_link_of(profile.reductions, replicas, fallback);
}

// Whether `profile`'s messages move only when the receiving rank polls
// between its actions (the CPU backend's MPI transport), not on their own
// (NCCL, device descriptions): SimulationInput::receiver_progress.
inline bool receiver_driven_links(const ModelProfile& profile) { return profile.backend == "cpu"; }

}  // namespace pt
