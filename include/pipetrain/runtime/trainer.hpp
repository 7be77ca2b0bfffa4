// trainer.hpp: one rank's part of pipeline-parallel training.
//
// Builds this rank's stages (one, or several with interleaved and ZB-V
// schedules), the optimizer, the data set and the schedule
// (generated or loaded, then validated), and runs training steps:
// zero gradients, run the schedule through the Executor, combine the loss and
// the global gradient norm, take one optimizer step per batch. The parts are
// its own: the executor and gradient reducer come from one factory
// (build_engine, also after a rebalancing move), the step's cross-rank
// arithmetic from StepCollectives (step_collectives.hpp), the rebalancing
// transfers from unit_mover.hpp, a re-placed schedule from
// schedule_placement.hpp.
#pragma once

#include <mpi.h>

#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/runtime/executor.hpp"
#include "pipetrain/runtime/schedule_placement.hpp"
#include "pipetrain/runtime/grad_reducer.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "pipetrain/runtime/replica_group.hpp"
#include "pipetrain/model/loss_scaler.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/runtime/rebalance.hpp"
#include "pipetrain/runtime/step_collectives.hpp"

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
  // pipeline.schedule_times = "measured": after this step the schedule was
  // placed again at the measured action times (Trainer::placement_times);
  // its bubble simulated at those times before and after, and the best
  // timed candidate's, kept or not (NaN: no placement).
  bool schedule_placed = false;
  double placed_bubble_before = std::nan("");
  double placed_bubble_after = std::nan("");
  double placed_bubble_timed = std::nan("");
};

// What "auto" recomputation measured and chose on one stage.
struct RecomputeChoice {
  std::string policy;          // chosen policy name
  std::string requested;       // the deck's setting for this stage
  double needed_bytes = 0.0;   // estimated peak with the chosen policy (auto only)
  double budget_bytes = 0.0;   // pipeline.memory_budget_mb in bytes (auto only)
};

// The deck's schedule on `ranks` ranks: generated, or read from its file;
// ranks x stages_per_rank stages.
Schedule schedule_for_deck(const Deck& deck, int ranks);

// BLAS threads for this rank: `requested` (training.blas_threads), or with 0
// node cores / ranks on the node.
struct BlasThreadsChoice {
  int threads = 1;
  int node_cores = 1;
  int ranks_on_node = 1;
  bool automatic = true;
};
BlasThreadsChoice choose_blas_threads(int64_t requested, MPI_Comm comm);
// The cores this node's ranks share: PIPETRAIN_NODE_CORES when set, else the
// CPUs online. InputError for a value that is not a positive integer.
int node_cores();

// Where a rank computes. The defaults are the CPU backend and MPI; the driver
// fills in the CUDA backend, a GPU transport and device memory statistics
// when training.device = "cuda" (the runtime itself has no CUDA dependency).
struct ComputeSetup {
  Backend* backend = nullptr;  // null: cpu_backend()
  std::function<std::unique_ptr<Transport>(MPI_Comm)> make_transport;  // null: MPI
  // The data-parallel replica group of this rank's stages; null: MPI.
  std::function<std::unique_ptr<ReplicaGroup>(MPI_Comm)> make_replica_group;
  std::function<MemoryStats()> device_memory_stats;  // null: host statistics
  std::function<void()> reset_device_memory_peaks;
};

class Trainer {
 public:
  // `comm` holds the schedule's ranks (stages / stages per rank).
  Trainer(const Deck& deck, MPI_Comm comm, ComputeSetup setup = {});
  // One pipeline of a P x D grid (data_parallel_size(deck) == grid's D):
  // collective over the grid's world. The grid must outlive the trainer.
  Trainer(const Deck& deck, const ProcessGrid& grid, ComputeSetup setup = {});
  // The same, starting from `partition` (units per stage, as
  // pipeline.partition; empty = uniform) instead of the deck's: the driver's
  // partition resolved from a named strategy.
  Trainer(const Deck& deck, const std::vector<int64_t>& partition, const ProcessGrid& grid,
          ComputeSetup setup = {});
  ~Trainer();
  StepRecord train_step(int64_t step);  // collective over comm
  // Mean loss over training.eval_batches held-out batches (forward only).
  double evaluate();                    // collective over comm
  // The data's best achievable loss, when known (Markov data).
  std::optional<LossFloor> loss_floor() const { return data_->loss_floor(); }
  // Every parameter in global order, on rank 0 of comm (empty elsewhere).
  std::vector<float> gather_parameters();

  const Schedule& schedule() const { return schedule_; }
  // The first step run with schedule() (0 unless pipeline.schedule_times =
  // "measured" placed it again), and the (stages) F, B, W seconds it was
  // placed at (empty before).
  int64_t schedule_first_step() const { return schedule_first_step_; }
  const StageActionTimes& placement_times() const { return placement_times_; }
  const ScheduleReport& schedule_report() const { return report_; }
  // This rank's first stage, and all of them (ascending).
  const StageModel& stage() const { return stages_.front(); }
  const std::vector<StageModel>& stages() const { return stages_; }
  // This rank's parameters, its stages in order (values and optimizer
  // state), for checkpoints.
  std::vector<Param*> params();
  // Optimizer updates applied (AdamW's bias-correction count) and the fp16
  // loss scaler (null unless training.precision = "fp16"), for checkpoints.
  Optimizer& optimizer() { return *optimizer_; }
  LossScaler* loss_scaler() { return scaler_.get(); }
  // Collective (output.trace): every rank's events on rank 0, on rank 0's clock.
  std::vector<std::vector<TraceEvent>> gather_trace();
  const ClockAlignment& clock_alignment() const { return clocks_; }
  // Every stage's recompute policy, on every rank (stage order).
  const std::vector<RecomputeChoice>& recompute_choices() const { return recompute_; }
  int rank() const { return rank_; }  // in the pipeline
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  // The data-parallel reduction (its buckets); inactive at D = 1 with "replica".
  const GradientReducer& reducer() const { return *reducer_; }

  // Dynamic rebalancing (docs/rebalance.md; one stage per rank). Decisions
  // scale the unit times of `profile` (the run's start-up profile) by each
  // stage's measured speed.
  void enable_rebalance(const ModelProfile& profile);
  bool rebalancing() const { return rebalancer_ != nullptr; }
  // Collective, after step `step`: a check when one is due (or the test hook
  // PIPETRAIN_TEST_REBALANCE asks for a move), and the move it decides.
  RebalanceCheck rebalance_after(int64_t step);
  // Collective: the stages hold `counts` units from now on. Each unit that
  // changes stage is sent by its old rank to its new one (values and
  // optimizer state); nothing else changes, so training continues bitwise
  // as it would have. Returns what moved.
  MoveReport repartition(const std::vector<int64_t>& counts, int64_t step);
  // Units per stage in use now.
  const std::vector<int64_t>& partition() const { return partition_; }

 private:
  // This rank's stages' policies; "auto" (one stage per rank) decided collectively.
  std::vector<RecomputePolicy> resolve_recompute();
  RecomputePolicy resolve_recompute_one();

  void move_state_to_device();
  void build_engine();  // reducer_ and executor_ over stages_, for this rank
  void fill_data_caches();
  MemoryStats stage_memory_stats() const;

  const Deck deck_;  // as given: never changed (the partition in use is partition_)
  MPI_Comm comm_;
  MPI_Comm replicas_comm_ = MPI_COMM_SELF;  // this rank's stages in every replica
  int replica_ = 0, replicas_ = 1;
  std::string replica_group_text_;
  ComputeSetup setup_;
  Backend& be_;
  std::unique_ptr<LossScaler> scaler_;  // fp16 only
  int rank_ = 0, size_ = 1;
  Schedule schedule_;
  ScheduleReport report_;
  Schedule eval_schedule_;  // forward-only version of schedule_
  std::vector<StageModel> stages_;  // this rank's, ascending
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<Dataset> eval_data_;  // null when training.eval_every = 0
  std::unique_ptr<Transport> transport_;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<Tracer> tracer_;
  ClockAlignment clocks_;
  std::unique_ptr<Executor> executor_;
  std::unique_ptr<ReplicaGroup> replica_group_;
  std::unique_ptr<StepCollectives> collectives_;  // loss, norm, bubble, gathers
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<RecomputeChoice> recompute_;
  std::vector<RecomputePolicy> policies_;    // of stages_
  std::vector<int64_t> partition_;           // units per stage in use
  std::unique_ptr<Rebalancer> rebalancer_;   // null unless enable_rebalance
  // pipeline.schedule_times = "measured", until the schedule is placed.
  std::unique_ptr<MeasuredPlacement> placement_;
  int64_t schedule_first_step_ = 0;
  StageActionTimes placement_times_;
  void place_schedule(int64_t step, StepRecord& rec);  // collective
};

}  // namespace pt
