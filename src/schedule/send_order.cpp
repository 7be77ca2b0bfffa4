// send_order.cpp: which of a rank's own sends a compute action finishes
// before it starts (docs/schedules.md, "Sends finished before a compute").
//
// A send holds its buffer until the receiver has taken the message, and with
// MPI the receiver takes it only when it is inside an MPI call. Whether a
// stage's finished activation is still held when its next B allocates then
// depends on which rank was late by a few microseconds, so the peak memory of
// a run would change from step to step. The rule below removes that race
// where it costs only one message's copy: compute C on rank R, whose input M
// comes from rank X, also waits for R's earlier sends to X that X's next
// compute after sending M consumes. X goes from sending M straight into the
// wait for that send (only posts lie between), so it is taking the message
// while R waits; no wait depends on anything else, so the rule cannot
// deadlock a schedule the validator accepts. The executor and the planner's
// simulator both take the rule from here, so they cannot drift apart.
#include <vector>

#include "pipetrain/schedule/schedule.hpp"

namespace pt {

namespace {

constexpr int kKinds = 7;

// The remote message compute `c` consumes, as its send action; false when
// its input is local or it has none (W, the first stage's F, the last
// stage's B).
bool remote_input(const Schedule& s, const Action& c, Action& send) {
  if (c.kind != ActionKind::F && c.kind != ActionKind::B) return false;
  const bool forward = c.kind == ActionKind::F;
  const int from = forward ? c.stage - 1 : c.stage + 1;
  if (from < 0 || from >= s.num_stages || stage_rank(s, from) == stage_rank(s, c.stage)) return false;
  send = make_action(from, forward ? ActionKind::SEND_F : ActionKind::SEND_B, c.mb);
  return true;
}

// Where each action stands in its rank's list (every action lives on its
// stage's rank); -1 for one the schedule lacks. One flat table: the planner
// simulates schedules of a million micro-batch stages.
class Positions {
 public:
  explicit Positions(const Schedule& s)
      : s_(s), index_(static_cast<size_t>(s.num_stages) * static_cast<size_t>(s.num_micro_batches) * kKinds, -1) {
    for (const std::vector<Action>& list : s.ranks)
      for (size_t i = 0; i < list.size(); ++i)
        if (const size_t k = slot(list[i]); k < index_.size() && &list == &s.ranks[rank_of(list[i])])
          index_[k] = static_cast<int>(i);  // an action on another rank's list: the validator reports it
  }
  size_t rank_of(const Action& a) const {
    const int r = a.stage >= 0 && a.stage < s_.num_stages ? stage_rank(s_, a.stage) : -1;
    return r >= 0 && static_cast<size_t>(r) < s_.ranks.size() ? static_cast<size_t>(r) : s_.ranks.size() - 1;
  }
  int of(const Action& a) const {
    const size_t k = slot(a);
    return k < index_.size() ? index_[k] : -1;
  }

 private:
  size_t slot(const Action& a) const {
    if (a.stage < 0 || a.stage >= s_.num_stages || a.mb < 0 || a.mb >= s_.num_micro_batches)
      return index_.size();
    return (static_cast<size_t>(a.stage) * static_cast<size_t>(s_.num_micro_batches) +
            static_cast<size_t>(a.mb)) * kKinds + static_cast<size_t>(a.kind);
  }
  const Schedule& s_;
  std::vector<int> index_;  // (stages, micro-batches, kinds)
};

// For compute `c` at `index` on `rank`: the index of the rank's send that it
// finishes first, or -1.
int send_finished_before(const Schedule& s, const Positions& at, int rank, int index, const Action& c) {
  Action input_send;
  if (!remote_input(s, c, input_send)) return -1;
  const int sent_at = at.of(input_send);
  if (sent_at < 0) return -1;  // the validator reports it
  const std::vector<Action>& peer = s.ranks[static_cast<size_t>(stage_rank(s, input_send.stage))];
  size_t next = static_cast<size_t>(sent_at) + 1;
  while (next < peer.size() && !is_compute(peer[next].kind)) ++next;
  Action ours;
  if (next >= peer.size() || !remote_input(s, peer[next], ours) || stage_rank(s, ours.stage) != rank)
    return -1;
  const int mine = at.of(ours);
  return mine < index ? mine : -1;
}

}  // namespace

std::vector<std::vector<int>> sends_finished_before(const Schedule& s) {
  const Positions at(s);
  std::vector<std::vector<int>> finish(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r) {
    const std::vector<Action>& list = s.ranks[r];
    finish[r].assign(list.size(), -1);
    for (size_t i = 0; i < list.size(); ++i)
      finish[r][i] = send_finished_before(s, at, static_cast<int>(r), static_cast<int>(i), list[i]);
  }
  return finish;
}

}  // namespace pt
