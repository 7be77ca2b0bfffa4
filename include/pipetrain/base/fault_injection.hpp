// fault_injection.hpp: the one place pipetrain reads its fault-injection
// hooks, the environment variables through which the tests (and anyone
// rehearsing a failure) make one rank stall, crash, die at a checkpoint,
// receive a signal, poison a gradient or force a rebalancing move.
//
// Every hook is a row of one table (fault_hooks()): its variable, the format
// of its value and what it does. The values are parsed once, all together,
// by check_fault_hooks() at start-up: a malformed value is an InputError
// naming the variable, the value and the expected format, instead of a hook
// that silently never fires. A run with any hook set says so in its log
// (active_fault_hooks()), so that no production job runs with one unnoticed.
// docs/reliability.md lists the hooks and the tests that use them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pt {

enum class FaultHook {
  Stall,              // PIPETRAIN_TEST_STALL=RANK:POINT[:STEP]: SIGSTOP at a named point
  NonFinite,          // PIPETRAIN_TEST_NONFINITE=RANK:STEP: one gradient becomes inf
  KillBeforePublish,  // PIPETRAIN_TEST_KILL_BEFORE_PUBLISH=RANK:STEP: SIGKILL before a checkpoint
  KillAfterPublish,   // PIPETRAIN_TEST_KILL_AFTER_PUBLISH=RANK:STEP: SIGKILL after `latest` names it
  CrashInCheckpoint,  // PIPETRAIN_TEST_CRASH_IN_CHECKPOINT=RANK:STEP: SIGKILL mid-write
  Signal,             // PIPETRAIN_TEST_SIGNAL=RANK:STEP[:SIGNAL]: a signal before the step
  Rebalance,          // PIPETRAIN_TEST_REBALANCE=STEP:C0,C1,...: a forced move after the step
  BlasForced,         // PIPETRAIN_TEST_BLAS_FORCED=<any>: OPENBLAS_CORETYPE is the test's, not the user's
  MessageFault,       // PIPETRAIN_TEST_MESSAGE_FAULT=RANK:STEP:KIND: one damaged inter-stage message
  CorruptReplica,     // PIPETRAIN_TEST_CORRUPT_REPLICA=RANK:STEP: one parameter bit flipped
  AsyncSave,          // PIPETRAIN_TEST_ASYNC_SAVE_FAULT=RANK:STEP:PHASE: SIGKILL (or a write error)
                      // at a phase of an asynchronous checkpoint
  ReplanSpeed,        // PIPETRAIN_TEST_REPLAN_SPEED=F0,F1,...: re-planning's measured times are
                      // the plan's prediction with pipeline rank r computing F_r times as slow
};

struct FaultHookInfo {
  FaultHook hook;
  const char* variable;  // the environment variable
  const char* format;    // the expected value, for messages
  const char* effect;    // what it does, for the log and the docs
};

// Every hook, in FaultHook order.
const std::vector<FaultHookInfo>& fault_hooks();
const FaultHookInfo& fault_hook_info(FaultHook hook);

// A hook's parsed value. rank and step are -1 where the format has none (or
// STEP was left out: any step); point for Stall (and KIND for
// MessageFault), signo for Signal (SIGUSR1
// by default), counts for Rebalance, factors for ReplanSpeed.
struct FaultRequest {
  int rank = -1;
  long long step = -1;
  std::string point;
  int signo = 0;
  std::vector<int64_t> counts;
  std::vector<double> factors;  // ReplanSpeed: one per pipeline rank
};

// Parses one hook's value; InputError naming the variable, the value and
// the expected format when it is malformed.
FaultRequest parse_fault_hook(FaultHook hook, const std::string& value);

// Parses every hook set in the environment (once; later calls return at
// once). Throws InputError on a malformed value.
void check_fault_hooks();
// The hook's request when its variable is set (parsing it if
// check_fault_hooks() has not run yet), else nothing.
std::optional<FaultRequest> fault_request(FaultHook hook);
// True when the hook is set for this rank and this step (a request without
// a step matches every step).
bool fault_due(FaultHook hook, int rank, long long step);
// One line per hook set, "PIPETRAIN_TEST_STALL=1:step:3: <effect>"; empty
// when none is set.
std::vector<std::string> active_fault_hooks();

// The phases of an asynchronous checkpoint (output.checkpoint_async) that
// PIPETRAIN_TEST_ASYNC_SAVE_FAULT names: "staged" (host copy taken, writer not
// started), "written" (stage file closed, not fsynced), "fsynced" (stage file
// durable, not yet bound), "bound" (rank 0: manifest.h5 durable, not renamed;
// other ranks: results gathered), "published" (`latest` names it), and
// "write_error" (the rank's stage-file write fails as a full disk would).
const std::vector<std::string>& async_save_phases();

// The hooks' actions.
// Stall: world rank RANK stops itself (SIGSTOP, as `kill -STOP` would) when
// it reaches the named point (in step STEP, or the first time), so that its
// peers' timeouts fire there. Points: step, loss, grad_norm, bubble, memory,
// eval, checkpoint, resume, trace, startup, rebalance, reduction (the first
// data-parallel bucket of a step is due; docs/reliability.md), replica_check
// (the replicas' parameter digests are about to be compared).
void fault_point(const char* point, long long step = -1);
// NonFinite: true on world rank RANK in step STEP; the trainer then poisons
// one gradient with inf, so that the non-finite check is tested end to end.
bool nonfinite_gradient_requested(long long step);
// MessageFault: the KIND ("bitflip", "wrong_mb", "truncate" or "nan") to
// apply to the first message world rank RANK sends in step STEP, once per
// process; "" otherwise (runtime/message_check.hpp says what each does).
std::string message_fault_due(long long step);
// CorruptReplica: true on world rank RANK after the optimizer step of step
// STEP (once); the trainer then flips one bit of one of its parameters.
bool replica_corruption_due(long long step);
// KillBeforePublish, KillAfterPublish, CrashInCheckpoint: when due for this
// rank and step, prints which hook killed the rank (and `detail`) and
// raises SIGKILL.
void kill_if_due(FaultHook hook, int rank, long long step, const std::string& detail = "");
// AsyncSave: true when the hook names this rank, step and phase; the
// kill phases then kill the rank (SIGKILL, printing `detail`) inside this
// call, from whichever thread reached the phase; "write_error" returns true.
bool async_save_fault(int rank, long long step, const char* phase, const std::string& detail = "");

}  // namespace pt
