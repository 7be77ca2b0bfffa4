// trace.cpp: clock alignment across ranks, gathering of trace events, and
// the median action costs of a gathered trace (cost_bubble of trace.h5) and
// the replay of each traced step at its own action times (trace.h5's replay).
#include "pipetrain/runtime/trace.hpp"

#include <algorithm>
#include <array>
#include <limits>
#include <map>

#include "profile_parts.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {
constexpr int kPingTag = 30001;
constexpr int kMinRounds = 16;      // ping-pongs per peer at least,
constexpr int kMaxRounds = 512;     // and at most, while
constexpr double kGoodRtt_us = 100; // no round trip was this short yet (a loaded node)
constexpr double kStop = -1.0;      // rank 0's "no more rounds"

bool is_kind(const TraceEvent& e, EventKind kind) { return e.kind == static_cast<int32_t>(kind); }

// Microseconds of the waits (sorted by start) lying inside [start, end].
double nested_wait_us(const std::vector<TraceEvent>& waits, double start, double end) {
  auto it = std::lower_bound(waits.begin(), waits.end(), start,
                             [](const TraceEvent& w, double t) { return w.start_us < t; });
  double total = 0.0;
  for (; it != waits.end() && it->start_us < end; ++it)
    if (it->end_us <= end) total += it->end_us - it->start_us;
  return total;
}

// F, B, W: 0, 1, 2; -1 for every other kind.
int compute_slot(const TraceEvent& e) {
  return is_kind(e, EventKind::F) ? 0 : is_kind(e, EventKind::B) ? 1 : is_kind(e, EventKind::W) ? 2 : -1;
}

// A rank's waits, sorted by start (for nested_wait_us).
std::vector<TraceEvent> sorted_waits(const std::vector<TraceEvent>& events) {
  std::vector<TraceEvent> waits;
  for (const TraceEvent& e : events)
    if (is_kind(e, EventKind::Wait)) waits.push_back(e);
  std::sort(waits.begin(), waits.end(),
            [](const TraceEvent& a, const TraceEvent& b) { return a.start_us < b.start_us; });
  return waits;
}

// Seconds of a compute event less the waits nested in it.
double compute_seconds(const TraceEvent& e, const std::vector<TraceEvent>& waits) {
  return std::max(0.0, e.end_us - e.start_us - nested_wait_us(waits, e.start_us, e.end_us)) * 1e-6;
}

}  // namespace

std::vector<StepReplay> replay_traced_steps(const std::vector<std::vector<TraceEvent>>& events_per_rank,
                                            const Schedule& schedule, int64_t first_step) {
  if (schedule.num_stages < 1 || schedule.num_micro_batches < 1) return {};
  const size_t stages = static_cast<size_t>(schedule.num_stages);
  const size_t mbs = static_cast<size_t>(schedule.num_micro_batches);
  const size_t per_step = stages * mbs * 3;
  // seconds[step]: (stages, mbs, 3) as bubble_at_action_times takes them,
  // -1 where no event was traced.
  std::map<int64_t, std::vector<double>> seconds;
  for (const auto& events : events_per_rank) {
    const std::vector<TraceEvent> waits = sorted_waits(events);
    for (const TraceEvent& e : events) {
      const int slot = compute_slot(e);
      if (slot < 0 || e.step < first_step || e.stage < 0 || static_cast<size_t>(e.stage) >= stages ||
          e.mb < 0 || static_cast<size_t>(e.mb) >= mbs)
        continue;
      std::vector<double>& step = seconds[e.step];
      if (step.empty()) step.assign(per_step, -1.0);
      step[(static_cast<size_t>(e.stage) * mbs + static_cast<size_t>(e.mb)) * 3 + static_cast<size_t>(slot)] =
          compute_seconds(e, waits);
    }
  }
  size_t expected = 0;  // the schedule's F, B and W actions
  for (const auto& actions : schedule.ranks)
    for (const Action& a : actions)
      expected += a.kind == ActionKind::F || a.kind == ActionKind::B || a.kind == ActionKind::W;
  std::vector<StepReplay> out;
  for (auto& [step, times] : seconds) {
    const auto traced = static_cast<size_t>(std::count_if(times.begin(), times.end(),
                                                          [](double t) { return t >= 0.0; }));
    if (traced != expected) continue;
    for (double& t : times) t = std::max(t, 0.0);  // W of a fused backward: 0
    out.push_back({step, bubble_at_action_times(schedule, times)});
  }
  return out;
}

std::vector<ActionCost> median_action_costs(const std::vector<std::vector<TraceEvent>>& events_per_rank,
                                            int num_stages) {
  // The first traced step (the first of a resumed run, too) allocates.
  int64_t first = std::numeric_limits<int64_t>::max(), last = std::numeric_limits<int64_t>::min();
  for (const auto& events : events_per_rank)
    for (const TraceEvent& e : events)
      if (is_kind(e, EventKind::F)) {
        first = std::min(first, e.step);
        last = std::max(last, e.step);
      }
  const int64_t first_step = last > first ? first + 1 : first;
  // samples[stage][0..2]: F, B, W seconds
  std::vector<std::array<std::vector<double>, 3>> samples(static_cast<size_t>(num_stages));
  for (const auto& events : events_per_rank) {
    const std::vector<TraceEvent> waits = sorted_waits(events);
    for (const TraceEvent& e : events) {
      const int slot = compute_slot(e);
      if (slot < 0 || e.step < first_step || e.stage < 0 || e.stage >= num_stages) continue;
      samples[static_cast<size_t>(e.stage)][static_cast<size_t>(slot)].push_back(compute_seconds(e, waits));
    }
  }
  std::vector<ActionCost> costs;
  for (auto& stage : samples) {
    if (stage[0].empty() || stage[1].empty()) return {};
    costs.push_back({median(stage[0]), median(stage[1]), median(stage[2])});
  }
  return costs;
}

Tracer::Tracer(bool enabled) : enabled_(enabled), origin_(std::chrono::steady_clock::now()) {
  if (enabled_) events_.reserve(1 << 16);
}

// Rank 0 sends its time t0, rank r answers with its own time tr, rank 0
// notes t1 on receipt: offset = tr - (t0 + t1) / 2 with error (t1 - t0) / 2.
// The round with the smallest round trip wins; on a loaded node rank 0 keeps
// pinging (up to kMaxRounds) until one round trip is short, then sends kStop.
// The origins are first made common: every rank adopts rank 0's origin as
// closely as it can.
ClockAlignment Tracer::align_clocks(MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  ClockAlignment clocks;
  clocks.offset_us.assign(size, 0.0);
  clocks.error_us.assign(size, 0.0);
  for (int peer = 1; peer < size; ++peer) {
    timed_barrier(comm, "the clock-alignment barrier");
    if (rank == 0) {
      double best_rtt = std::numeric_limits<double>::infinity();
      for (int round = 0; round < kMaxRounds && (round < kMinRounds || best_rtt > kGoodRtt_us);
           ++round) {
        double t0 = now_us(), tr = 0.0;
        timed_send(&t0, 1, MPI_DOUBLE, peer, kPingTag, comm, "the clock-alignment ping");
        timed_recv(&tr, 1, MPI_DOUBLE, peer, kPingTag, comm, "the clock-alignment pong");
        double t1 = now_us();
        if (t1 - t0 < best_rtt) {
          best_rtt = t1 - t0;
          clocks.offset_us[peer] = tr - 0.5 * (t0 + t1);
          clocks.error_us[peer] = 0.5 * (t1 - t0);
        }
      }
      double stop = kStop;
      timed_send(&stop, 1, MPI_DOUBLE, peer, kPingTag, comm, "the clock-alignment end");
    } else if (rank == peer) {
      for (;;) {
        double t0 = 0.0;
        timed_recv(&t0, 1, MPI_DOUBLE, 0, kPingTag, comm, "the clock-alignment ping");
        if (t0 == kStop) break;
        double tr = now_us();
        timed_send(&tr, 1, MPI_DOUBLE, 0, kPingTag, comm, "the clock-alignment pong");
      }
    }
  }
  timed_bcast(clocks.offset_us.data(), size, MPI_DOUBLE, 0, comm, "the clock offsets broadcast");
  timed_bcast(clocks.error_us.data(), size, MPI_DOUBLE, 0, comm, "the clock errors broadcast");
  return clocks;
}

void Tracer::add_earlier(const std::vector<TraceEvent>& earlier,
                         std::chrono::steady_clock::time_point origin) {
  if (!enabled_ || earlier.empty()) return;
  const double shift_us = std::chrono::duration<double, std::micro>(origin - origin_).count();
  std::vector<TraceEvent> all;
  all.reserve(earlier.size() + events_.size());
  for (TraceEvent e : earlier) {
    e.start_us += shift_us;
    e.end_us += shift_us;
    all.push_back(e);
  }
  all.insert(all.end(), events_.begin(), events_.end());
  events_.swap(all);
}

std::vector<std::vector<TraceEvent>> Tracer::gather(MPI_Comm comm, const ClockAlignment& clocks) const {
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  long long bytes = static_cast<long long>(events_.size() * sizeof(TraceEvent));
  std::vector<long long> all_bytes(size);
  timed_gather(&bytes, 1, MPI_LONG_LONG, all_bytes.data(), 0, comm, "the trace sizes gather");
  std::vector<std::vector<TraceEvent>> out;
  if (rank == 0) {
    out.resize(size);
    out[0] = events_;
    for (int r = 1; r < size; ++r) {
      out[r].resize(static_cast<size_t>(all_bytes[r]) / sizeof(TraceEvent));
      PT_CHECK(all_bytes[r] < (1ll << 31), "trace of rank " + std::to_string(r) + " over 2 GiB");
      timed_recv(out[r].data(), static_cast<int>(all_bytes[r]), MPI_BYTE, r, kPingTag + 1, comm,
                 "the trace events");
      for (TraceEvent& e : out[r]) {
        e.start_us -= clocks.offset_us[r];
        e.end_us -= clocks.offset_us[r];
      }
    }
  } else {
    PT_CHECK(bytes < (1ll << 31), "trace over 2 GiB");
    timed_send(events_.data(), static_cast<int>(bytes), MPI_BYTE, 0, kPingTag + 1, comm,
               "the trace events");
  }
  return out;
}

}  // namespace pt
