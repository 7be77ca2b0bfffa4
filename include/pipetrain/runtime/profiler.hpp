// profiler.hpp: measuring a model's cost profile (plan/cost.hpp) on the
// configured backend, or deriving one from an earlier run's trace.
//
// profile_model builds every cost unit of the deck's model as a stage of its
// own (model.hpp build_cost_unit_stage) and runs micro-batches through it
// with the executor's own code (Executor::probe_micro_batch), so times and
// bytes are what a run of that unit would see: bytes from the same allocator
// statistics as the run's memory peaks, times as the median of repetitions
// after warm-up, with the backend synchronised. On >= 2 ranks, ranks 0 and 1
// also measure their link by ping-pong through the run's transport. The
// meaning of every figure, and how a stage's figures follow from its units',
// is in docs/profile.md.
#pragma once

#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/plan/cost.hpp"
#include "pipetrain/runtime/executor_config.hpp"
#include "pipetrain/runtime/replica_group.hpp"
#include "pipetrain/runtime/trace.hpp"
#include "pipetrain/runtime/transport.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

struct ProfileOptions {
  int warmup = 2;  // untimed repetitions of each measurement first
  int reps = 7;    // timed repetitions; each time is their median
  // Memory statistics of the backend's device; null: host statistics.
  std::function<MemoryStats()> memory_stats;
  std::function<void()> reset_memory_peaks;
  // The transport the link is measured through (e.g. NCCL on GPUs); null: MPI.
  std::function<std::unique_ptr<Transport>(MPI_Comm)> make_transport;
  // The replica group data-parallel reductions are timed through (NCCL on
  // GPUs, profile_reduction.hpp); null: MPI.
  std::function<std::unique_ptr<ReplicaGroup>(MPI_Comm)> make_replica_group;
  // Opens the deck's training data (io's make_dataset, from the
  // application); null: generated data only (model/data.hpp open_dataset).
  DatasetOpener open_dataset;
  std::string kernels;  // GEMM library and kernels; "" = this process's BLAS
  // Correct the unit times by whole stages run as the executor runs them
  // (calibrate_with_stage_chains); off only to test the calibration itself.
  bool stage_chains = true;
  // The stage chains also time a step's split backward as a run with
  // pipeline.weight_grad = "step" computes it (UnitCost::step_input_s,
  // step_weight_s): set where "step" may run or be weighed.
  bool step_weight_grads = false;
  // Called on every rank after each pass through the units and through the
  // stage chains (a collective: the run's speed probe, so that a slow spell of
  // the host inside the profile shows); null: nothing.
  std::function<void()> after_pass;

  // The short pass run before training (1 warm-up, 3 repetitions).
  static ProfileOptions brief();
};

// Samples per micro-batch: training.batch_size / (pipeline.micro_batches x
// data_parallel.replicas).
int64_t micro_batch_rows(const Deck& deck);
// What a profile holds for, in one line: the model, the optimizer (its
// state bytes), the GEMM precision (its times) and, for data kept in memory,
// its size, e.g.
//   "mlp input_dim=16 hidden_dim=32 output_dim=4 depth=8 activation=gelu loss=mse; adamw; fp32;
//    synthetic data samples=256"
std::string profile_model_description(const Deck& deck);

// Collective over `comm`: every rank measures every unit at once (as the
// stages of a run compute at once) and each time is the lower median over
// ranks (robust to a rank another process slowed down);
// ranks 0 and 1 measure the link; every rank returns the same profile.
ModelProfile profile_model(const Deck& deck, Backend& be, MPI_Comm comm,
                           const ProfileOptions& options = {});
// The same at another split of the batch than the deck's (plan weighs
// several micro-batch counts).
ModelProfile profile_model(const Deck& deck, const BatchSplit& split, Backend& be, MPI_Comm comm,
                           const ProfileOptions& options = {});

// pipeline.weight_grad = "step": `profile` with every unit's backward_s
// measured again at a whole replica batch's rows (the rows of the pass of
// weight gradients), the units alone under policy none in `profile`'s cache
// state, and its recompute times 0. Collective over comm. The planner takes
// W's share of it as the pass's time (deck_plan.hpp, step_weight_seconds).
ModelProfile profile_weight_pass(const Deck& deck, Backend& be, MPI_Comm comm,
                                 const ModelProfile& profile, const ProfileOptions& options);

// The stage-chain calibration (runtime/profile_chain.cpp, docs/profile.md
// "Stage chains"): units measured alone miss what the units of one stage do
// to each other (caches, buffers, prefetch). Every stage of the uniform
// partition over the ranks of comm is built whole and runs micro-batches F
// then B, nothing evicted in between, as the executor runs them, its
// repetitions spread over up to 3 passes through the stages (a burst of load
// spoils a pass, not a chain); each time is the lower median over the ranks. The units of each stage are then scaled
// so that the planner's sums (UnitRanges::cost) equal the measured stage:
// forward_s by the F ratio, backward_s and recompute_selective_s by the B
// ratio, recompute_s and recompute_end_s by the recompute ratio (full).
// With options.step_weight_grads each chain also runs the profile's
// micro-batches as a step with per-step weight gradients
// (StageProbe::probe_step_split) and every unit of the stage gets
// step_input_s and step_weight_s in the stage's measured proportion to its
// fused backward: backward_s x step_input / backward (per micro-batch).
struct ChainCalibration {
  std::vector<int64_t> units_per_stage;  // (stages) partitionable units of each chain
  std::vector<double> forward_s, backward_s, recompute_s;  // (stages) measured
  // (stages) per micro-batch of a step with per-step weight gradients: its B
  // and its share of the pass; empty unless options.step_weight_grads.
  std::vector<double> step_input_s, step_weight_s;
  std::vector<double> optimizer_s;  // (stages) the stage's optimizer update, measured
  // (stages) what the micro-batches after an update take beyond as many of
  // the chain's F + B pairs (>= 0): the caches refilled after the update.
  // The units' optimizer_s carry it, once a step.
  std::vector<double> refill_s;
  int refill_micro_batches = 0;  // micro-batches timed after each update
  std::vector<double> forward_ratio, backward_ratio, recompute_ratio, optimizer_ratio;  // (stages)
  std::vector<int> repetitions;  // (stages) timed repetitions of each chain, all passes
  int passes = 0;                // passes through the stages
  std::string text;  // ModelProfile::calibration
};
// Collective over comm; profile_model calls it unless options.stage_chains
// is false.
ChainCalibration calibrate_with_stage_chains(ModelProfile& p, const Deck& deck, const BatchSplit& split,
                                             Backend& be, MPI_Comm comm, const ProfileOptions& options);
// At the deck's own split.
inline ChainCalibration calibrate_with_stage_chains(ModelProfile& p, const Deck& deck, Backend& be,
                                                    MPI_Comm comm, const ProfileOptions& options) {
  return calibrate_with_stage_chains(p, deck, batch_split_of(deck), be, comm, options);
}

// A profile without times: the byte figures and FLOPs of every unit, from
// one micro-batch per recompute policy (bytes do not vary between runs), and
// the training data's bytes (host statistics only: 0 when options give
// device statistics, whose peaks do not count host memory).
ModelProfile profile_memory(const Deck& deck, Backend& be, const ProfileOptions& options = {});

// A profile from a traced run of `deck` (the trace's own deck): each
// stage's median F, B and recompute times (waits for peers taken out) are
// split over its units in proportion to their forward FLOPs, its optimizer
// time in proportion to their parameter bytes; bytes are measured as by
// profile_memory. Approximations in docs/profile.md. Throws InputError
// naming trace.source when the trace lacks what is needed.
ModelProfile profile_from_trace(const Deck& deck, const RunTrace& trace, Backend& be,
                                const ProfileOptions& options = {});

}  // namespace pt
