// generators.cpp: builds the GPipe and 1F1B schedules, one stage per rank
// (interleaved and zero-bubble schedules: generators_multi.cpp).
//
// Each generator first decides the order of the compute actions (F, B) of a
// stage, then add_communication() inserts the sends and receives:
//
//   Sends    SEND_F(s,m) / SEND_B(s,m) come immediately after the F / B that
//            produced the data, so the peer can start as early as possible.
//   Receives a RECV_F / RECV_B is posted one compute ahead of its consumer:
//            just before the compute action that precedes the consuming F / B
//            on the rank (after that preceding compute's send), or at the very
//            beginning when the consumer is the rank's first compute.
//            Exception: RECV_B(s,m) is never posted before F(s,m) has run
//            (it lands right after F(s,m) and its SEND_F instead), so a
//            gradient receive never exists for a micro-batch whose activations
//            do not exist yet. Receives posted at the same point appear in the
//            order of their consumers.
// Posting never blocks and every receive precedes its consumer, so this
// placement adds overlap without changing which orders deadlock.
//
// Backward always runs in ascending micro-batch order on every stage, so the
// gradient accumulation order (and therefore the bits) is the same for every
// schedule.
#include <algorithm>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

namespace {

void check_sizes(const std::string& name, int num_stages, int num_micro_batches) {
  if (num_stages < 1 || num_micro_batches < 1) {
    throw InputError("schedule '" + name + "' needs at least 1 stage and 1 micro-batch (got " +
                     std::to_string(num_stages) + " stages, " +
                     std::to_string(num_micro_batches) + " micro-batches)");
  }
}

// GPipe (fill-drain): F0 .. F(N-1), then B0 .. B(N-1).
std::vector<Action> gpipe_compute(int stage, int num_micro_batches) {
  std::vector<Action> order;
  for (int m = 0; m < num_micro_batches; ++m) order.push_back(make_action(stage, ActionKind::F, m));
  for (int m = 0; m < num_micro_batches; ++m) order.push_back(make_action(stage, ActionKind::B, m));
  return order;
}

// 1F1B (PipeDream-flush). Exact rule for stage s of P with N micro-batches:
//   w = min(P - s, N) warm-up forwards F0 .. F(w-1);
//   then for k = 0 .. N-1: B(k), followed by F(w + k) while w + k < N.
// So the stage holds at most w micro-batches in flight (F done, B not yet),
// the last stage alternates F0 B0 F1 B1 ..., and the tail is the cool-down of
// backwards. (This equals the classic "P-s-1 warm-up forwards, then F,B
// pairs" form, counting the first steady F as the w-th warm-up forward.)
std::vector<Action> one_f_one_b_compute(int stage, int num_stages, int num_micro_batches) {
  int warmup = std::min(num_stages - stage, num_micro_batches);
  std::vector<Action> order;
  for (int m = 0; m < warmup; ++m) order.push_back(make_action(stage, ActionKind::F, m));
  for (int k = 0; k < num_micro_batches; ++k) {
    order.push_back(make_action(stage, ActionKind::B, k));
    if (warmup + k < num_micro_batches) {
      order.push_back(make_action(stage, ActionKind::F, warmup + k));
    }
  }
  return order;
}

bool needs_receive(const Action& a, int num_stages) {
  if (a.kind == ActionKind::F) return a.stage > 0;
  return a.kind == ActionKind::B && a.stage < num_stages - 1;
}

bool needs_send(const Action& a, int num_stages) {
  if (a.kind == ActionKind::F) return a.stage < num_stages - 1;
  return a.kind == ActionKind::B && a.stage > 0;
}

Action receive_for(const Action& a) {
  return make_action(a.stage, a.kind == ActionKind::F ? ActionKind::RECV_F : ActionKind::RECV_B, a.mb);
}

Action send_for(const Action& a) {
  return make_action(a.stage, a.kind == ActionKind::F ? ActionKind::SEND_F : ActionKind::SEND_B, a.mb);
}

// Position of each micro-batch's F in the compute order (-1 when absent),
// so that placing every receive stays linear in the number of actions.
std::vector<int> forward_positions(const std::vector<Action>& compute, int num_micro_batches) {
  std::vector<int> position(static_cast<size_t>(num_micro_batches), -1);
  for (size_t i = 0; i < compute.size(); ++i) {
    if (compute[i].kind == ActionKind::F) position[compute[i].mb] = static_cast<int>(i);
  }
  return position;
}

// Index of the compute action before which the receive for compute[i] is
// posted (see the placement rule at the top of this file).
int receive_slot(const std::vector<Action>& compute, const std::vector<int>& forward_at, int i) {
  int slot = std::max(i - 1, 0);
  if (compute[i].kind == ActionKind::B) {
    const int forward = forward_at[compute[i].mb];
    PT_CHECK(forward >= 0, "no forward of micro-batch " + std::to_string(compute[i].mb) +
                               " in the compute order");
    slot = std::max(slot, forward + 1);
  }
  return slot;
}

// Receives grouped by the compute action they are posted before, in the
// order of their consumers (a counting sort: first[i] .. first[i + 1] - 1
// index the receives posted before compute[i]).
struct ReceivePlan {
  std::vector<int> first;
  std::vector<Action> receives;
};

ReceivePlan place_receives(const std::vector<Action>& compute, int num_stages,
                           int num_micro_batches) {
  const int n = static_cast<int>(compute.size());
  const std::vector<int> forward_at = forward_positions(compute, num_micro_batches);
  std::vector<int> slot_of(n, -1);
  ReceivePlan plan;
  plan.first.assign(n + 1, 0);
  for (int i = 0; i < n; ++i) {
    if (!needs_receive(compute[i], num_stages)) continue;
    slot_of[i] = receive_slot(compute, forward_at, i);
    ++plan.first[slot_of[i] + 1];
  }
  for (int i = 0; i < n; ++i) plan.first[i + 1] += plan.first[i];
  plan.receives.resize(plan.first[n]);
  std::vector<int> next(plan.first.begin(), plan.first.end() - 1);
  for (int i = 0; i < n; ++i)
    if (slot_of[i] >= 0) plan.receives[next[slot_of[i]]++] = receive_for(compute[i]);
  return plan;
}

std::vector<Action> add_communication(const std::vector<Action>& compute, int num_stages,
                                      int num_micro_batches) {
  const int n = static_cast<int>(compute.size());
  const ReceivePlan plan = place_receives(compute, num_stages, num_micro_batches);
  std::vector<Action> actions;
  actions.reserve(2 * compute.size() + plan.receives.size());
  for (int i = 0; i < n; ++i) {
    for (int r = plan.first[i]; r < plan.first[i + 1]; ++r) actions.push_back(plan.receives[r]);
    actions.push_back(compute[i]);
    if (needs_send(compute[i], num_stages)) actions.push_back(send_for(compute[i]));
  }
  return actions;
}

Schedule empty_schedule(const std::string& name, int num_stages, int num_micro_batches) {
  Schedule s;
  s.name = name;
  s.num_stages = num_stages;
  s.num_micro_batches = num_micro_batches;
  s.num_ranks = num_stages;
  return s;
}

}  // namespace

Schedule generate_gpipe(int num_stages, int num_micro_batches) {
  check_sizes("gpipe", num_stages, num_micro_batches);
  Schedule s = empty_schedule("gpipe", num_stages, num_micro_batches);
  for (int stage = 0; stage < num_stages; ++stage) {
    s.ranks.push_back(add_communication(gpipe_compute(stage, num_micro_batches), num_stages,
                                           num_micro_batches));
  }
  return s;
}

Schedule generate_1f1b(int num_stages, int num_micro_batches) {
  check_sizes("1f1b", num_stages, num_micro_batches);
  Schedule s = empty_schedule("1f1b", num_stages, num_micro_batches);
  for (int stage = 0; stage < num_stages; ++stage) {
    std::vector<Action> compute = one_f_one_b_compute(stage, num_stages, num_micro_batches);
    s.ranks.push_back(add_communication(compute, num_stages, num_micro_batches));
  }
  return s;
}

int stages_per_rank(ScheduleKind kind, int virtual_stages) {
  if (kind == ScheduleKind::Interleaved || kind == ScheduleKind::File) return virtual_stages;
  return kind == ScheduleKind::ZbV ? 2 : 1;
}

int stages_per_rank(const std::string& name, int virtual_stages) {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  return parse_kind(name, kind) ? stages_per_rank(kind, virtual_stages) : 1;
}

bool schedule_takes_times(ScheduleKind kind) { return kind == ScheduleKind::ZbH1 || kind == ScheduleKind::ZbV; }

bool schedule_takes_times(const std::string& name) {
  ScheduleKind kind = ScheduleKind::File;
  return parse_kind(name, kind) && schedule_takes_times(kind);
}

namespace {

[[noreturn]] void unknown_schedule(const std::string& name) {
  throw InputError("unknown schedule '" + name +
                   "'; expected 'gpipe', '1f1b', 'interleaved', 'zb-h1' or 'zb-v'");
}

}  // namespace

Schedule generate_schedule(ScheduleKind kind, int num_ranks, int num_micro_batches, int virtual_stages,
                           const StageActionTimes& times, double w_slack) {
  PT_CHECK(times.empty() || schedule_takes_times(kind),
           "schedule '" + std::string(kind_name(kind)) + "' is not generated from action times");
  switch (kind) {
    case ScheduleKind::GPipe: return generate_gpipe(num_ranks, num_micro_batches);
    case ScheduleKind::OneFOneB: return generate_1f1b(num_ranks, num_micro_batches);
    case ScheduleKind::Interleaved: return generate_interleaved(num_ranks, virtual_stages, num_micro_batches);
    case ScheduleKind::ZbH1: return generate_zb_h1(num_ranks, num_micro_batches, times, w_slack);
    case ScheduleKind::ZbV: return generate_zb_v(num_ranks, num_micro_batches, times, w_slack);
    case ScheduleKind::File: break;  // read from its file, not generated
  }
  unknown_schedule(kind_name(kind));
}

Schedule generate_schedule(const std::string& name, int num_ranks, int num_micro_batches,
                           int virtual_stages, const StageActionTimes& times, double w_slack) {
  ScheduleKind kind = ScheduleKind::File;
  if (!parse_kind(name, kind)) unknown_schedule(name);
  return generate_schedule(kind, num_ranks, num_micro_batches, virtual_stages, times, w_slack);
}

Schedule forward_only_schedule(const Schedule& training) {
  Schedule eval = training;
  eval.name = training.name + " (forward only)";
  eval.forward_only = true;
  for (std::vector<Action>& rank : eval.ranks) {
    std::vector<Action> kept;
    for (const Action& a : rank)
      if (a.kind == ActionKind::F || a.kind == ActionKind::SEND_F || a.kind == ActionKind::RECV_F)
        kept.push_back(a);
    rank = kept;
  }
  eval.step_weight_grads = false;
  return eval;
}

Schedule with_step_weight_grads(const Schedule& schedule) {
  if (schedule.forward_only)
    throw InputError("schedule '" + schedule.name + "' is forward-only; it has no weight gradients");
  if (splits_backward(schedule))
    throw InputError("schedule '" + schedule.name + "' places its own W actions (a split backward " +
                     "that fills the bubble with weight gradients); per-step weight gradients " +
                     "need a schedule without W, such as gpipe, 1f1b or interleaved");
  Schedule s = schedule;
  s.step_weight_grads = true;
  for (int r = 0; r < s.num_ranks; ++r) {
    const std::vector<int> owned = rank_stages(s, r);
    for (auto st = owned.rbegin(); st != owned.rend(); ++st)
      for (int mb = 0; mb < s.num_micro_batches; ++mb)
        s.ranks[static_cast<size_t>(r)].push_back(make_action(*st, ActionKind::W, mb));
  }
  return s;
}

}  // namespace pt
