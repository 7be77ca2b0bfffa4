// simulate.hpp: a discrete-event simulation of one training step of any
// schedule (generated or hand-written), with the executor's semantics
// (schedule.hpp, runtime/executor.cpp):
//   - each rank runs its actions in list order, one at a time;
//   - posting SEND_* or RECV_* takes no time and never blocks; a transfer
//     starts when both its send and its receive are posted (rendezvous, as
//     MPI does for messages above its eager limit and NCCL always does) or,
//     with receiver_progress, at the end of the receiver's compute that
//     moment falls in; the message arrives link.time_s(bytes) later, and the
//     send completes at the same moment (until then it holds its buffer);
//   - F(s, m) starts when the rank is free and its input is there: the data
//     on stage 0, the arrival of SEND_F(s-1, m), or the end of F(s-1, m) when
//     stage s-1 lives on the same rank; it lasts stages[s].forward_s;
//   - B(s, m) likewise waits for SEND_B(s+1, m) (B(s+1, m) on the same rank;
//     nothing on the last stage, which starts from the loss) and lasts
//     stages[s].backward_s (recompute included);
//   - an F or B also waits for the arrival of the rank's own earlier send
//     that sends_finished_before (schedule.hpp) names, as the executor does;
//   - with a split backward (W actions) W(s, m) follows B(s, m) on its rank
//     and lasts w = weight_grad_share x (backward_s - recompute_s), B the
//     rest (backward_s - w): the weight-gradient products are half the
//     products of a backward (dW = dy^T x beside dx = dy W; the GPT's
//     attention products, without weights, stay in B, so a block's share is
//     a little below one half);
//   - a rank's span ends at its last compute or its last send's completion,
//     whichever is later (the executor waits for every send at the end).
// Step time = the longest span + step overhead + the longest optimizer step,
// as run_training_step runs them (the reductions after the schedule wait
// for the slowest rank). The bubble is StepCollectives::measured_bubble's: the mean
// over ranks of 1 - busy / longest span. Memory: per stage, the bytes at the
// start of every F, B and W (base + in flight x stash + that action's
// transient + posted receive buffers not consumed + incomplete sends),
// maximised over the step; a micro-batch is in flight from its F
// to its B, or to its W with a split backward (counting the whole stash until
// W: an upper bound, since after B only W's inputs remain).
#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/plan/cost.hpp"
#include "pipetrain/plan/stage_cost.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

struct SimulationInput {
  std::vector<StageCost> stages;  // one per stage of the schedule
  // The link between stage s and s + 1 (num_stages - 1 entries), or one
  // entry for every link.
  std::vector<LinkCost> links;
  double step_overhead_s = 0.0;  // loss, norm, clip reductions per step
  int64_t batch_size = 0;        // samples per step, for the throughput
  bool record_events = true;     // fill SimulationResult::events
  double weight_grad_share = 0.5;  // W's share of a backward without recompute
  // The receiving rank moves a message only between its own computes (MPI
  // on the CPU: the receiver copies it when it tests or waits for the
  // receive, after an action or while idle), so a transfer whose send and
  // receive are both posted while the receiver computes starts when that
  // compute ends. false: links progress on their own (NCCL's kernels).
  bool receiver_progress = false;
  // Per action, when non-empty: the seconds of F, B and W of every (stage,
  // micro-batch), (num_stages, num_micro_batches, 3) flattened, replacing
  // the stages' per-micro-batch times (a replay of a traced step).
  std::vector<double> action_seconds = {};
  // (stages) seconds of each stage's whole pass of weight gradients in a
  // schedule with per-step weight gradients (Schedule::step_weight_grads),
  // each of its N W actions taking 1/N of it; empty: every W its
  // per-micro-batch time (an upper bound: the pass's GEMMs span all rows).
  std::vector<double> step_weight_s = {};
};

// One action on the simulated timeline. F, B, W: compute. SEND_*: posted at
// start, completed at end. RECV_*: posted at start; end is the data's
// arrival (or start, if it had arrived before the post).
struct SimEvent {
  Action action;
  double start_s = 0.0;
  double end_s = 0.0;
};

struct SimulationResult {
  // Per rank (stage s lives on rank s % num_ranks; one stage per rank for
  // the generated schedules).
  std::vector<double> busy_s;  // F + B (+ W) time
  std::vector<double> span_s;  // 0 to its last compute or send completion
  std::vector<double> idle_s;  // longest span - busy
  std::vector<std::vector<SimEvent>> events;  // in list order (record_events)
  double span_s_max = 0.0;
  double optimizer_s = 0.0;  // the longest stage optimizer step (stages on a rank add up)
  double step_time_s = 0.0;
  double bubble = 0.0;
  double throughput_samples_per_s = 0.0;  // 0 without a batch size
  // Per stage.
  std::vector<int> peak_in_flight;     // micro-batches with F started, B (W when split) not ended
  std::vector<double> peak_bytes;
};

// Throws InputError when the inputs do not fit the schedule, or the
// schedule deadlocks or misses an action (it names the stuck actions).
SimulationResult simulate_schedule(const Schedule& schedule, const SimulationInput& input);

// Per stage, the most micro-batches with F done and B (W when split) not yet,
// counting each rank's list in order: validate_schedule's peak_in_flight in
// O(actions), for callers that skip the validator on known-valid generated
// schedules.
std::vector<int> schedule_in_flight(const Schedule& schedule);

// The schedule's theoretical bubble: simulated with every stage's F taking 1,
// B 2 (B 1 and W 1 when split), free links and no optimizer.
double unit_time_bubble(const Schedule& schedule);
// The bubble a schedule's theory promises: unit_time_bubble of the schedule,
// or, for one generated at measured action times (Schedule::timed), of the
// unit-time schedule of the same name, which is what the papers state.
double theory_bubble(const Schedule& schedule);

// What one stage's actions cost, in seconds per micro-batch: B with its
// recomputation, W (0 without a split backward) apart from it.
struct ActionCost {
  double forward_s = 0.0;
  double backward_s = 0.0;
  double weight_s = 0.0;
};

// The schedule's bubble when every stage's F, B and W take the given times
// (one entry per stage), with free links and no optimizer: the bubble the
// schedule itself implies for a model whose actions cost that. With a run's
// measured costs (median_action_costs) it separates what the schedule and
// the model's uneven actions leave idle from what the runtime adds.
double bubble_at_costs(const Schedule& schedule, const std::vector<ActionCost>& costs);

// The schedule's bubble when every action takes its own time: seconds of
// F, B and W per (stage, micro-batch), (num_stages, num_micro_batches, 3)
// flattened (W 0 without a split backward), with free links and no
// optimizer. Replaying a traced step at the times its actions took
// (replay_traced_steps) separates what the spread of action times leaves
// idle (replay - bubble_at_costs at the medians) from what the runtime's
// messages and progress add (measured - replay).
double bubble_at_action_times(const Schedule& schedule, const std::vector<double>& seconds);

// W's seconds of stage `c`'s split backward as the simulator times it: its
// weight_s when measured, else weight_grad_share of the backward without
// recomputation.
double split_weight_s(const StageCost& c, double weight_grad_share);
// Per stage, the (F, B, W) seconds the simulator gives a schedule that
// splits the backward, from `input`'s stage costs: the times a run would
// measure, as far as the costs predict them (the planner places zb-h1 and
// zb-v at them, as the run places them at its measured ones).
StageActionTimes split_action_times(const SimulationInput& input);

// Per-stage (F, B, W) times as the simulator's action costs.
std::vector<ActionCost> action_costs(const StageActionTimes& times);

// pipeline.schedule_times = "measured": schedule `name` (zb-h1 or zb-v)
// placed for the given per-stage F, B, W times. The candidates are the
// unit-time schedule and the list scheduler at those times with each of
// kTimedPlacementSlacks (the distinct ones), each also improved by the local
// search of plan/placement_search.hpp (and validated under MPI and NCCL
// semantics). The one with the smallest bubble_at_costs at the times
// replaces the unit-time schedule only when it simulates at least
// kMinPlacementGain (0.005 as a bubble fraction: half a point of bubble)
// less; otherwise the unit-time one is kept and Schedule::timed is false.
// The times are medians of two steps, and a gain below that is within what
// they move later in a run (docs/schedules.md).
// Every candidate runs F, B and W of a stage in micro-batch order, so the
// choice never changes a result, only when actions run.
extern const std::vector<double> kTimedPlacementSlacks;
extern const double kMinPlacementGain;
struct TimedPlacement {
  Schedule schedule;          // the winner
  double unit_bubble = 0.0;   // bubble_at_costs of the unit-time schedule at the times
  double timed_bubble = 0.0;  // the best other candidate's (unit_bubble when none is better)
  double bubble = 0.0;        // bubble_at_costs of the winner at the times
};
TimedPlacement generate_at_times(const std::string& name, int num_ranks, int num_micro_batches,
                                 const StageActionTimes& times);

}  // namespace pt
