// profile_parts.hpp: what the profiler's translation units share (private
// to src/runtime: profiler.cpp, profile_chain.cpp, profile_link.cpp,
// profile_reduction.cpp, profile_trace.cpp, speed_probe.cpp).
#pragma once

#include <mpi.h>

#include <chrono>
#include <vector>

#include "pipetrain/runtime/profiler.hpp"

namespace pt {

// The median (mean of the middle two for an even count); 0 when empty.
double median(std::vector<double> values);

// Seconds on the steady clock since `start`.
double seconds_since(std::chrono::steady_clock::time_point start);

// Collective over comm: the link between ranks 0 and 1, by ping-pong through
// the run's transport of a small message and of `message_bytes` (the
// activation message of a micro-batch); every rank returns rank 0's figures.
// A zero link on one rank; a wait longer than `timeout_s` throws.
LinkCost measure_link(MPI_Comm comm, double timeout_s, Backend& be, double message_bytes,
                      const ProfileOptions& options);

// Collective over comm: the median time of the trainer's per-step
// collectives (loss broadcast, gradient-norm all-gathers over `param_tensors`
// sums in all, bubble all-gather, memory-peak gather); the slowest rank's.
double step_collectives_seconds(MPI_Comm comm, int64_t param_tensors,
                                const ProfileOptions& options);

// The element-wise lower median over the ranks of comm (of an even count,
// the smaller middle value): a rank that another process slowed down for a
// whole unit does not shift it (with 2 ranks it is the faster rank's).
std::vector<double> median_over_ranks(const std::vector<double>& mine, MPI_Comm comm);

}  // namespace pt
