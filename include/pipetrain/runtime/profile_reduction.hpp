// profile_reduction.hpp: data-parallel gradient reductions timed as a run
// reduces them, for the planner's replica link.
//
// The planner models a stage's reduction across D replicas as exchanges over
// a link (replica_reduction_s, plan/alternatives.hpp). The pipeline's
// measured link (a ping-pong of one activation message) leaves out what a
// reduction also costs: packing the buckets, the collectives' own copies at
// megabyte sizes, the fold of the pieces, the unpacking, and every replica
// group of a node reducing at once. So for each D weighed, the ranks are
// split as a run of that grid splits them (ProcessGrid), every replica group
// builds its pipeline stage of the uniform partition, and the run's
// GradientReducer reduces that stage's gradients, and those of the stage's
// first unit alone, all groups at once; the link fitted to those times
// (fit_reduction_link) is the one the plans of that D use.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/plan/cost.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

// Collective over `world`: one MeasuredReduction per D in `replica_counts`
// (D > 1 dividing the ranks; a D whose pipelines would have more stages than
// the model has units is left out). Each time is the median of
// options.reps reductions after options.warmup untimed ones (at least one),
// in data_parallel.reduction = "replica" with the deck's bucket size; every
// rank returns the same figures. A replica that does not join within
// pipeline.timeout_s ends the job (TimeoutError naming the bucket).
std::vector<MeasuredReduction> time_replica_reductions(const Deck& deck, Backend& be, MPI_Comm world,
                                                       const std::vector<int>& replica_counts,
                                                       const ProfileOptions& options);

// "D = 2: 6.05 MiB in 4.69 ms, 0.03 MiB in 0.02 ms (fitted link 0.0 us,
// 1.36 GB/s)": a measured reduction in one line.
std::string describe_reduction(const MeasuredReduction& reduction);

// The replica counts D > 1 of the P x D grids of `ranks` ranks whose D also
// divides the batch (the grids pipeline.auto and `pipetrain plan` weigh).
std::vector<int> grid_replica_counts(int ranks, int64_t batch_size);

}  // namespace pt
