// loss_scaler.hpp: dynamic loss scaling for fp16 mixed precision.
//
// In fp16 small gradients underflow; multiplying the loss (in practice: the
// loss-gradient seed, the grad_scale given to Loss::forward_backward) by S
// shifts them into range. After backward, gradients are checked: on overflow
// (an inf or NaN anywhere, on any rank) the step is skipped and S backs off;
// otherwise gradients are divided by S and the optimizer runs, and after
// growth_interval finite steps in a row S grows. Pure Backend calls, so it is
// tested on the CPU (tests/test_loss_scaler.cpp). bf16 needs no scaler.
//
// Per step, on every rank:
//   loss->forward_backward(be, pred, target, grad_scale * scaler.scale(), dpred);
//   ... all backward passes ...
//   if (scaler.finish_backward(be, stage.params(), comm)) optimizer.step(...);
//   optimizer.zero_grad(be);
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "pipetrain/model/layers.hpp"

namespace pt {

struct LossScalerConfig {
  double initial_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // finite steps in a row before growing
  double min_scale = 1.0;
  double max_scale = 16777216.0;  // 2^24
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerConfig& cfg = {});

  // The current scale S (a power of two with the default factors).
  float scale() const { return static_cast<float>(scale_); }

  // True when every gradient of params is finite on this rank. The counts
  // stay on the device in one batch, read once, which the scaler keeps from
  // step to step (made again only for another backend or parameter count).
  bool grads_finite(Backend& be, const std::vector<Param*>& params);
  // AND over comm (collective): all stages skip or step together.
  static bool all_ranks_finite(bool local_finite, MPI_Comm comm);
  // grad /= S for every parameter (exact for powers of two).
  void unscale(Backend& be, const std::vector<Param*>& params) const;

  // Records a step: returns true (step) when finite, false (skip) on overflow.
  // Overflow: S *= backoff (not below min_scale), the finite run restarts.
  // Finite: after growth_interval finite steps in a row S *= growth (capped).
  bool update(bool finite);

  // grads_finite, all_ranks_finite over comm, unscale when finite, update.
  // Returns whether the optimizer step should run.
  bool finish_backward(Backend& be, const std::vector<Param*>& params, MPI_Comm comm);

  int64_t skipped_steps() const { return skipped_; }
  int64_t finite_run() const { return run_; }
  // Continues from a checkpoint's state (scale, finite run, skipped steps).
  void restore(double scale, int64_t finite_run, int64_t skipped);

 private:
  LossScalerConfig cfg_;
  double scale_;
  int64_t run_ = 0;      // finite steps since the last overflow or growth
  int64_t skipped_ = 0;  // steps skipped for overflow
  // grads_finite's non-finite count per parameter, (params) slots of
  // counts_backend_'s; reused every step.
  std::unique_ptr<ScalarBatch> nonfinite_counts_;
  const Backend* counts_backend_ = nullptr;
};

}  // namespace pt
