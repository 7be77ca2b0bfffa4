// stage_probe.hpp: one micro-batch on one stage alone, measured.
//
// The probe runs the stage through a StageRunner, the code a training step
// runs, with no communication: its memory is counted by the same allocator
// statistics as a run's peaks and its times on the backend's clock
// (ComputeTimer). Used by "auto" recomputation and the profiler.
#pragma once

#include <functional>

#include "pipetrain/runtime/compute_regions.hpp"
#include "pipetrain/runtime/stage_runner.hpp"

namespace pt {

struct MicroBatchProbe {
  size_t stash_bytes = 0;      // kept from F until B (activations)
  size_t transient_bytes = 0;  // peak of everything else during F + B, beyond
                               // the stage input and output-gradient buffers
  size_t workspace_bytes = 0;  // the same peak counting those two buffers
  size_t backward_workspace_bytes = 0;  // workspace_bytes' peak during B alone
  size_t forward_workspace_bytes = 0;   // workspace_bytes' peak during F alone
  double forward_s = 0.0;      // F; on the first stage with fetching the input
  double backward_s = 0.0;     // B, with its recompute
  double recompute_s = 0.0;    // the recompute inside B (0 unless it recomputes)
};

// A step's split backward on one stage (pipeline.weight_grad = "step").
struct StepSplitProbe {
  double input_s = 0.0;   // the micro-batches' B without weight gradients, summed
  double weight_s = 0.0;  // the stage's one pass of weight gradients, stacking included
};

class StageProbe {
 public:
  // `config`: its rows, batch size and replica (executor_config_for(deck)).
  StageProbe(StageModel& stage, Backend& backend, RecomputePolicy policy,
             const ExecutorConfig& config);
  // A zero input (data on the first stage), forward, then backward from a
  // zero output gradient (the loss gradient on the last stage), measured
  // with `stats` (host or device statistics); `reset_peaks` may be empty.
  // `before_each_pass`, when given, runs untimed before the forward and
  // before the backward (the profiler evicts the caches there). Gradients it
  // adds are cleared by the next step's zero_grad.
  MicroBatchProbe probe_micro_batch(const Dataset& data, const std::function<MemoryStats()>& stats,
                                    const std::function<void()>& reset_peaks,
                                    const std::function<void()>& before_each_pass = {});
  // `micro_batches` micro-batches, each F then B with its weight gradients
  // deferred, all their deferred tensors held, then the stage's one pass of
  // weight gradients over them: a stage of a run with per-step weight
  // gradients, without the communication. The B a probe of a split backward
  // times runs with the deferred tensors of the micro-batches before it
  // alive, as in the run; the recompute policy is the probe's.
  StepSplitProbe probe_step_split(const Dataset& data, int micro_batches);

 private:
  Tensor zero_input() const;
  Tensor zero_output_grad() const;

  StageRunner runner_;
  Backend& be_;
  int64_t rows_;
  ComputeRegions regions_;
};

}  // namespace pt
