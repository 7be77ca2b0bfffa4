// trace.hpp: per-rank timing events, kept in memory during training.
//
// The executor and trainer record what each rank did and when: F, B,
// recompute, waits for a peer, the windows of asynchronous sends and
// receives, the optimizer and the reductions. Recording appends to a vector
// (the hot loop never touches a file); the driver gathers every rank's events
// at the end and writes <output.dir>/trace.h5 (layout in docs/outputs.md).
// Times are microseconds on this rank's steady clock since the tracer's
// origin; align_clocks() estimates each rank's offset from rank 0.
#pragma once

#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/plan/simulate.hpp"

namespace pt {

// Codes stored in trace.h5 (kind_names attribute, same order).
// REBALANCE: a move of units between stages after a step (docs/rebalance.md);
// W: the deferred weight gradients of a split backward (docs/schedules.md).
// CKPT_STAGE: an asynchronous checkpoint's copy into host memory (training
// blocked); CKPT_WAIT: training waiting for a background checkpoint write to
// finish (the next save came first, or the run ends) and for its publication
// (docs/reliability.md). Both after step `step`, with mb = -1.
// REPLAN: a re-planning switch after step `step` (mb = -1; docs/planner.md):
// the checkpoint of the state and the run rebuilt in the new plan from it.
enum class EventKind : int32_t { F, B, Recompute, Wait, Send, Recv, Optimizer, Reduction, EvalF, Rebalance, W,
                                 CheckpointStage, CheckpointWait, Replan };
constexpr const char* kEventKindNames =
    "F,B,RECOMPUTE,WAIT,SEND,RECV,OPTIMIZER,REDUCTION,EVAL_F,REBALANCE,W,CKPT_STAGE,CKPT_WAIT,REPLAN";

struct TraceEvent {
  int64_t step;
  int32_t stage;
  int32_t mb;  // -1 when not about one micro-batch
  int32_t kind;
  double start_us;
  double end_us;
};

struct ClockAlignment {
  std::vector<double> offset_us;  // (ranks) rank clock - rank 0 clock
  std::vector<double> error_us;   // (ranks) half the best round trip; 0 for rank 0
};

// A run's trace as trace.h5 holds it (io/trace_io.hpp reads it back).
struct RunTrace {
  std::string source;             // the file, for messages
  std::string deck;               // the run's resolved deck (TOML)
  int num_stages = 0;             // one per rank
  int num_micro_batches = 0;
  std::vector<double> clock_error_us;           // (ranks) half the best ping-pong round trip
  std::vector<std::vector<TraceEvent>> events;  // (ranks) events on rank 0's clock
};

// Per stage (num_stages entries), the median seconds of its F, B and W
// actions in the traced steps after the first (the first allocates; all of
// them when there is only one), each less the waits nested in it, B with its
// recomputation. Empty when some stage has no traced F or B. A run that
// rebalanced mixes its partitions' costs.
std::vector<ActionCost> median_action_costs(const std::vector<std::vector<TraceEvent>>& events_per_rank,
                                            int num_stages);

// One traced step replayed: the schedule simulated with every F, B and W
// taking the time it took in that step (less its nested waits), free links
// and no optimizer (bubble_at_action_times).
struct StepReplay {
  int64_t step = 0;
  double bubble = 0.0;
};

// Every traced step from first_step on that holds each F, B and W action of
// `schedule`, replayed; in step order. Steps missing an action (a run cut
// short) are left out.
std::vector<StepReplay> replay_traced_steps(const std::vector<std::vector<TraceEvent>>& events_per_rank,
                                            const Schedule& schedule, int64_t first_step);

class Tracer {
 public:
  explicit Tracer(bool enabled);
  bool enabled() const { return enabled_; }
  // Microseconds since the origin on this rank's clock.
  double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
  }
  void record(EventKind kind, int64_t step, int stage, int mb, double start_us, double end_us) {
    if (enabled_) events_.push_back({step, stage, mb, static_cast<int32_t>(kind), start_us, end_us});
  }
  const std::vector<TraceEvent>& events() const { return events_; }
  std::chrono::steady_clock::time_point origin() const { return origin_; }
  // Events an earlier tracer of this process recorded (origin: its origin),
  // placed before this one's on this tracer's clock: a run rebuilt at a
  // re-planning switch keeps the events of the steps before it.
  void add_earlier(const std::vector<TraceEvent>& earlier, std::chrono::steady_clock::time_point origin);
  // Collective: a common origin (rank 0's) and each rank's clock offset,
  // estimated by ping-pong with rank 0 (best of several round trips).
  ClockAlignment align_clocks(MPI_Comm comm);
  // Collective: every rank's events on rank 0, in rank order, shifted onto
  // rank 0's clock. Empty on other ranks.
  std::vector<std::vector<TraceEvent>> gather(MPI_Comm comm, const ClockAlignment& clocks) const;

 private:
  bool enabled_;
  std::chrono::steady_clock::time_point origin_;
  std::vector<TraceEvent> events_;
};

}  // namespace pt
