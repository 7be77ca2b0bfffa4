// training_step.hpp: one training step, and one evaluation, of a built run
// (run_builder.hpp).
//
// A step zeroes the gradients, runs the schedule through the engine's
// executor (the reducer finishing the data-parallel sums), then works out
// across ranks the batch's mean loss, the fp16 overflow check, the global
// gradient norm and the measured bubble (StepCollectives), clips, takes
// one optimizer step and gathers the memory peaks. With
// pipeline.schedule_times = "measured" it places the schedule again once
// the measured steps are done (schedule_placement.hpp).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "pipetrain/runtime/run_builder.hpp"

namespace pt {

struct StepRecord {
  int64_t step = 0;          // 0-based
  double loss = 0.0;         // mean loss of the batch
  double lr = 0.0;           // learning rate used
  double grad_norm = 0.0;    // global L2 norm before clipping
  double step_time_s = 0.0;  // wall time of the step on this rank
  double eval_loss = std::nan("");  // held-out loss when evaluated this step
  double bubble = 0.0;       // measured pipeline bubble (fraction of the step idle)
  bool skipped = false;      // fp16: the step overflowed and was skipped
  double loss_scale = 1.0;   // fp16: the dynamic loss scale used
  // Rank 0 only: per rank of the pipeline (the stages it owns together: one
  // stage per rank except under interleaved and ZB-V), peak bytes during the
  // step by MemCategory, then the peak of the total. (ranks, categories + 1)
  std::vector<std::vector<double>> rank_peak_bytes;
  // Every rank: per rank of the pipeline (its stages together), F + B + W
  // time of the step without waits (seconds); metrics.h5 keeps the name
  // stage_compute_s. Then the units each stage held.
  std::vector<double> rank_compute_s;
  std::vector<int64_t> partition;
  // Dynamic rebalancing after this step (set by the driver): the measured
  // slowest / fastest ratio of a check (NaN: no check), the predicted ratio
  // of the partition moved to (NaN: no move).
  double rebalance_ratio = std::nan("");
  double rebalance_predicted_ratio = std::nan("");
  // Re-planning (pipeline.auto_replan_every; set by the driver): the
  // micro-batch count the step ran with; at a check, the measured step's
  // deviation from the prediction (measured / predicted - 1; NaN: no check)
  // and, when the plans were ranked again, the predicted gain of the best
  // one over the plan in force (NaN: not ranked); whether the run switched
  // plans after this step.
  int64_t micro_batches = 0;
  double replan_deviation = std::nan("");
  double replan_gain = std::nan("");
  bool replan_switched = false;
  // pipeline.schedule_times = "measured": after this step the schedule was
  // placed again at the measured action times (Trainer::placement_times);
  // its bubble simulated at those times before and after, and the best
  // timed candidate's, kept or not (NaN: no placement).
  bool schedule_placed = false;
  double placed_bubble_before = std::nan("");
  double placed_bubble_after = std::nan("");
  double placed_bubble_timed = std::nan("");
};

// Collective over the pipeline (and its replicas): training step `step`.
StepRecord run_training_step(RunParts& run, int64_t step);

// Collective over the pipeline: the mean loss over training.eval_batches
// held-out batches (forward only).
double run_evaluation(RunParts& run);

}  // namespace pt
