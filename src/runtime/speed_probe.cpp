// speed_probe.cpp: the fixed matmul timed at chosen moments of a run
// (runtime/speed_probe.hpp).
#include "pipetrain/runtime/speed_probe.hpp"

#include <algorithm>
#include <chrono>

#include "profile_parts.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

namespace {

constexpr int64_t kProbeSize = 512;  // (512, 512) x (512, 512): 268 MFLOP

double time_one_matmul(Backend& be, const Tensor& a, const Tensor& b, Tensor& c) {
  const auto start = std::chrono::steady_clock::now();
  be.matmul(a, false, b, false, c, 1.0f, 0.0f);
  be.synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

double time_speed_probe(Backend& be, MPI_Comm comm, int reps) {
  timed_barrier(comm, "the barrier before the speed probe");
  DefaultDeviceGuard on_device(be.device());
  Tensor a = Tensor::empty({kProbeSize, kProbeSize});  // (512, 512)
  Tensor b = Tensor::empty({kProbeSize, kProbeSize});  // (512, 512)
  Tensor c = Tensor::empty({kProbeSize, kProbeSize});  // (512, 512)
  be.fill(a, 0.5f);
  be.fill(b, 0.25f);
  for (int r = 0; r < 2; ++r) time_one_matmul(be, a, b, c);
  std::vector<double> times;
  for (int r = 0; r < std::max(1, reps); ++r) times.push_back(time_one_matmul(be, a, b, c));
  const double mine = median(times);
  double slowest = mine;
  timed_allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm, "the speed probe's all-reduce");
  return slowest;
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
