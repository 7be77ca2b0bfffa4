// trace.cpp: clock alignment across ranks and gathering of trace events.
#include "pipetrain/runtime/trace.hpp"

#include <limits>

#include "pipetrain/base/error.hpp"

namespace pt {

namespace {
constexpr int kPingTag = 30001;
constexpr int kRounds = 16;
}  // namespace

Tracer::Tracer(bool enabled) : enabled_(enabled), origin_(std::chrono::steady_clock::now()) {
  if (enabled_) events_.reserve(1 << 16);
}

// Rank 0 sends its time t0, rank r answers with its own time tr, rank 0
// notes t1 on receipt: offset = tr - (t0 + t1) / 2 with error (t1 - t0) / 2.
// The round with the smallest round trip wins. The origins are first made
// common: every rank adopts rank 0's origin as closely as it can.
ClockAlignment Tracer::align_clocks(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  ClockAlignment clocks;
  clocks.offset_us.assign(size, 0.0);
  clocks.error_us.assign(size, 0.0);
  for (int peer = 1; peer < size; ++peer) {
    MPI_CHECK(MPI_Barrier(comm));
    if (rank == 0) {
      double best_rtt = std::numeric_limits<double>::infinity();
      for (int round = 0; round < kRounds; ++round) {
        double t0 = now_us(), tr = 0.0;
        MPI_CHECK(MPI_Send(&t0, 1, MPI_DOUBLE, peer, kPingTag, comm));
        MPI_CHECK(MPI_Recv(&tr, 1, MPI_DOUBLE, peer, kPingTag, comm, MPI_STATUS_IGNORE));
        double t1 = now_us();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          clocks.offset_us[peer] = tr - 0.5 * (t0 + t1);
          clocks.error_us[peer] = 0.5 * (t1 - t0);
        }
      }
    } else if (rank == peer) {
      for (int round = 0; round < kRounds; ++round) {
        double t0 = 0.0;
        MPI_CHECK(MPI_Recv(&t0, 1, MPI_DOUBLE, 0, kPingTag, comm, MPI_STATUS_IGNORE));
        double tr = now_us();
        MPI_CHECK(MPI_Send(&tr, 1, MPI_DOUBLE, 0, kPingTag, comm));
      }
    }
  }
  MPI_CHECK(MPI_Bcast(clocks.offset_us.data(), size, MPI_DOUBLE, 0, comm));
  MPI_CHECK(MPI_Bcast(clocks.error_us.data(), size, MPI_DOUBLE, 0, comm));
  return clocks;
}

std::vector<std::vector<TraceEvent>> Tracer::gather(MPI_Comm comm, const ClockAlignment& clocks) const {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  long long bytes = static_cast<long long>(events_.size() * sizeof(TraceEvent));
  std::vector<long long> all_bytes(size);
  MPI_CHECK(MPI_Gather(&bytes, 1, MPI_LONG_LONG, all_bytes.data(), 1, MPI_LONG_LONG, 0, comm));
  std::vector<std::vector<TraceEvent>> out;
  if (rank == 0) {
    out.resize(size);
    out[0] = events_;
    for (int r = 1; r < size; ++r) {
      out[r].resize(static_cast<size_t>(all_bytes[r]) / sizeof(TraceEvent));
      PT_CHECK(all_bytes[r] < (1ll << 31), "trace of rank " + std::to_string(r) + " over 2 GiB");
      MPI_CHECK(MPI_Recv(out[r].data(), static_cast<int>(all_bytes[r]), MPI_BYTE, r, kPingTag + 1, comm,
                         MPI_STATUS_IGNORE));
      for (TraceEvent& e : out[r]) {
        e.start_us -= clocks.offset_us[r];
        e.end_us -= clocks.offset_us[r];
      }
    }
  } else {
    PT_CHECK(bytes < (1ll << 31), "trace over 2 GiB");
    MPI_CHECK(MPI_Send(events_.data(), static_cast<int>(bytes), MPI_BYTE, 0, kPingTag + 1, comm));
  }
  return out;
}

}  // namespace pt
