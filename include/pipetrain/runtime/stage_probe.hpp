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

 private:
  StageRunner runner_;
  Backend& be_;
  int64_t rows_;
  ComputeRegions regions_;
};

}  // namespace pt
