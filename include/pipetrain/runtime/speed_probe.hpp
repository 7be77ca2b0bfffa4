// speed_probe.hpp: a fixed piece of work timed at chosen moments of a run, so
// that a prediction error can be told apart from a host whose speed changed
// between the profile and the steps (another process, a frequency change, a
// neighbour on a shared machine). The probe is one (512, 512) x (512, 512)
// matmul on the run's backend; its spread over the moments of a run is the
// host's unsteadiness, published beside the planner's error
// (docs/planner.md, "A noisy host").
#pragma once

#include <mpi.h>

#include <vector>

#include "pipetrain/tensor/backend.hpp"

namespace pt {

// Collective over comm: the median seconds of the probe matmul over
// `reps` timed repetitions (after 2 untimed), the slowest rank's.
double time_speed_probe(Backend& be, MPI_Comm comm, int reps = 9);

// A run whose probes spread more than this is on an unsteady host: part of
// its prediction's error is the host's.
constexpr double kSteadyHostSpread = 0.10;

// max / min - 1 of the probe times (0 with fewer than two, or a
// non-positive time).
double speed_probe_spread(const std::vector<double>& probe_seconds);

// The probes see the host only before the profile, after it and after the
// steps; a slow spell in between shows in the steps themselves. The median
// step time of the second half of `step_seconds` over that of the first
// half, less 1, as a magnitude (0 with fewer than 4 steps, or a non-positive
// median). Over kSteadyHostSpread the host's speed changed during the steps.
double step_time_shift(const std::vector<double>& step_seconds);

}  // namespace pt
