// stop_signal.cpp: the stop-request handlers and the ranks' agreement (see
// stop_signal.hpp).
#include "pipetrain/base/stop_signal.hpp"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <ctime>

#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

// Written by the handler (on a thread that existed before main) and by the
// main thread: a lock-free atomic, which a handler may use.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be lock-free");

void record(int signo) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, signo);
}

void on_stop_signal(int signo) { record(signo); }

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR1);
  sigaddset(&set, SIGTERM);
  return set;
}

// The stop signals pending for this thread or the process, taken (the
// main thread blocks them, so they wait here until asked for).
void take_pending_signals() {
  const sigset_t set = stop_signals();
  const timespec now = {0, 0};
  for (int signo; (signo = sigtimedwait(&set, nullptr, &now)) > 0;) record(signo);
}

// The recording handler, for the threads that existed before main.
void install(int signo) {
  struct sigaction action;
  std::memset(&action, 0, sizeof action);
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // blocking calls go on; the flag is read between steps
  sigaction(signo, &action, nullptr);
}

}  // namespace

void block_stop_signals() {
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  install(SIGUSR1);
  install(SIGTERM);
}

void unblock_stop_signals() {
  std::signal(SIGUSR1, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  const sigset_t set = stop_signals();
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

int agree_on_stop(MPI_Comm comm, const std::string& what) {
  take_pending_signals();
  const int mine = g_stop_signal.load();
  int agreed = 0;
  timed_allreduce(&mine, &agreed, 1, MPI_INT, MPI_MAX, comm, what);
  return agreed;
}

std::string signal_name(int signo) {
  if (signo == SIGUSR1) return "SIGUSR1";
  if (signo == SIGTERM) return "SIGTERM";
  return "signal " + std::to_string(signo);
}

}  // namespace pt
