// executor.hpp: the one executor that runs any valid schedule.
//
// For each action of this rank's list it does exactly what the action says
// (see schedule.hpp for the semantics): F, B and W are handed to the
// StageRunner of the action's stage (stage_runner.hpp: each stage a rank
// owns has its own, with its micro-batches, recompute policy and loss);
// SEND_* and RECV_* post non-blocking transfers whose tags carry (stage,
// direction, micro-batch). A rank may own several stages (interleaved,
// ZB-V); the handoff between two stages of one rank is local, no message.
// The executor times every F, B and W on the backend's clock
// (compute_regions.hpp), records the trace and applies the fault
// injection's slowdown. A wait longer than the configured timeout throws a
// TimeoutError naming the rank, the step and the action waited for. With
// pipeline.check_messages every message between ranks is followed by an
// envelope the receiver verifies, and every stage output is checked for
// inf/NaN (executor_checks.cpp, message_check.hpp).
//
// Everything it is built with is fixed (executor_config.hpp); what changes
// per step (the batch, the fp16 loss scale) is an argument of run().
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/runtime/compute_regions.hpp"
#include "pipetrain/runtime/executor_config.hpp"
#include "pipetrain/runtime/stage_runner.hpp"
#include "pipetrain/runtime/trace.hpp"
#include "pipetrain/runtime/transport.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

struct StepOutcome {
  double loss_sum = 0.0;  // last stage: summed loss terms of the step; else 0
  std::vector<double> micro_batch_losses;  // last stage: (micro-batches) each one's summed loss terms
  double compute_us = 0.0;  // time in F, B and W on the backend's clock (ComputeTimer), not
                            // counting waits for peers
  double span_us = 0.0;     // first action's start to the end of the last wait or compute
};

class Executor {
 public:
  // `stages`: this rank's stages (ascending), each run with its policy;
  // `tracer` may be null (no events recorded).
  Executor(const ExecutorConfig& config, std::vector<StageModel*> stages,
           std::vector<RecomputePolicy> policies, Transport& transport, Backend& backend,
           Tracer* tracer = nullptr);
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Runs this rank's actions of `schedule` for batch `step` of `data`.
  // Evaluate: forward only, nothing stashed; needs a forward-only schedule.
  // fp16: the loss gradient is multiplied by `loss_scale`.
  StepOutcome run(const Schedule& schedule, const Dataset& data, int64_t step, Pass pass,
                  float loss_scale = 1.f);
  // Every F, B and W of the last run, in the order they ran, on the
  // backend's clock (GPU: kernel time; the timer is read once per run).
  const std::vector<ActionTime>& action_times() const { return regions_.action_times(); }
  const ExecutorConfig& config() const { return config_; }

 private:
  // A posted transfer and when it was posted; its completion is recorded as
  // a SEND or RECV event the first time it is observed.
  struct Pending {
    std::unique_ptr<PendingTransfer> transfer;
    Action action;
    double posted_us = 0.0;
    bool done = false;
    bool traced = true;  // false: an envelope (no SEND/RECV event of its own)
    explicit operator bool() const { return transfer != nullptr; }
  };
  // The receives of one micro-batch on one stage.
  struct Receives {
    Pending forward, backward;
    Tensor input;  // (rows, in) buffer of RECV_F, until its F
    // pipeline.check_messages: the envelopes that follow each payload.
    Pending forward_envelope, backward_envelope;
    Tensor forward_envelope_buf, backward_envelope_buf;  // (16) int32: 64 bytes
  };
  struct Send {
    Tensor buffer;  // (rows, width) the stage output or input gradient sent, alive until the send completes
    Pending pending;
  };
  // Which send each compute action waits for first (sends_finished_before),
  // worked out again only when the schedule changes.
  struct SendOrder {
    std::vector<int> finish_first;           // (actions) of this rank
    std::vector<std::vector<Action>> ranks;  // the schedule it was made for
    std::vector<int> placement;
  };

  void begin_pass(const Schedule& schedule, const Dataset& data, int64_t step, Pass pass,
                  float loss_scale);
  StepOutcome end_pass(double start_us);
  void run_action(const Action& a, StageRunner& runner);
  void forward(StageRunner& runner, int mb);
  void receive_forward_input(StageRunner& runner, int mb);  // waits for a peer's input, if any
  Tensor forward_input(StageRunner& runner, int mb);
  void backward(StageRunner& runner, int mb);
  void weights(StageRunner& runner, int mb);
  // Opens the timed region of an F, B or W (`kind`) whose inputs are there;
  // returns the time its compute starts.
  double compute_begin(EventKind kind, const StageRunner& runner, int mb);
  // Ends the compute begun at compute_start_us, whose action (with its waits
  // for inputs) began at start_us: one event for micro-batch mb, or for
  // `count` micro-batches from mb on (a W pass), each an equal slice of it.
  void compute_end(const StageRunner& runner, EventKind kind, int mb, double start_us,
                   double compute_start_us, int count = 1);
  // The fault injection's slowdown (executor.cpp says what it measures).
  bool slowed() const;  // this pass's F, B and W are slowed
  // Waits (bounded) for the backend's queued work `when` ("before", "of") an action.
  void settle_compute(const char* when, EventKind kind, const StageRunner& runner, int mb);
  void slow_down(double compute_start_us);
  StageRunner* runner_of(int stage);  // null: another rank's stage
  StageRunner& runner_for(int stage);  // throws unless this rank owns it
  Receives& receives(const StageRunner& runner, int mb);
  void post_recv(const Action& a, StageRunner& runner);
  void post_send(const Action& a, StageRunner& runner);
  Pending posted(const Action& a, std::unique_ptr<PendingTransfer> transfer);
  // A received buffer is about to be used: the compute stream waits for it
  // where the transport can order it there, else the host waits. Empties p.
  // Returns the bytes that arrived (-1: not known).
  int64_t await_receive(Pending& p);
  bool orders_receives_on_device() const;  // not while computes are synchronised
  void wait_for_ordered_receives();        // at the end of the pass, bounded
  bool traces_communication() const;
  void wait_for(Pending& p);
  bool poll(Pending& p);      // true once complete; records the transfer window
  void poll_receives();       // progress on every posted receive
  const Tracer& clock() const { return tracer_ ? *tracer_ : local_clock_; }
  // Frees the buffers of completed sends (all of them, waiting, when
  // wait_all); also called while a receive is waited for.
  void reap_sends(bool wait_all);
  void finish_sends_first();  // the running compute's sends_finished_before
  int tag(int dst_stage, int direction, int mb) const;
  // pipeline.check_messages (executor.cpp, message_check.hpp).
  Pending post_envelope_recv(const Action& a, int peer, int tag, Tensor& buf);
  // Sends the envelope of `payload` and its `digest`; `fault`: the fault
  // injection's damage to the envelope ("" none).
  void post_envelope_send(const Action& a, const Tensor& payload, const PayloadDigest& digest,
                          int peer, int tag, const std::string& fault);
  // Waits for a receive's envelope and checks it against the payload that
  // arrived (received_bytes of it; -1: unknown).
  void verify_receive(StageRunner& runner, int mb, int direction, Pending& envelope,
                      const Tensor& envelope_buf, const Tensor& payload, int64_t received_bytes);
  // Throws naming the stage and micro-batch when `x` (the output of `action`
  // on a stage) holds inf or NaN, unless fp16 loss scaling handles them;
  // returns x's digest.
  PayloadDigest check_output(const StageRunner& runner, int mb, const char* action,
                             const Tensor& x);
  // A received payload of a size other than its buffer (without envelopes).
  void check_length(const Action& a, int64_t received_bytes, const Tensor& buf) const;
  int peer_rank(int stage) const { return stage_rank(*schedule_, stage); }
  std::string describe(const Action& a) const;

  const ExecutorConfig config_;
  std::vector<StageRunner> runners_;  // this rank's stages, ascending
  Transport& transport_;
  Backend& be_;
  Tracer* tracer_;             // null: no events recorded
  Tracer local_clock_{false};  // times F/B and waits when no tracer is given
  ComputeRegions regions_;     // F, B and W on the backend's clock
  SendOrder send_order_;
  // The pass being run.
  const Schedule* schedule_ = nullptr;
  PassContext pass_;
  std::map<int, Receives> receives_;  // by micro-batch x stages + index of the stage's runner
  std::vector<Send> sends_;
  // Receives whose consumers the compute stream holds back until they land
  // (await_receive); the host polls them until done, and waits for the rest
  // at the end of the pass.
  std::vector<Pending> ordered_receives_;
  bool reaping_ = false;       // inside reap_sends: its waits do not reap again
  size_t action_index_ = 0;    // in this rank's list, of the running action
  double last_end_us_ = 0.0;   // end of the last wait or compute
};

}  // namespace pt
