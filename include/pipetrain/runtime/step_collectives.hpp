// step_collectives.hpp: what a training step computes across the ranks of
// a pipeline after its schedule ran: the batch's mean loss, the global
// gradient norm (the step's non-finite gradient check) and the clipping it
// implies, the measured bubble, the memory peaks, and the parameter gather.
//
// Values are gathered per stage and combined in global stage order, so each
// result is bitwise the same whatever the placement of the stages on ranks.
#pragma once

#include <mpi.h>

#include <memory>
#include <vector>

#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/executor.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

class StepCollectives {
 public:
  // `schedule` (its stage placement) is read at each call; it must outlive
  // this object. `replicas`: this rank's stages in every data-parallel replica.
  StepCollectives(MPI_Comm pipeline, MPI_Comm replicas, int replica_count,
                  const Schedule& schedule);

  // The global batch's mean loss (every replica's micro-batch losses added
  // in global micro-batch order), broadcast from the last stage.
  double mean_loss(const StepOutcome& outcome, const std::vector<StageModel>& stages,
                   int64_t batch_size) const;
  // Per-parameter sums of squares added in global parameter order; throws
  // on a non-finite gradient.
  double global_grad_norm(std::vector<StageModel>& stages, Backend& be, int64_t step) const;
  // The factor applied to the gradients: clip / norm above `clip` (0: off).
  static float clip_scale(double grad_norm, double clip);
  // 1 - (each rank's F + B + W time) / (the longest span), averaged over
  // ranks; `compute_s` gets every rank's compute seconds.
  double measured_bubble(const StepOutcome& outcome, std::vector<double>& compute_s) const;
  // Rank 0: per rank, the peak bytes by category then the total.
  std::vector<std::vector<double>> gather_memory_peaks(const MemoryStats& stats) const;
  // Every parameter in global order, on rank 0 (empty elsewhere).
  std::vector<float> gather_parameters(std::vector<StageModel>& stages) const;

 private:
  // Every stage's count from each rank's counts of its stages (`what` names
  // the wait), and the sums per rank.
  std::vector<int> per_stage_counts(const std::vector<StageModel>& stages,
                                    const std::vector<int>& mine, const char* what) const;
  std::vector<int> rank_counts(const std::vector<int>& stage_counts) const;
  // Per-stage blocks of values gathered rank by rank, put in stage order.
  template <typename T>
  std::vector<T> in_stage_order(const std::vector<T>& by_rank, const std::vector<int>& counts) const;

  MPI_Comm comm_;
  MPI_Comm replicas_comm_;
  int replicas_;
  int rank_ = 0, size_ = 1;
  const Schedule& schedule_;
  // (parameters of this rank) the sums of squares of global_grad_norm, kept
  // on the device from step to step.
  mutable std::unique_ptr<ScalarBatch> norm_slots_;
};

}  // namespace pt
