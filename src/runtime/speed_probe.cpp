// speed_probe.cpp: the fixed matmul timed at chosen moments of a run
// (runtime/speed_probe.hpp).
#include "pipetrain/runtime/speed_probe.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>

#include "profile_parts.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

namespace {

constexpr int64_t kCpuProbeSize = 512;   // 268 MFLOP: milliseconds of a CPU core
constexpr int64_t kGpuProbeSize = 4096;  // 137 GFLOP: a fraction of a millisecond to
                                         // milliseconds of a GPU, by precision

// Median seconds of the matmul over `reps` regions of the backend's timer,
// after 2 untimed runs.
double median_matmul_seconds(Backend& be, const Tensor& a, const Tensor& b, Tensor& c, int reps) {
  for (int r = 0; r < 2; ++r) be.matmul(a, false, b, false, c, 1.0f, 0.0f);
  be.synchronize();
  std::unique_ptr<ComputeTimer> timer = be.make_timer();
  for (int r = 0; r < std::max(1, reps); ++r) {
    timer->begin();
    be.matmul(a, false, b, false, c, 1.0f, 0.0f);
    timer->end();
  }
  return median(timer->read());
}

}  // namespace

int64_t speed_probe_size(Device device) {
  return device == Device::CPU ? kCpuProbeSize : kGpuProbeSize;
}

double time_speed_probe(Backend& be, MPI_Comm comm, int reps) {
  be.synchronize();  // no earlier kernel of this rank runs into the probe
  timed_barrier(comm, "the barrier before the speed probe");
  const Device dev = be.device();
  const int64_t n = speed_probe_size(dev);
  Tensor a = Tensor::empty({n, n}, DType::F32, MemCategory::Workspace, dev);
  Tensor b = Tensor::empty({n, n}, DType::F32, MemCategory::Workspace, dev);
  Tensor c = Tensor::empty({n, n}, DType::F32, MemCategory::Workspace, dev);
  be.fill(a, 0.5f);
  be.fill(b, 0.25f);
  double mine = 0.0;
  if (be.device() == Device::CPU) {
    mine = median_matmul_seconds(be, a, b, c, reps);
  } else {
    // One rank at a time: ranks that share the GPU would time each other.
    int rank = 0, size = 1;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    for (int turn = 0; turn < size; ++turn) {
      if (turn == rank) mine = median_matmul_seconds(be, a, b, c, reps);
      timed_barrier(comm, "the speed probe's turns");
    }
  }
  double slowest = mine;
  timed_allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm, "the speed probe's all-reduce");
  return slowest;
}

std::string speed_probe_line(const std::vector<double>& t, const SpeedProbeSite& site) {
  PT_CHECK(t.size() >= 3, "three speed probes, not " + std::to_string(t.size()));
  const double spread = speed_probe_spread(t);
  const bool cpu = site.device == Device::CPU;
  const long long n = static_cast<long long>(speed_probe_size(site.device));
  char text[640];
  if (cpu)
    std::snprintf(text, sizeof text, "plan: speed probe (a %lld^3 matmul, slowest rank)", n);
  else
    std::snprintf(text, sizeof text,
                  "plan: speed probe (a %lld^3 matmul on the GPU, %s, timed by its events, one "
                  "rank at a time, slowest rank)", n, site.device_name.c_str());
  std::string line = text;
  std::snprintf(text, sizeof text, " %.3f ms before the profile, ", t[0] * 1e3);
  line += text;
  const size_t within = t.size() - 3;  // after the profile's passes
  for (size_t i = 1; i <= within; ++i) {
    std::snprintf(text, sizeof text, "%s%.3f", i > 1 ? ", " : "", t[i] * 1e3);
    line += text;
  }
  if (within > 0) line += " ms after its passes, ";
  std::snprintf(text, sizeof text, "%.3f ms after it, %.3f ms after the steps: spread %.1f%%",
                t[t.size() - 2] * 1e3, t[t.size() - 1] * 1e3, 100.0 * spread);
  line += text;
  if (spread <= kSteadyHostSpread) return line;
  std::snprintf(text, sizeof text, " (over %.0f%%: ", 100.0 * kSteadyHostSpread);
  line += text;
  if (cpu)
    return line + "the host's speed changed during the run, so part of the plan's error is "
                  "the host's)";
  line += "the GPU's speed changed during the run (its clocks, or another process on it), so "
          "part of the plan's error is the device's";
  if (site.shared)
    line += "; the run's ranks share this GPU but take turns in the probe, so time-slicing "
            "between their contexts is not in these figures";
  return line + ")";
}

double speed_probe_spread(const std::vector<double>& probe_seconds) {
  if (probe_seconds.size() < 2) return 0.0;
  const auto [low, high] = std::minmax_element(probe_seconds.begin(), probe_seconds.end());
  return *low > 0.0 ? *high / *low - 1.0 : 0.0;
}

double step_time_shift(const std::vector<double>& step_seconds) {
  if (step_seconds.size() < 4) return 0.0;
  const auto half = step_seconds.begin() + static_cast<std::ptrdiff_t>(step_seconds.size() / 2);
  const double first = median(std::vector<double>(step_seconds.begin(), half));
  const double second = median(std::vector<double>(half, step_seconds.end()));
  if (!(first > 0.0 && second > 0.0)) return 0.0;
  return std::max(first, second) / std::min(first, second) - 1.0;
}

}  // namespace pt
