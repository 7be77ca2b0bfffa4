// profile_link.cpp: the profiler's communication figures: the link between
// ranks 0 and 1 by ping-pong through the run's transport, and the trainer's
// per-step collectives. Every wait is bounded by pipeline.timeout_s.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "profile_parts.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kPingTag = 0;
constexpr double kSmallMessageBytes = 8.0;

std::string format_number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", value);
  return buf;
}

// Completes `transfer` within the wait limit or throws TimeoutError.
void await(std::unique_ptr<PendingTransfer> transfer, double limit_s, const std::string& what) {
  if (poll_until([&] { return transfer->test(); }, limit_s)) return;
  const std::string phase = wait_phase().empty() ? "" : " " + wait_phase();
  throw TimeoutError("timed out after " + format_number(limit_s) + " s" + phase +
                     " waiting for " + what + "; see pipeline.timeout_s");
}

// Rank 0 sends `buf` to rank 1 and gets it back; the round trip in seconds.
double round_trip(Transport& t, Tensor& buf, double limit_s) {
  const std::string size = format_number(static_cast<double>(buf.bytes())) + " bytes";
  const auto start = Clock::now();
  if (t.rank() == 0) {
    await(t.isend(buf, 1, kPingTag), limit_s, "the link ping-pong's send to rank 1 (" + size + ")");
    await(t.irecv(buf, 1, kPingTag), limit_s, "the link ping-pong's reply from rank 1 (" + size + ")");
  } else {
    await(t.irecv(buf, 0, kPingTag), limit_s, "the link ping-pong's message from rank 0 (" + size + ")");
    await(t.isend(buf, 0, kPingTag), limit_s, "the link ping-pong's reply to rank 0 (" + size + ")");
  }
  return seconds_since(start);
}

// Half the median round trip of a `bytes` message between ranks 0 and 1.
double one_way_seconds(Transport& t, Backend& be, double bytes, double limit_s,
                       const ProfileOptions& o) {
  const int64_t floats = std::max<int64_t>(1, static_cast<int64_t>((bytes + 3.0) / 4.0));
  Tensor buf = Tensor::zeros({floats}, DType::F32, MemCategory::Workspace, be.device());
  be.synchronize();
  const int warmup = 3 + o.warmup, rounds = std::max(11, 5 * o.reps);
  std::vector<double> times;
  for (int r = 0; r < warmup + rounds; ++r) {
    const double rtt = round_trip(t, buf, limit_s);
    if (r >= warmup) times.push_back(0.5 * rtt);
  }
  return median(times);
}

// time(bytes) = latency + bytes / bandwidth through the two measured points;
// no bandwidth term when the larger message was not slower.
LinkCost fit_link(double small_bytes, double small_s, double large_bytes, double large_s) {
  LinkCost link;
  link.latency_s = small_s;
  if (large_bytes > small_bytes && large_s > small_s) {
    link.bandwidth_bytes_per_s = (large_bytes - small_bytes) / (large_s - small_s);
    link.latency_s = std::max(0.0, small_s - small_bytes / link.bandwidth_bytes_per_s);
  }
  return link;
}

}  // namespace

LinkCost measure_link(MPI_Comm comm, double timeout_s, Backend& be, double message_bytes,
                      const ProfileOptions& options) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  if (size < 2) return LinkCost();
  std::unique_ptr<Transport> transport =
      options.make_transport ? options.make_transport(comm) : make_mpi_transport(comm);
  double figures[2] = {0.0, 0.0};
  timed_barrier(comm, "the profiler's barrier before the link ping-pong");
  if (rank < 2) {
    const double limit_s = timeout_s;
    const double small_s = one_way_seconds(*transport, be, kSmallMessageBytes, limit_s, options);
    const double large_s = one_way_seconds(*transport, be, message_bytes, limit_s, options);
    const LinkCost link = fit_link(kSmallMessageBytes, small_s, message_bytes, large_s);
    figures[0] = link.latency_s;
    figures[1] = link.bandwidth_bytes_per_s;
  }
  timed_bcast(figures, 2, MPI_DOUBLE, 0, comm, "the link figures broadcast from rank 0");
  LinkCost link;
  link.latency_s = figures[0];
  link.bandwidth_bytes_per_s = figures[1];
  return link;
}

double step_collectives_seconds(MPI_Comm comm, int64_t param_tensors,
                                const ProfileOptions& options) {
  int size = 1;
  MPI_CHECK(MPI_Comm_size(comm, &size));
  const int per_rank = static_cast<int>(std::max<int64_t>(1, (param_tensors + size - 1) / size));
  const int peaks = static_cast<int>(MemCategory::Count) + 1;
  std::vector<double> sums(per_rank, 0.0), all_sums(static_cast<size_t>(per_rank) * size);
  std::vector<double> mine(peaks, 0.0), gathered(static_cast<size_t>(peaks) * size);
  std::vector<int> counts(size);
  std::vector<double> times;
  for (int r = 0; r < options.warmup + options.reps; ++r) {
    timed_barrier(comm, "the profiler's barrier before the step collectives");
    const auto start = Clock::now();
    double loss = 0.0, bubble[2] = {0.0, 0.0};
    std::vector<double> bubbles(2 * static_cast<size_t>(size));
    timed_bcast(&loss, 1, MPI_DOUBLE, size - 1, comm, "the profiler's loss broadcast");
    timed_allgather(&per_rank, 1, MPI_INT, counts.data(), comm, "the profiler's gradient-norm counts");
    timed_allgather(sums.data(), per_rank, MPI_DOUBLE, all_sums.data(), comm,
                    "the profiler's gradient-norm all-gather");
    timed_allgather(bubble, 2, MPI_DOUBLE, bubbles.data(), comm, "the profiler's bubble all-gather");
    timed_gather(mine.data(), peaks, MPI_DOUBLE, gathered.data(), 0, comm,
                 "the profiler's memory-peaks gather");
    if (r >= options.warmup) times.push_back(seconds_since(start));
  }
  double mine_s = median(times), slowest_s = 0.0;
  timed_allreduce(&mine_s, &slowest_s, 1, MPI_DOUBLE, MPI_MAX, comm,
                  "the profiler's step-collectives maximum");
  return slowest_s;
}

}  // namespace pt
