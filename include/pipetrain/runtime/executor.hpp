// executor.hpp: the one executor that runs any valid schedule.
//
// For each action of this rank's list it does exactly what the action says
// (see schedule.hpp for the semantics): F and B run the stage, W adds the
// weight gradients B deferred (schedules with W split every backward),
// SEND_* and RECV_* post non-blocking transfers whose tags carry (stage,
// direction, micro-batch). A rank may own several stages (interleaved,
// ZB-V); the handoff between two stages of one rank is local, no message.
// With a split backward B keeps, per micro-batch until its W, each deferred
// weight product's input and output gradient, counted as Activations. With
// per-step weight gradients a stage's W of micro-batch 0 runs the weights of
// every micro-batch: each deferred tensor is stacked over the micro-batches
// (a Workspace copy; each piece is freed as it is copied) and the layer's
// backward_weights runs once on the stacks, so each weight-gradient product
// is one GEMM over all the step's rows; its W of the other micro-batches
// find their work done. The pass is traced as N equal W events. A wait longer than the deck's timeout throws a TimeoutError
// naming the rank, the step and the action waited for.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/recompute.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "pipetrain/runtime/trace.hpp"
#include "pipetrain/runtime/transport.hpp"

namespace pt {

// One F, B or W of a pass and its compute time without the waits inside it.
struct ActionTime {
  int stage = 0;
  int kind = 0;  // 0 F, 1 B, 2 W
  double seconds = 0.0;
};

struct StepOutcome {
  double loss_sum = 0.0;  // last stage: summed loss terms of the step; else 0
  std::vector<double> micro_batch_losses;  // last stage: (micro-batches) each one's summed loss terms
  double compute_us = 0.0;  // time in F, B and W on the backend's clock (ComputeTimer), not
                            // counting waits for peers
  double span_us = 0.0;     // first action's start to the end of the last wait or compute
};

enum class Pass { Train, Evaluate };

// One micro-batch on this stage alone under the executor's policy: its
// memory, counted by the same allocator statistics as a run's peaks, and its
// times on the backend's clock (ComputeTimer).
struct MicroBatchProbe {
  size_t stash_bytes = 0;      // kept from F until B (activations)
  size_t transient_bytes = 0;  // peak of everything else during F + B, beyond
                               // the stage input and output-gradient buffers
  size_t workspace_bytes = 0;  // the same peak counting those two buffers
  size_t backward_workspace_bytes = 0;  // workspace_bytes' peak during B alone
  double forward_s = 0.0;      // F; on the first stage with fetching the input
  double backward_s = 0.0;     // B, with its recompute
  double recompute_s = 0.0;    // the recompute inside B (0 unless it recomputes)
};

class Executor {
 public:
  Executor(StageModel& stage, Transport& transport, const Deck& deck, Backend& backend,
           RecomputePolicy policy, Tracer* tracer = nullptr);
  // Several stages on this rank (ascending), each with its policy.
  Executor(std::vector<StageModel*> stages, Transport& transport, const Deck& deck,
           Backend& backend, std::vector<RecomputePolicy> policies, Tracer* tracer = nullptr);
  const RecomputePolicy& policy() const { return policy_; }
  // Runs one micro-batch through this stage alone (no communication) and
  // measures it with `stats` (host or device statistics); `reset_peaks` may
  // be empty. Used by "auto" recomputation and the profiler.
  // `before_each_pass`, when given, runs untimed before the forward and
  // before the backward (the profiler evicts the caches there).
  MicroBatchProbe probe_micro_batch(const Dataset& data, const std::function<MemoryStats()>& stats,
                                    const std::function<void()>& reset_peaks,
                                    const std::function<void()>& before_each_pass = {});
  // fp16: the loss gradient is multiplied by `scale`; overflowing gradients
  // are then expected and left to the loss scaler instead of stopping the run.
  void set_loss_scale(float scale) {
    loss_scale_ = scale;
    loss_scaling_ = true;
  }
  // Fault injection (pipeline.slowdown_*): after each F and B this rank
  // sleeps (factor - 1) x its compute time, so F and B take factor x as long
  // and nothing computed changes. 1 = off.
  void set_compute_slowdown(double factor) { slowdown_ = factor; }
  // Data parallelism: this executor's pipeline is replica `replica` of
  // pipeline.data_parallel; its micro-batch m reads global micro-batch
  // replica * micro_batches + m of each batch (docs/data-parallel.md).
  void set_replica(int replica) { replica_ = replica; }
  // Data-parallel gradient reduction (grad_reducer.hpp): `layer_done` runs
  // when a layer's weight gradients of a micro-batch are complete (end of
  // its B, or of its W with a split backward), `progress` after every action.
  struct ReductionHooks {
    std::function<void(int stage, int mb, size_t layer)> layer_done;
    std::function<void()> progress;
  };
  void set_reduction_hooks(ReductionHooks hooks) { reduction_ = std::move(hooks); }
  // Runs this rank's actions of `schedule` for batch `step` of `data`.
  // Evaluate: forward only, nothing stashed; needs a forward-only schedule.
  StepOutcome run(const Schedule& schedule, const Dataset& data, int64_t step, Pass pass);
  // With set_time_actions(true), every F, B and W of the last run, in the
  // order they ran, on the backend's clock (GPU: kernel time, not launch
  // time; the timer is read once, at the end of the run); empty otherwise.
  void set_time_actions(bool on) { time_actions_ = on; }
  const std::vector<ActionTime>& action_times() const { return action_times_; }

 private:
  // A posted transfer and when it was posted; its completion is recorded as
  // a SEND or RECV event the first time it is observed.
  struct Pending {
    std::unique_ptr<PendingTransfer> transfer;
    Action action;
    double posted_us = 0.0;
    bool done = false;
    explicit operator bool() const { return transfer != nullptr; }
  };
  struct MicroBatch {
    std::vector<Tensor> layer_inputs;              // (layers) input of each layer, when kept
    std::vector<std::vector<Tensor>> layer_saved;  // (layers) extra saved tensors
    Tensor output;                                 // (rows, out) stage output, until sent
    Tensor grad_output;                            // (rows, out) dL/d output
    Tensor grad_input;                             // (rows, in) dL/d input, until sent
    Tensor recv_input;                             // (rows, in) buffer of RECV_F
    std::vector<std::vector<Tensor>> deferred;     // (layers) split backward: W's inputs
    Pending recv_f, recv_b;
    bool forward_done = false;
    bool backward_done = false;
  };
  struct Send {
    Tensor buffer;
    Pending pending;
  };

  void run_action(const Action& a);
  void forward(int mb);
  void receive_forward_input(int mb);  // waits for a peer's input, if F has one
  Tensor forward_input(int mb);
  void run_forward(int mb, Tensor x);
  void run_backward(int mb, Tensor dy);
  Tensor stashed(Tensor t);  // counted as an activation kept for backward
  void recompute_segment(MicroBatch& state, size_t begin, size_t end);
  void backward(int mb);
  void weights(int mb);
  void weights_of_step();  // step_weight_grads_: every micro-batch's W at once
  std::vector<Tensor> stacked_deferred(const std::vector<MicroBatch*>& states, size_t layer);
  Tensor layer_backward(MicroBatch& state, size_t i, Tensor dy, bool need_dx);
  // The stage of this rank that runs `stage` becomes the current one.
  void select(int stage);
  StageModel& cur() { return *stages_[cur_]; }
  const RecomputePolicy& cur_policy() const { return policies_[cur_]; }
  int key(int mb) const { return mb * static_cast<int>(stages_.size()) + static_cast<int>(cur_); }
  bool owns(int stage) const;
  MicroBatch& local_state(int stage, int mb);  // of another stage on this rank
  void post_recv(const Action& a);
  void post_send(const Action& a);
  Pending posted(const Action& a, std::unique_ptr<PendingTransfer> transfer);
  void wait_for(Pending& p);
  bool poll(Pending& p);      // true once complete; records the transfer window
  void poll_receives();       // progress on every posted receive
  double compute_begin();     // start of an F/B/W, its waits included: its host time
  // F, B and W are each one region of timer_ (without their waits), read
  // once per run by read_compute_times.
  void start_timing();
  void stop_timing();
  void restart_timer();
  double read_compute_times();  // seconds of every region of the run
  // Ends the compute begun at start_us: one event for micro-batch mb, or for
  // `count` micro-batches from mb on (a W pass), each an equal slice of it.
  void compute_end(EventKind kind, int mb, double start_us, int count = 1);
  const Tracer& clock() const;
  // Frees the buffers of completed sends (all of them, waiting, when
  // wait_all); also called while a receive is waited for.
  void reap_sends(bool wait_all);
  void finish_sends_first();  // the running compute's sends_finished_before
  int tag(int dst_stage, int direction, int mb) const;
  int peer_rank(int stage) const { return stage_rank(*schedule_, stage); }
  std::string describe(const Action& a) const;

  std::vector<StageModel*> stages_;       // this rank's stages, ascending
  std::vector<RecomputePolicy> policies_;  // (stages_)
  size_t cur_ = 0;                         // index in stages_ of the running action
  bool split_ = false;                     // the schedule being run has W actions
  bool step_weight_grads_ = false;         // ... run as one pass per stage (Schedule::step_weight_grads)
  StageModel& stage_;                      // the first of stages_
  Transport& transport_;
  const Deck& deck_;
  Backend& be_;
  RecomputePolicy policy_;
  Tracer* tracer_;            // null: no events recorded
  float loss_scale_ = 1.f;    // 1 unless fp16 loss scaling is on
  bool loss_scaling_ = false;
  double slowdown_ = 1.0;     // compute time factor (fault injection)
  Tracer local_clock_{false}; // times F/B and waits when no tracer is given
  double last_end_us_ = 0.0;
  struct TimedRegion {
    int stage = 0;
    int kind = -1;  // 0 F, 1 B, 2 W, -1 another compute (an evaluation's F)
    int count = 1;  // micro-batches it covers (a W pass of per-step weight gradients: all)
  };
  std::unique_ptr<ComputeTimer> timer_;   // the backend's clock of F, B and W
  std::vector<TimedRegion> timed_;        // (regions of the run so far) what each timed
  bool timing_open_ = false;              // a region of timer_ is open
  size_t unread_regions_ = 0;             // regions begun since the last read of timer_
  std::vector<ActionTime> action_times_;  // of the last run
  bool time_actions_ = false;
  bool probing_ = false;      // probe_micro_batch: synchronise to time the recompute
  double recompute_us_ = 0.0; // recompute time of the last run_backward
  int64_t rows_;  // samples per micro-batch: batch / (micro-batches x replicas)
  int replica_ = 0;  // data-parallel replica of this pipeline
  ReductionHooks reduction_;
  void weights_done(int mb, size_t layer);
  int64_t global_mb(int mb) const {  // data index of local micro-batch mb
    return static_cast<int64_t>(replica_) * deck_.pipeline.micro_batches + mb;
  }  // reduction_.layer_done, when training
  std::vector<double> mb_losses_;  // (micro-batches) last stage
  const Schedule* schedule_ = nullptr;  // of the pass being run
  const Dataset* data_ = nullptr;
  Pass pass_ = Pass::Train;
  int64_t step_ = 0;
  double loss_sum_ = 0.0;
  std::map<int, MicroBatch> mbs_;  // by key(mb): micro-batch and local stage
  std::vector<Send> sends_;
  bool reaping_ = false;  // inside reap_sends: its waits do not reap again
  size_t action_index_ = 0;  // in this rank's list, of the running action
  std::vector<int> finish_first_;       // (actions) sends_finished_before of this rank
  std::vector<std::vector<Action>> finish_rule_for_;  // the schedule finish_first_ was made for
  std::vector<int> finish_placement_for_;             // ... and its placement
};

}  // namespace pt
