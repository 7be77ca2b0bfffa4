// stop_signal.hpp: a graceful stop on a signal, agreed by every rank.
//
// A batch system warns a job before its time limit (Slurm's
// --signal=[B:]USR1@SECONDS, forwarded to the ranks) and sends SIGTERM when
// it preempts or cancels it. pipetrain then finishes the step in flight on
// every rank, writes a checkpoint and exits with kStopExitStatus, so that the
// job script can requeue itself and the next attempt resumes (docs/cluster.md).
// The signals are blocked in the main thread from the start of main (and so
// in every thread created after it: MPI's, OpenMP's, the watchdog): with a
// handler run on the main thread in the middle of a step, 4 of 14 GPT runs
// signalled at random moments aborted with a corrupted heap (glibc's check
// in free() under dnnl_sgemm), and 0 of 20 with the signals blocked there.
// The main thread takes the pending signals itself, between
// steps (agree_on_stop); a thread that existed before main (a BLAS library's
// pool) runs the handler, which only records the signal. The ranks then agree
// in a bounded all-reduce, so all of them stop after the same step whichever
// of them the signal reached, and when.
#pragma once

#include <mpi.h>

#include <string>

namespace pt {

// Exit status of a run that stopped early on a signal after writing its
// checkpoint: EX_TEMPFAIL of sysexits.h, "try again" (requeue, then resume).
constexpr int kStopExitStatus = 75;

// First thing in main: blocks SIGUSR1 and SIGTERM in this (the main) thread,
// so that every thread created later has them blocked too, and installs the
// recording handler for the threads that existed before main.
void block_stop_signals();
// Commands that do not train: SIGUSR1 and SIGTERM end the process again
// (default action, unblocked).
void unblock_stop_signals();
// Collective over `comm`: takes this thread's pending stop signals, then the
// largest signal number any rank received (0: nobody did, keep training).
// `what` names the wait if it times out.
int agree_on_stop(MPI_Comm comm, const std::string& what);
// "SIGUSR1", "SIGTERM" or "signal N".
std::string signal_name(int signo);

}  // namespace pt
