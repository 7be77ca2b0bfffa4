// timed_wait.hpp: no wait in a run is unbounded.
//
// Every MPI collective and every blocking exchange of pipetrain goes through
// these functions. Each starts the non-blocking form of the call
// (MPI_Ibcast, MPI_Iallgather, ...) and polls it with the same loop as the
// executor's point-to-point waits (spin briefly, then yield the core). A wait
// longer than the limit (pipeline.timeout_s) throws pt::TimeoutError whose
// message names the phase of the run, what was waited for and, on rank 0,
// which ranks never entered the collective:
//   timed out after 5 s in step 812 waiting for the gradient-norm all-gather
//   (rank 1 did not arrive); see pipeline.timeout_s
// The driver turns that into one line on stderr and MPI_Abort, so the job
// ends with a non-zero status.
//
// Who arrived: after start_wait_watch(MPI_COMM_WORLD), each rank tells world
// rank 0 (a tiny eager message on a private duplicate communicator) how many
// collectives over the whole world it has entered; rank 0 compares with its
// own count when it times out. Ranks other than 0 wait a little longer than
// the limit, so rank 0's report, which names the missing ranks, comes first.
//
// The few blocking calls that have no non-blocking form (MPI_Comm_split_type,
// NCCL's communicator set-up, ...) run inside a DeadlineScope: a watchdog
// thread prints the same kind of line and calls MPI_Abort if the scope is not
// left in time.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>

namespace pt {

// MPI_Init has run and MPI_Finalize has not. Single-process programs (the
// GoogleTests, bench_cuda stage) use deadlines and device memory without MPI.
bool mpi_running();
// This process's rank in MPI_COMM_WORLD; 0 when MPI is not running.
int world_rank();

// The limit of every wait, in seconds (the deck's pipeline.timeout_s; 120
// until a deck sets it).
void set_wait_limit(double seconds);
double wait_limit();

// What the run is doing, for messages: "at start-up", "in step 812",
// "in the evaluation after step 800", "in the checkpoint save after step 800".
void set_wait_phase(const std::string& phase);
std::string wait_phase();

// How a waiting rank spends its time. Yield: spin briefly, then sched_yield
// between polls (lowest latency; right when every rank has its own core).
// Sleep: the same for the first 50 us, then 20 us sleeps between polls, so
// that ranks sharing a core (more ranks than cores) leave it to the one that
// computes. The driver picks Sleep when the node is oversubscribed
// (docs/performance.md); PIPETRAIN_WAIT=yield|sleep overrides.
enum class WaitMode { Yield, Sleep };
void set_wait_mode(WaitMode mode);
WaitMode wait_mode();
const char* wait_mode_name(WaitMode mode);

// Polls `done` until it returns true, in the current WaitMode; false if
// `limit_s` passed first.
bool poll_until(const std::function<bool()>& done, double limit_s);

// Collective over `comm`: starts tracking who arrives at world collectives.
// Optional; without it, timeouts do not name the missing ranks.
void start_wait_watch(MPI_Comm world);
// Collective over the same comm, before MPI_Finalize.
void stop_wait_watch();

// Completes `request` or throws TimeoutError naming `what`.
void timed_wait(MPI_Request& request, MPI_Comm comm, const std::string& what);

// Timed collectives: the MPI call of the same name, non-blocking, waited for
// with timed_wait. `what` names it in a message ("the loss broadcast").
void timed_barrier(MPI_Comm comm, const std::string& what);
void timed_bcast(void* buf, int count, MPI_Datatype type, int root, MPI_Comm comm,
                 const std::string& what);
void timed_gather(const void* send, int count, MPI_Datatype type, void* recv, int root,
                  MPI_Comm comm, const std::string& what);
void timed_gatherv(const void* send, int count, MPI_Datatype type, void* recv,
                   const int* counts, const int* offsets, int root, MPI_Comm comm,
                   const std::string& what);
void timed_allgather(const void* send, int count, MPI_Datatype type, void* recv, MPI_Comm comm,
                     const std::string& what);
void timed_allgatherv(const void* send, int count, MPI_Datatype type, void* recv,
                      const int* counts, const int* offsets, MPI_Comm comm,
                      const std::string& what);
void timed_allreduce(const void* send, void* recv, int count, MPI_Datatype type, MPI_Op op,
                     MPI_Comm comm, const std::string& what);
// MPI_Comm_idup under timed_wait: a duplicate of comm, collective over it.
MPI_Comm timed_comm_dup(MPI_Comm comm, const std::string& what);
// Blocking-style point-to-point with the same limit.
void timed_send(const void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                const std::string& what);
void timed_recv(void* buf, int count, MPI_Datatype type, int peer, int tag, MPI_Comm comm,
                const std::string& what);

// A blocking call with no non-blocking form: if the scope is still open after
// the wait limit, a watchdog thread prints what it waits for and aborts the job.
class DeadlineScope {
 public:
  explicit DeadlineScope(const std::string& what);
  ~DeadlineScope();
  DeadlineScope(const DeadlineScope&) = delete;
  DeadlineScope& operator=(const DeadlineScope&) = delete;

 private:
  long long id_;
};

// Collective over comm: how many of its ranks share this rank's node
// (MPI_Comm_split_type, under a DeadlineScope naming `what`).
int node_local_size(MPI_Comm comm, const std::string& what);

// fault_point() and the other fault-injection hooks: base/fault_injection.hpp.

}  // namespace pt
