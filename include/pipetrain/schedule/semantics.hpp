// semantics.hpp: the one model of what a schedule means for a stage, shared
// by the validator, the simulator (plan/simulate), the trainer and the
// planner's memory (plan/stage_cost); tools/trace_report.py mirrors
// bubble_of (tests/tools checks it against the same hand cases).
//   in flight  a micro-batch is in flight on a stage from the start of its F
//              to the end of the action that frees its stash: its B, or its W
//              when the schedule splits the backward (B keeps the weight
//              products' inputs until W); pending W: from B to W
//   bubble     per step, the mean over ranks of 1 - busy / span, where span
//              is the longest rank's span of the step (0 for a rank when the
//              span is 0) and busy the rank's compute time without waits
//   peak       a stage's peak bytes = fixed (parameters, gradients, optimizer
//              state, cached data, message buffers) + in flight x stash per
//              micro-batch + the transient of the one micro-batch computed
//   needs      F(s, m) uses the output of F(s-1, m); B(s, m) uses F(s, m)'s
//              stash and the gradient of B(s+1, m); W(s, m) uses what
//              B(s, m) left. An output of a stage on another rank arrives by
//              that stage's SEND_F or SEND_B; on the same rank, directly
#pragma once

#include <array>
#include <vector>

#include "pipetrain/schedule/schedule.hpp"

namespace pt {

// The action that ends a micro-batch's time in flight: W when `s` splits the
// backward, else B.
ActionKind stash_release(const Schedule& s);

// The compute actions whose results compute action `a` uses ("needs"
// above), its own stage's first; none for a send or a receive. The one
// statement of the dependency rule: the validator, the simulator and the
// zero-bubble list scheduler all ask it.
class Prerequisites {
 public:
  Prerequisites(const Action& a, int num_stages);
  const Action* begin() const { return actions_.data(); }
  const Action* end() const { return actions_.data() + count_; }
  // The one from a neighbouring stage (F(s-1) or B(s+1)), or nullptr.
  const Action* from_other_stage(const Action& a) const;

 private:
  std::array<Action, 2> actions_{};
  int count_ = 0;
};

// How prerequisite `p` of an action of stage `consumer_stage` reaches it:
// p itself when both stages live on one rank, else p's send (SEND_F for an
// F, SEND_B for a B).
Action delivery_of(const Schedule& s, const Action& p, int consumer_stage);

// Counts micro-batches in flight per stage as a schedule's actions run (in
// any order that keeps each stage's F, B and W in their order), with peaks.
class InFlightCounter {
 public:
  explicit InFlightCounter(const Schedule& s);
  // The same for a schedule of `num_stages` stages whose backward is split
  // (splits_backward) or not, known already: splits_backward reads every
  // action, so a caller that counts per rank (the simulator) passes it.
  InFlightCounter(int num_stages, bool split);
  // Before `a` runs: an F enters its micro-batch (and a B, when split, its
  // pending W). Returns the stage's count while `a` runs.
  int enter(const Action& a);
  // After `a` runs: the releasing action leaves.
  void leave(const Action& a);
  // enter, then leave: for counting alone.
  void run(const Action& a) {
    enter(a);
    leave(a);
  }
  const std::vector<int>& peak_in_flight() const { return peak_; }
  const std::vector<int>& peak_pending_w() const { return peak_pending_; }

 private:
  bool split_;
  std::vector<int> now_, peak_, pending_, peak_pending_;
};

// Peaks of a schedule's lists counted in rank order (each list is one rank's
// order, and a stage lives on one rank): ScheduleReport's peak_in_flight and
// peak_pending_w. Actions of stages outside [0, num_stages) are skipped.
InFlightCounter count_in_flight(const Schedule& s);

// The bubble of one step from each rank's busy time and span (any unit).
double bubble_of(const std::vector<double>& busy, const std::vector<double>& span);

// A stage's peak bytes (the memory model above), summed in this order.
inline double stage_peak_bytes(double fixed, double in_flight, double stash, double transient) {
  return fixed + in_flight * stash + transient;
}

}  // namespace pt
