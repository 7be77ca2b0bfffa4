// run_builder.hpp: what one rank's part of a training run is made of
// (RunParts) and the one factory that builds it, build_run.
//
// The factory reads the deck once into RunSettings, an immutable value
// resolved for this rank, and builds every part from it in one fixed order:
// the schedule (generated or loaded, then validated, with its forward-only
// twin), this rank's stages of the partition, the data sets, the transport,
// the optimizer and loss scaler, the tracer, each stage's recomputation
// policy (recompute_choice.hpp), the replica group and, last, the engine
// (executor and gradient reducer). The engine has its own factory,
// build_engine, which a rebalancing move (repartition_run) calls again over
// the new stage, so a rebuild reads the same settings and forgets nothing.
// The step that runs these parts is training_step.hpp; Trainer
// (trainer.hpp) is the facade over both.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/model/loss_scaler.hpp"
#include "pipetrain/model/optimizer.hpp"
#include "pipetrain/runtime/executor.hpp"
#include "pipetrain/runtime/grad_reducer.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "pipetrain/runtime/rebalance.hpp"
#include "pipetrain/runtime/recompute_choice.hpp"
#include "pipetrain/runtime/replica_group.hpp"
#include "pipetrain/runtime/schedule_placement.hpp"
#include "pipetrain/runtime/step_collectives.hpp"
#include "pipetrain/runtime/trace.hpp"
#include "pipetrain/runtime/transport.hpp"

namespace pt {

// What the schedule is made of: [pipeline]'s schedule keys.
struct ScheduleSettings {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  std::string file;             // with kind File
  int64_t micro_batches = 1;    // N
  int64_t virtual_stages = 1;   // stages per rank
  WeightGradKind weight_grad = WeightGradKind::MicroBatch;
};
ScheduleSettings schedule_settings_for(const Deck& deck);
// The schedule on `ranks` ranks: generated, or read from its file; ranks x
// virtual_stages stages.
Schedule make_schedule(const ScheduleSettings& settings, int ranks);
// make_schedule(schedule_settings_for(deck), ranks).
Schedule schedule_for_deck(const Deck& deck, int ranks);

// Where a rank computes, and what it reads. The defaults are the CPU backend
// and MPI; the driver fills in the CUDA backend, a GPU transport and device
// memory statistics when training.device = "cuda" (the runtime itself has no
// CUDA dependency), and always io's make_dataset as open_dataset (the
// runtime reads no files itself).
struct ComputeSetup {
  // Opens the run's data sets; null: generated data only (model/data.hpp
  // open_dataset; a file data.type is then an internal error).
  DatasetOpener open_dataset;
  Backend* backend = nullptr;  // null: cpu_backend()
  std::function<std::unique_ptr<Transport>(MPI_Comm)> make_transport;  // null: MPI
  // The data-parallel replica group of this rank's stages; null: MPI.
  std::function<std::unique_ptr<ReplicaGroup>(MPI_Comm)> make_replica_group;
  std::function<MemoryStats()> device_memory_stats;  // null: host statistics
  std::function<void()> reset_device_memory_peaks;
};
// The memory statistics of `setup`'s device (the host's when it has none).
MemoryStats stage_memory_stats(const ComputeSetup& setup);

// Where this rank sits in the P x D grid.
struct RankPlace {
  MPI_Comm pipeline = MPI_COMM_NULL;  // the schedule's ranks (stages / stages per rank)
  MPI_Comm replicas = MPI_COMM_SELF;  // this rank's stages in every replica
  int rank = 0, ranks = 1;            // in the pipeline
  int replica = 0, replica_count = 1;
  std::string replica_group_text;     // "world ranks 1, 3", for messages
};
RankPlace rank_place_of(const ProcessGrid& grid);

// What a run reads of the deck, resolved for this rank at the start and
// never changed: every part of RunParts is built from it.
struct RunSettings {
  ModelConfig model;
  ScheduleSettings schedule;
  TrainingConfig training;   // steps, batch, learning rate, clipping, evaluation, precision
  DataSetConfig data;        // what the data sets read
  ExecutorConfig executor;   // this rank's (replica, slowdown); build_engine adds
                             // loss scaling and the reduction hooks
  ReductionConfig reduction;
  RecomputeSettings recompute;
  CommSemantics semantics;   // the transport's message semantics
  bool trace = false;        // output.trace
  bool measured_placement = false;  // places_at_measured_times(deck)
  int64_t replica_check_every = 0;  // data_parallel.check_every (replica_check.hpp)
  int64_t checkpoint_every = 0;     // output.checkpoint_every: the replica check precedes each save
};
// The deck read once, for the rank at `place` (its slowdown); checks that
// the deck's data_parallel.replicas is the grid's.
RunSettings run_settings_for(const Deck& deck, const RankPlace& place);

// The schedules a run uses, replaced together when they are placed again
// at measured times (schedule_placement.hpp).
struct RunSchedules {
  Schedule train;
  ScheduleReport report;       // of train
  Schedule eval;               // forward-only twin of train
  int64_t first_step = 0;      // the first step run with train
  StageActionTimes placed_at;  // (stages) F, B, W seconds train was placed at; empty before
};

// What runs the schedule: the gradient reducer over this rank's stages and
// the executor hooked into it. Both hold the stages' layers.
struct Engine {
  std::unique_ptr<GradientReducer> reducer;  // inactive at D = 1 with "replica"
  std::unique_ptr<Executor> executor;
};

// One rank's part of a run. Built in place by build_run and never moved:
// the collectives read schedules.train, the engine the stages.
struct RunParts {
  RunParts(RunSettings settings, RankPlace place, ComputeSetup setup);
  RunParts(const RunParts&) = delete;
  RunParts& operator=(const RunParts&) = delete;

  // This rank's parameters, its stages in order.
  std::vector<Param*> params();

  const RunSettings settings;
  const RankPlace place;
  const ComputeSetup setup;
  Backend& backend;  // setup.backend, or cpu_backend()
  RunSchedules schedules;
  std::vector<int64_t> partition;  // (stages) units per stage in use
  std::vector<StageModel> stages;  // this rank's, ascending
  std::unique_ptr<Dataset> data;
  std::unique_ptr<Dataset> eval_data;  // null when training.eval_every = 0
  std::unique_ptr<Transport> transport;
  std::unique_ptr<Optimizer> optimizer;
  std::unique_ptr<LossScaler> scaler;  // fp16 only
  std::unique_ptr<Tracer> tracer;
  ClockAlignment clocks;
  RecomputeDecision recompute;  // this rank's policies, every stage's choice
  std::unique_ptr<ReplicaGroup> replica_group;
  std::unique_ptr<StepCollectives> collectives;  // loss, norm, bubble, gathers
  // pipeline.schedule_times = "measured", until the schedule is placed.
  std::unique_ptr<MeasuredPlacement> placement;
  Engine engine;  // last: released before the stages it holds
};

// The one factory of a run, from its settings alone (no deck): collective
// over the place's pipeline (clock alignment, "auto" recomputation).
// `partition`: units per stage, as pipeline.partition (empty = uniform).
std::unique_ptr<RunParts> build_run(RunSettings settings, RankPlace place,
                                    const std::vector<int64_t>& partition, ComputeSetup setup);

// The one factory of what runs the schedule, over run.stages with
// run.recompute's policies; at the start and after every rebalancing move.
Engine build_engine(RunParts& run);

// Where "auto" recomputation measures on this rank (one stage per rank).
RecomputeProbeSite probe_site_of(RunParts& run);

// With training.weight_copies (bf16, fp16): a low-precision copy of every
// GEMM weight of this rank's stages that has none (model/weight_copies.hpp),
// where parameters come into being: the build, after moving them to the
// device, and a rebalancing move, for the units that arrived. Made there,
// not at the first pass, so every memory figure counts them from the start.
// Also sets every layer's activation copies as training.activation_copies
// says (model/activation_copies.hpp; the layers of arriving units too).
void make_run_gemm_copies(RunParts& run);

// Collective (repartition.cpp): the stages hold `counts` units from now on.
// Each unit that changes stage is sent by its old rank to its new one
// (values and optimizer state); "auto" recomputation is decided again and
// the engine rebuilt. Returns what moved.
MoveReport repartition_run(RunParts& run, const std::vector<int64_t>& counts, int64_t step);

}  // namespace pt
