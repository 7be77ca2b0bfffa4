// timed_wait.cpp: timed MPI collectives and exchanges, the arrival board that
// names the ranks a collective waits for, the watchdog thread behind
// DeadlineScope, and the test-only stall points (see timed_wait.hpp).
#include "pipetrain/base/timed_wait.hpp"

#include <sched.h>
#include <sys/prctl.h>

#include <array>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/mpi_cancel.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

double g_limit_s = 120.0;
WaitMode g_wait_mode = WaitMode::Yield;
constexpr double kSleepAfter_s = 50e-6;  // sleep mode: yield this long first
constexpr int kSleepFor_us = 20;         // then sleep this long between polls
std::mutex g_phase_mutex;
std::string g_phase;  // "" until the driver sets one

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

// "in step 812 " (with the space), or "" outside any phase.
std::string phase_text() {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  return g_phase.empty() ? "" : g_phase + " ";
}


// ---- the arrival board --------------------------------------------------

constexpr int kArrivalTag = 7;
constexpr size_t kSendSlots = 64;

// Counts the collectives over the whole world each rank has entered; world
// rank 0 learns the others' counts from one eager message per collective.
class ArrivalBoard {
 public:
  bool active() const { return comm_ != MPI_COMM_NULL; }

  void start(MPI_Comm world) {
    comm_ = timed_comm_dup(world, "the start-up communicator duplication");  // board not active yet
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    entered_ = 0;
    if (rank_ == 0) {
      last_.assign(size_, 0);
      inbox_.assign(size_, 0);
      recv_.assign(size_, MPI_REQUEST_NULL);
      for (int r = 1; r < size_; ++r) post(r);
    }
  }

  // Called when this rank enters a collective over `comm`.
  void enter(MPI_Comm comm) {
    if (!active() || !spans_world(comm)) return;
    ++entered_;
    if (rank_ == 0) drain();
    else announce();
  }

  // Rank 0, after entering a world collective: the ranks that have not.
  std::vector<int> missing(MPI_Comm comm) {
    std::vector<int> out;
    if (!active() || rank_ != 0 || !spans_world(comm)) return out;
    drain();
    for (int r = 1; r < size_; ++r)
      if (last_[r] < entered_) out.push_back(r);
    return out;
  }

  bool knows_missing(MPI_Comm comm) const { return active() && rank_ == 0 && spans_world(comm); }

  void stop() {
    if (!active()) return;
    if (rank_ == 0) {
      for (int r = 1; r < size_; ++r) {
        if (recv_[r] == MPI_REQUEST_NULL) continue;
        // A receive rank r never matched: withdrawn, for a bounded time.
        cancel_request(recv_[r], 1.0);
      }
    } else {
      for (Slot& s : slots_) {
        if (s.req == MPI_REQUEST_NULL) continue;
        // Eager messages complete at once; a send rank 0 never matched
        // (it cancelled its receives) is cancelled here.
        poll_until([&] { return test(s.req); }, 1.0);
        if (s.req != MPI_REQUEST_NULL) {
          MPI_Cancel(&s.req);
          MPI_Request_free(&s.req);
        }
      }
    }
    MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

 private:
  struct Slot {
    long long value = 0;
    MPI_Request req = MPI_REQUEST_NULL;
  };

  static bool test(MPI_Request& req) {
    int done = 0;
    MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
    return done != 0;
  }

  static bool spans_world(MPI_Comm comm) {
    int result = MPI_UNEQUAL;
    MPI_Comm_compare(comm, MPI_COMM_WORLD, &result);
    return result == MPI_IDENT || result == MPI_CONGRUENT;
  }

  void post(int r) {
    MPI_CHECK(MPI_Irecv(&inbox_[r], 1, MPI_LONG_LONG, r, kArrivalTag, comm_, &recv_[r]));
  }

  void drain() {
    for (int r = 1; r < size_; ++r) {
      while (test(recv_[r])) {
        last_[r] = inbox_[r];
        post(r);
      }
    }
  }

  // A slot still in flight means rank 0 stopped reading: the announcement is
  // dropped rather than blocking (rank 0 then reports this rank late).
  void announce() {
    Slot& s = slots_[next_slot_++ % kSendSlots];
    if (s.req != MPI_REQUEST_NULL && !test(s.req)) return;
    s.value = entered_;
    MPI_CHECK(MPI_Isend(&s.value, 1, MPI_LONG_LONG, 0, kArrivalTag, comm_, &s.req));
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  long long entered_ = 0;
  std::vector<long long> last_, inbox_;  // rank 0: per rank
  std::vector<MPI_Request> recv_;        // rank 0: per rank
  std::array<Slot, kSendSlots> slots_;   // other ranks
  size_t next_slot_ = 0;
};

ArrivalBoard& board() {
  static ArrivalBoard* instance = new ArrivalBoard();  // never destroyed
  return *instance;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) text += (i ? ", " : "") + std::to_string(ranks[i]);
  return text;
}

// Why a collective over `comm` has not completed, as far as this rank knows.
std::string who_is_missing(MPI_Comm comm) {
  if (!board().knows_missing(comm)) return "";
  const std::vector<int> missing = board().missing(comm);
  if (missing.empty()) return " (every rank entered it)";
  return " (" + rank_list(missing) + " did not arrive)";
}

// Rank 0 names the missing ranks; the others wait a little longer so that
// its report comes first.
double limit_for(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  const double limit = wait_limit();
  return rank == 0 ? limit : limit + std::max(1.0, 0.1 * limit);
}

// ---- the watchdog thread ------------------------------------------------

class Watchdog {
 public:
  long long arm(const std::string& what) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!thread_started_) {
      std::thread([this] { loop(); }).detach();
      thread_started_ = true;
    }
    const long long id = next_id_++;
    const double limit = wait_limit();
    scopes_[id] = Scope{Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(limit)),
                        limit, what, phase_text(), world_rank()};
    wake_.notify_one();
    return id;
  }

  void disarm(long long id) {
    std::lock_guard<std::mutex> lock(mutex_);
    scopes_.erase(id);
  }

 private:
  struct Scope {
    Clock::time_point deadline;
    double limit_s;
    std::string what, phase;
    int rank;
  };

  void loop() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (scopes_.empty()) {
        wake_.wait(lock);
        continue;
      }
      auto first = scopes_.begin();
      for (auto it = scopes_.begin(); it != scopes_.end(); ++it)
        if (it->second.deadline < first->second.deadline) first = it;
      // A copy: the scope may be disarmed (its entry erased) while we wait.
      const Clock::time_point deadline = first->second.deadline;
      if (Clock::now() < deadline) {
        wake_.wait_until(lock, deadline);
        continue;
      }
      const Scope& s = first->second;
      std::fprintf(stderr, "pipetrain: rank %d: error: timed out after %s s %swaiting for %s; "
                   "see pipeline.timeout_s\n", s.rank, seconds_text(s.limit_s).c_str(),
                   s.phase.c_str(), s.what.c_str());
      std::fflush(stderr);
      if (mpi_running()) MPI_Abort(MPI_COMM_WORLD, 3);
      std::_Exit(3);
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<long long, Scope> scopes_;
  long long next_id_ = 0;
  bool thread_started_ = false;
};

Watchdog& watchdog() {
  static Watchdog* instance = new Watchdog();  // never destroyed (its thread is detached)
  return *instance;
}

}  // namespace

int world_rank() {
  int rank = 0;
  if (mpi_running()) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void set_wait_limit(double seconds) { g_limit_s = seconds; }
double wait_limit() { return g_limit_s; }

void set_wait_phase(const std::string& phase) {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  g_phase = phase;
}

std::string wait_phase() {
  std::lock_guard<std::mutex> lock(g_phase_mutex);
  return g_phase;
}

// Sleep mode asks the kernel for 1 us of timer slack instead of its default
// 50 us: a 20 us sleep then wakes after about 20 us, not 70, so a waiting
// rank sees its message almost as soon as a yielding one would.
void set_wait_mode(WaitMode mode) {
  g_wait_mode = mode;
  if (mode == WaitMode::Sleep) prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
}
WaitMode wait_mode() { return g_wait_mode; }

const char* wait_mode_name(WaitMode mode) { return mode == WaitMode::Sleep ? "sleep" : "yield"; }

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

bool poll_until(const std::function<bool()>& done, double limit_s) {
  if (done()) return true;
  const Clock::time_point start = Clock::now();
  const bool may_sleep = g_wait_mode == WaitMode::Sleep;
  for (int spins = 0; !done(); ++spins) {
    if (spins < 200) continue;
    if ((spins & 63) == 0 || may_sleep) {
      const double waited = std::chrono::duration<double>(Clock::now() - start).count();
      if (waited > limit_s) return false;
      // Sleep mode: after kSleepAfter of yielding, give the core away for
      // real, so that a rank that computes on a shared core gets all of it.
      if (may_sleep && waited > kSleepAfter_s) {
        std::this_thread::sleep_for(std::chrono::microseconds(kSleepFor_us));
        continue;
      }
    }
    sched_yield();
  }
  return true;
}

void start_wait_watch(MPI_Comm world) { board().start(world); }
void stop_wait_watch() {
  if (!board().active()) return;
  timed_barrier(MPI_COMM_WORLD, "the final barrier");
  board().stop();
}

void timed_wait(MPI_Request& request, MPI_Comm comm, const std::string& what) {
  auto complete = [&] {
    int done = 0;
    MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    return done != 0;
  };
  const double limit = limit_for(comm);
  if (poll_until(complete, limit)) return;
  throw TimeoutError("timed out after " + seconds_text(limit) + " s " + phase_text() +
                     "waiting for " + what + who_is_missing(comm) + "; see pipeline.timeout_s");
}

MPI_Comm timed_comm_dup(MPI_Comm comm, const std::string& what) {
  MPI_Comm duplicate = MPI_COMM_NULL;  // usable once the duplication completes
  MPI_Request req;
  MPI_CHECK(MPI_Comm_idup(comm, &duplicate, &req));
  timed_wait(req, comm, what);
  return duplicate;
}

void timed_barrier(MPI_Comm comm, const std::string& what) {
  board().enter(comm);
  MPI_Request req;
  MPI_CHECK(MPI_Ibarrier(comm, &req));
  timed_wait(req, comm, what);
}

void timed_bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                 const std::string& what) {
  board().enter(comm);
  MPI_Request req;
  MPI_CHECK(MPI_Ibcast(buf, count, type, root, comm, &req));
  timed_wait(req, comm, what);
}

void timed_gather(const void* send, int count, MPI_Datatype type, void* recv, int root,
                  MPI_Comm comm, const std::string& what) {
  board().enter(comm);
  MPI_Request req;
  MPI_CHECK(MPI_Igather(send, count, type, recv, count, type, root, comm, &req));
  timed_wait(req, comm, what);
}

void timed_gatherv(const void* send, int count, MPI_Datatype type, void* recv,
                   const int* counts, const int* offsets, int root, MPI_Comm comm,
                   const std::string& what) {
  board().enter(comm);
  MPI_Request req;
  MPI_CHECK(MPI_Igatherv(send, count, type, recv, counts, offsets, type, root, comm, &req));
  timed_wait(req, comm, what);
}

void timed_allgather(const void* send, int count, MPI_Datatype type, void* recv, MPI_Comm comm,
                     const std::string& what) {
  board().enter(comm);
  MPI_Request req;
  MPI_CHECK(MPI_Iallgather(send, count, type, recv, count, type, comm, &req));
  timed_wait(req, comm, what);
}

void timed_allgatherv(const void* send, int count, MPI_Datatype type, void* recv,
                      const int* counts, const int* offsets, MPI_Comm comm,
                      const std::string& what) {
  board().enter(comm);
  MPI_Request req;
  MPI_CHECK(MPI_Iallgatherv(send, count, type, recv, counts, offsets, type, comm, &req));
  timed_wait(req, comm, what);
}

void timed_allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                     MPI_Comm comm, const std::string& what) {
  board().enter(comm);
  MPI_Request req;
  MPI_CHECK(MPI_Iallreduce(send, recv, count, type, op, comm, &req));
  timed_wait(req, comm, what);
}

void timed_send(const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                const std::string& what) {
  MPI_Request req;
  MPI_CHECK(MPI_Isend(buf, count, type, peer, tag, comm, &req));
  timed_wait(req, comm, what + " to rank " + std::to_string(peer));
}

void timed_recv(void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                const std::string& what) {
  MPI_Request req;
  MPI_CHECK(MPI_Irecv(buf, count, type, peer, tag, comm, &req));
  timed_wait(req, comm, what + " from rank " + std::to_string(peer));
}

DeadlineScope::DeadlineScope(const std::string& what) : id_(watchdog().arm(what)) {}
DeadlineScope::~DeadlineScope() { watchdog().disarm(id_); }

int node_local_size(MPI_Comm comm, const std::string& what) {
  MPI_Comm node = MPI_COMM_NULL;
  {
    DeadlineScope deadline(what);
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  }
  int size = 1;
  MPI_CHECK(MPI_Comm_size(node, &size));
  MPI_CHECK(MPI_Comm_free(&node));
  return size;
}

}  // namespace pt
