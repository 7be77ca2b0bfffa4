// stop_signal.hpp: a graceful stop on a signal, agreed by every rank.
//
// A batch system warns a job before its time limit (Slurm's
// --signal=[B:]USR1@SECONDS, forwarded to the ranks) and sends SIGTERM when
// it preempts or cancels it. pipetrain then finishes the step in flight on
// every rank, writes a checkpoint and exits with kStopExitStatus, so that the
// job script can requeue itself and the next attempt resumes (docs/cluster.md).
// The handler only records the signal; the ranks agree after every step
// (agree_on_stop, a bounded all-reduce), so all of them stop after the same
// step whichever of them the signal reached, and when. A second SIGTERM
// ends the process at once (the default action).
#pragma once

#include <mpi.h>

#include <string>

namespace pt {

// Exit status of a run that stopped early on a signal after writing its
// checkpoint: EX_TEMPFAIL of sysexits.h, "try again" (requeue, then resume).
constexpr int kStopExitStatus = 75;

// Installs the handlers for SIGUSR1 and SIGTERM (idempotent).
void install_stop_signal_handlers();
// The first stop signal this process received, 0 when none.
int stop_signal_received();
// Test hook and tools: records `signo` as if it had arrived.
void request_stop(int signo);
// Collective over `comm`: the largest signal number any rank received
// (0: nobody did, keep training). `what` names the wait if it times out.
int agree_on_stop(MPI_Comm comm, const std::string& what);
// "SIGUSR1", "SIGTERM" or "signal N".
std::string signal_name(int signo);

}  // namespace pt
