// speed_probe.hpp: a fixed piece of work timed at chosen moments of a run, so
// that a prediction error can be told apart from a host whose speed changed
// between the profile and the steps (another process, a frequency change, a
// neighbour on a shared machine). The probe is one square matmul on the run's
// backend, timed by the backend's ComputeTimer: (512, 512) x (512, 512) on the
// CPU, where every rank times it at once, as the ranks load the host during
// the steps; (4096, 4096) x (4096, 4096) on a GPU, one rank at a time, so
// that it measures the device's kernels rather than launch overhead (512^3 is
// a few microseconds of an H100) or the time-slicing between ranks that share
// a GPU. Its spread over the moments of a run is the machine's unsteadiness,
// published beside the planner's error (docs/planner.md, "A noisy host").
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "pipetrain/tensor/backend.hpp"

namespace pt {

// The probe's matrix size on a device: 512 on the CPU, 4096 on a GPU.
int64_t speed_probe_size(Device device);

// Collective over comm: the median seconds of the probe matmul over
// `reps` timed repetitions (after 2 untimed), the slowest rank's.
double time_speed_probe(Backend& be, MPI_Comm comm, int reps = 9);

// What was probed, for the log line.
struct SpeedProbeSite {
  Device device = Device::CPU;
  std::string device_name;  // a GPU's name ("NVIDIA H100 80GB HBM3"); unused on the CPU
  bool shared = false;      // ranks of the run share a GPU
};

// The log line of the probes before the profile, after each of its passes
// (none or more), after it and after the steps (times in seconds, in that
// order: at least three), with the spread, and over kSteadyHostSpread what
// can explain it on that device. No newline.
std::string speed_probe_line(const std::vector<double>& probe_seconds, const SpeedProbeSite& site);

// A run whose probes spread more than this is on an unsteady host: part of
// its prediction's error is the host's.
constexpr double kSteadyHostSpread = 0.10;

// max / min - 1 of the probe times (0 with fewer than two, or a
// non-positive time).
double speed_probe_spread(const std::vector<double>& probe_seconds);

// The probes see the host only around and inside the profile and after the
// steps; a slow spell during the steps shows in the steps themselves. The median
// step time of the second half of `step_seconds` over that of the first
// half, less 1, as a magnitude (0 with fewer than 4 steps, or a non-positive
// median). Over kSteadyHostSpread the host's speed changed during the steps.
double step_time_shift(const std::vector<double>& step_seconds);

}  // namespace pt
