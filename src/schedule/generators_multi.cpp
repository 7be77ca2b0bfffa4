// generators_multi.cpp: schedules with several stages per rank or a split
// backward: interleaved 1F1B, ZB-H1 and ZB-V.
//
// Interleaved 1F1B follows Megatron-LM's virtual pipeline order (a closed
// formula, below). ZB-H1 and ZB-V are built by a list scheduler that runs
// the pipeline in unit time (F = B = W = 1, messages arrive at once): each
// idle rank starts, among the actions whose inputs are ready, a B first (the
// critical path), else an F if its in-flight limit allows, else a W (which
// only fills time the rank would otherwise idle). ZB-H1 keeps 1F1B's order
// of F and B on every stage and inserts the W; its limit is min(P, N)
// micro-batches between F and W on every stage, 1F1B's peak (stage 0's), so
// the last stages hold more than under 1F1B and defer their W into the
// cool-down; its bubble is then (P-1)/(3N+P-1) in unit time for N >= P,
// a third of 1F1B's time lost. ZB-V chooses F and B freely (the later
// stage first), at most 2P stage micro-batches per rank between F and W:
// 1F1B's peak, as each of its stages is half a 1F1B stage. F, B and W each run in
// ascending micro-batch order on every stage, so every parameter's gradient
// is accumulated in the order of a single process and the results are bitwise
// the same.
//
// Given per-stage action times (pipeline.schedule_times = "measured"), the
// same scheduler runs event by event at those durations instead of unit
// steps, optionally keeping a rank free for an F or B that is about to be
// ready (w_slack). At real times ZB-V can stall (a rank's limit filled by
// its earlier stage); the placement is then made again keeping a slot for
// the later stage.
//
// with_communication() then inserts sends and receives for any
// placement: a send right after the compute that produced its data; a
// receive one compute ahead of its consumer (RECV_B not before F of its
// micro-batch), moved earlier where needed so that the receives of every
// rank pair arrive in the order of the peer's sends (NCCL matches by order).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {

namespace {

void check_sizes(const std::string& name, int num_ranks, int num_micro_batches) {
  if (num_ranks < 1 || num_micro_batches < 1)
    throw InputError("schedule '" + name + "' needs at least 1 rank and 1 micro-batch (got " +
                     std::to_string(num_ranks) + " ranks, " +
                     std::to_string(num_micro_batches) + " micro-batches)");
}

Schedule empty_schedule(const std::string& name, int num_ranks, int num_stages, int mbs) {
  Schedule s;
  s.name = name;
  s.num_stages = num_stages;
  s.num_micro_batches = mbs;
  s.num_ranks = num_ranks;
  s.ranks.assign(static_cast<size_t>(num_ranks), {});
  return s;
}

// ---- communication for any placement ----

bool is_local(const Schedule& s, int stage_a, int stage_b) {
  return stage_rank(s, stage_a) == stage_rank(s, stage_b);
}

bool needs_receive(const Schedule& s, const Action& a) {
  if (a.kind == ActionKind::F) return a.stage > 0 && !is_local(s, a.stage, a.stage - 1);
  return a.kind == ActionKind::B && a.stage < s.num_stages - 1 &&
         !is_local(s, a.stage, a.stage + 1);
}

bool needs_send(const Schedule& s, const Action& a) {
  if (a.kind == ActionKind::F)
    return a.stage < s.num_stages - 1 && !is_local(s, a.stage, a.stage + 1);
  return a.kind == ActionKind::B && a.stage > 0 && !is_local(s, a.stage, a.stage - 1);
}

// A receive to place on rank `rank`: before compute index `slot`, for the
// compute at `consumer`, k-th on its channel in the order of the peer's sends.
struct PlacedReceive {
  Action action;
  int slot = 0, consumer = 0, channel = 0, k = 0;
};

// (stage, kind, mb) of the data a receive gets: the sender's compute.
std::tuple<int, int, int> sender_key(const Action& consumer) {
  if (consumer.kind == ActionKind::F) return {consumer.stage - 1, 0, consumer.mb};
  return {consumer.stage + 1, 1, consumer.mb};
}

// Position, on its rank, of every compute action (stage, kind F=0/B=1, mb).
std::map<std::tuple<int, int, int>, int> compute_positions(
    const std::vector<std::vector<Action>>& compute) {
  std::map<std::tuple<int, int, int>, int> at;
  for (const std::vector<Action>& rank : compute)
    for (int i = 0; i < static_cast<int>(rank.size()); ++i) {
      const Action& a = rank[i];
      if (a.kind == ActionKind::F || a.kind == ActionKind::B)
        at[{a.stage, a.kind == ActionKind::F ? 0 : 1, a.mb}] = i;
    }
  return at;
}

std::vector<PlacedReceive> place_rank_receives(const Schedule& s,
                                               const std::vector<std::vector<Action>>& compute,
                                               const std::map<std::tuple<int, int, int>, int>& at,
                                               int rank) {
  const std::vector<Action>& mine = compute[rank];
  std::map<int, std::vector<PlacedReceive>> by_channel;  // by sending rank
  for (int i = 0; i < static_cast<int>(mine.size()); ++i) {
    const Action& a = mine[i];
    if (!needs_receive(s, a)) continue;
    PlacedReceive r;
    r.action = make_action(a.stage, a.kind == ActionKind::F ? ActionKind::RECV_F : ActionKind::RECV_B, a.mb);
    r.consumer = i;
    r.slot = std::max(i - 1, 0);
    if (a.kind == ActionKind::B) r.slot = std::max(r.slot, at.at({a.stage, 0, a.mb}) + 1);
    const auto key = sender_key(a);
    const int peer = stage_rank(s, std::get<0>(key));
    r.channel = peer;  // NCCL: one channel per sender rank, activations and gradients alike
    r.k = at.at(key);  // the sender's position orders the channel
    by_channel[r.channel].push_back(r);
  }
  std::vector<PlacedReceive> all;
  for (auto& [channel, list] : by_channel) {
    std::sort(list.begin(), list.end(),
              [](const PlacedReceive& x, const PlacedReceive& y) { return x.k < y.k; });
    // A receive is posted no later than any receive after it on its channel.
    for (size_t j = list.size(); j-- > 1;) {
      list[j - 1].slot = std::min(list[j - 1].slot, list[j].slot);
      list[j - 1].consumer = std::min(list[j - 1].consumer, list[j].consumer);
    }
    all.insert(all.end(), list.begin(), list.end());
  }
  std::sort(all.begin(), all.end(), [](const PlacedReceive& x, const PlacedReceive& y) {
    return std::tie(x.slot, x.consumer, x.channel, x.k) <
           std::tie(y.slot, y.consumer, y.channel, y.k);
  });
  return all;
}

// ---- interleaved 1F1B ----

// Megatron-LM's order on rank r of P with v chunks and N = g P micro-batches:
// the k-th forward is chunk (k / P) % v, micro-batch (k / (P v)) P + k % P;
// the k-th backward the same with the chunks reversed. Rank r runs
// min(2 (P - r - 1) + (v - 1) P, N v) warm-up forwards, then alternates one
// forward and one backward, then drains the backwards.
std::vector<Action> interleaved_compute(int rank, int ranks, int chunks, int mbs) {
  const int total = mbs * chunks;
  auto forward = [&](int k) {
    const int chunk = (k / ranks) % chunks;
    return make_action(chunk * ranks + rank, ActionKind::F, (k / (ranks * chunks)) * ranks + k % ranks);
  };
  auto backward = [&](int k) {
    const int chunk = chunks - 1 - (k / ranks) % chunks;
    return make_action(chunk * ranks + rank, ActionKind::B, (k / (ranks * chunks)) * ranks + k % ranks);
  };
  const int warmup = std::min(2 * (ranks - rank - 1) + (chunks - 1) * ranks, total);
  std::vector<Action> order;
  for (int k = 0; k < warmup; ++k) order.push_back(forward(k));
  for (int k = 0; k < total - warmup; ++k) {
    order.push_back(forward(warmup + k));
    order.push_back(backward(k));
  }
  for (int k = std::max(total - warmup, 0); k < total; ++k) order.push_back(backward(k));
  return order;
}

// 1F1B's order of F and B on stage s of P (generators.cpp): min(P - s, N)
// warm-up forwards, then one B and the next F, then the remaining B.
std::vector<Action> one_f_one_b_order(int stage, int stages, int mbs) {
  const int warmup = std::min(stages - stage, mbs);
  std::vector<Action> order;
  for (int m = 0; m < warmup; ++m) order.push_back(make_action(stage, ActionKind::F, m));
  for (int k = 0; k < mbs; ++k) {
    order.push_back(make_action(stage, ActionKind::B, k));
    if (warmup + k < mbs) order.push_back(make_action(stage, ActionKind::F, warmup + k));
  }
  return order;
}

// ---- the list scheduler (ZB-H1, ZB-V), in unit time or at given costs ----

std::vector<std::array<double, 3>> checked_times(const std::string& name, const StageActionTimes& times,
                                                 int stages) {
  if (times.empty()) return {};
  PT_CHECK(static_cast<int>(times.size()) == stages,
           "schedule '" + name + "' at given costs needs one (F, B, W) per stage: " +
               std::to_string(stages) + " stages, " + std::to_string(times.size()) + " given");
  for (const auto& t : times)
    for (double c : t) PT_CHECK(c > 0.0 && std::isfinite(c), "schedule '" + name + "': action times must be positive");
  return times;
}

struct ListPolicy {
  // Most micro-batches between F and W: per stage, or per rank when
  // rank_limit > 0.
  std::vector<int> stage_limit;
  int rank_limit = 0;
  // Per stage, a fixed order of its F and B actions (W are inserted where
  // the next of them cannot run); empty: any ready F or B.
  std::vector<std::vector<Action>> order;
  // (stages) seconds of each stage's F, B and W; empty: 1 each (unit time).
  std::vector<std::array<double, 3>> costs;
  // A free rank whose only ready action is a W does not start it when one
  // of its F or B becomes ready within w_slack x that W's time (its input
  // is being computed now): it waits for that instead.
  double w_slack = 0.0;
  // An F of a rank's earlier stage keeps one slot of rank_limit free, for
  // the later stage's F (see below_limit).
  bool keep_slot_for_later_stage = false;
};

class ListScheduler {
 public:
  ListScheduler(const Schedule& s, const ListPolicy& policy)
      : s_(s), policy_(policy), n_(s.num_micro_batches),
        next_(3, std::vector<int>(s.num_stages, 0)),
        done_(3, std::vector<std::vector<double>>(s.num_stages, std::vector<double>(n_, -1.0))),
        in_flight_(s.num_stages, 0), rank_in_flight_(s.num_ranks, 0), position_(s.num_stages, 0) {}

  // Event by event: at each completion time, finished actions release what
  // depends on them, then every idle rank picks its next action.
  // Returns false when no rank can run anything before all actions ran (a
  // stall: possible at real times, never in unit time).
  bool run(std::vector<std::vector<Action>>& out) {
    std::vector<std::vector<Action>> order(s_.num_ranks);
    std::vector<double> busy_until(s_.num_ranks, 0.0);
    std::vector<Action> running(s_.num_ranks);
    std::vector<bool> active(s_.num_ranks, false);
    const int total = 3 * s_.num_stages * n_;
    int finished = 0;
    for (double t = 0.0; finished < total;) {
      for (int r = 0; r < s_.num_ranks; ++r)
        if (active[r] && busy_until[r] <= t) {
          finish(running[r]);
          active[r] = false;
          ++finished;
        }
      double next_t = std::numeric_limits<double>::infinity();
      for (int r = 0; r < s_.num_ranks; ++r) {
        if (!active[r]) {
          Action a;
          if (pick(r, t, a)) {
            busy_until[r] = t + cost(a);
            start(a, busy_until[r]);
            order[r].push_back(a);
            running[r] = a;
            active[r] = true;
          }
        }
        if (active[r]) next_t = std::min(next_t, busy_until[r]);
      }
      if (next_t == std::numeric_limits<double>::infinity() && finished < total) return false;
      t = next_t;
    }
    out = std::move(order);
    return true;
  }

 private:
  static int index(ActionKind k) { return k == ActionKind::F ? 0 : k == ActionKind::B ? 1 : 2; }
  double cost(const Action& a) const {
    return policy_.costs.empty() ? 1.0 : policy_.costs[a.stage][index(a.kind)];
  }
  bool done_by(int kind, int stage, int mb, double t) const {
    const double d = done_[kind][stage][mb];
    return d >= 0 && d <= t;
  }
  // Every prerequisite of `a` (schedule/semantics.hpp) done by time t.
  bool ready(const Action& a, double t) const {
    for (const Action& p : Prerequisites(a, s_.num_stages))
      if (!done_by(index(p.kind), p.stage, p.mb, t)) return false;
    return true;
  }
  bool below_limit(int rank, int stage) const {
    if (policy_.rank_limit > 0) {
      const int room = policy_.rank_limit - rank_in_flight_[rank];
      // At real times a rank can fill its limit with its earlier stage's F
      // while its later stage waits for input, and then no B could ever
      // start (run() stalls): the placement is made again with one slot kept.
      if (policy_.keep_slot_for_later_stage && stage != rank_stages(s_, rank).back()) return room > 1;
      return room > 0;
    }
    return in_flight_[stage] < policy_.stage_limit[stage];
  }
  // The rank's next action: B, else F, else W; among stages, the later
  // stage first for B and F (nearer the loss), the earlier for W.
  bool pick(int rank, double t, Action& out) const {
    const std::vector<int> stages = rank_stages(s_, rank);
    if (pick_f_or_b(stages, rank, t, out)) return true;
    for (int st : stages) {
      const int mb = next_[2][st];
      const Action w = make_action(st, ActionKind::W, mb);
      if (mb >= n_ || !ready(w, t)) continue;
      Action soon;
      if (policy_.w_slack > 0.0 && pick_f_or_b(stages, rank, t + policy_.w_slack * cost(w), soon))
        return false;  // an F or B is about to be ready: keep the rank free for it
      return out = w, true;
    }
    return false;
  }
  // The rank's next F or B that is ready at time t (B first).
  bool pick_f_or_b(const std::vector<int>& stages, int rank, double t, Action& out) const {
    for (ActionKind kind : {ActionKind::B, ActionKind::F}) {
      for (size_t j = stages.size(); j-- > 0;) {
        const int st = stages[j], mb = next_[index(kind)][st];
        if (mb >= n_) continue;
        const Action a = make_action(st, kind, mb);
        if (!policy_.order.empty() && !(policy_.order[st][position_[st]] == a)) continue;
        if (kind == ActionKind::F && !below_limit(rank, st)) continue;
        if (ready(a, t)) return out = a, true;
      }
    }
    return false;
  }
  // done_ holds each started action's end time, so that ready(a, t) also
  // answers "ready by a later time t" for actions running now.
  void start(const Action& a, double end) {
    done_[index(a.kind)][a.stage][a.mb] = end;
    ++next_[index(a.kind)][a.stage];
    if (a.kind == ActionKind::F) {
      ++in_flight_[a.stage];
      ++rank_in_flight_[stage_rank(s_, a.stage)];
    }
    if (a.kind != ActionKind::W) ++position_[a.stage];
  }
  void finish(const Action& a) {
    if (a.kind == ActionKind::W) {
      --in_flight_[a.stage];
      --rank_in_flight_[stage_rank(s_, a.stage)];
    }
  }

  const Schedule& s_;
  ListPolicy policy_;
  int n_;
  std::vector<std::vector<int>> next_;                 // (F/B/W, stage) next micro-batch
  std::vector<std::vector<std::vector<double>>> done_;  // (F/B/W, stage, mb) end time or -1
  std::vector<int> in_flight_, rank_in_flight_;
  std::vector<size_t> position_;  // per stage: next entry of policy_.order
};

// The list scheduler's placement; at real times a stalled one is made again
// keeping a slot for each rank's later stage.
std::vector<std::vector<Action>> list_schedule(const Schedule& s, ListPolicy policy) {
  std::vector<std::vector<Action>> order;
  if (ListScheduler(s, policy).run(order)) return order;
  PT_CHECK(!policy.costs.empty() && !policy.keep_slot_for_later_stage,
           "schedule generator '" + s.name + "' found no action to run");
  policy.keep_slot_for_later_stage = true;
  PT_CHECK(ListScheduler(s, policy).run(order),
           "schedule generator '" + s.name + "' found no action to run at the given times");
  return order;
}

}  // namespace

Schedule with_communication(const Schedule& skeleton, const std::vector<std::vector<Action>>& compute) {
  Schedule s = skeleton;
  s.ranks.assign(static_cast<size_t>(s.num_ranks), {});
  const auto at = compute_positions(compute);
  for (int r = 0; r < s.num_ranks; ++r) {
    const std::vector<PlacedReceive> receives = place_rank_receives(s, compute, at, r);
    std::vector<Action>& out = s.ranks[r];
    size_t next = 0;
    for (int i = 0; i < static_cast<int>(compute[r].size()); ++i) {
      while (next < receives.size() && receives[next].slot == i) out.push_back(receives[next++].action);
      const Action& a = compute[r][i];
      out.push_back(a);
      if (needs_send(s, a))
        out.push_back(make_action(a.stage, a.kind == ActionKind::F ? ActionKind::SEND_F : ActionKind::SEND_B,
                           a.mb));
    }
    PT_CHECK(next == receives.size(), "every receive placed");
  }
  return s;
}

Schedule generate_interleaved(int num_ranks, int virtual_stages, int num_micro_batches) {
  check_sizes("interleaved", num_ranks, num_micro_batches);
  if (virtual_stages < 1)
    throw InputError("schedule 'interleaved' needs pipeline.virtual_stages >= 1 (got " +
                     std::to_string(virtual_stages) + ")");
  if (num_micro_batches % num_ranks != 0)
    throw InputError("schedule 'interleaved' runs micro-batches in groups of one per rank: " +
                     std::to_string(num_micro_batches) + " micro-batches is not a multiple of the " +
                     std::to_string(num_ranks) + " ranks");
  Schedule s = empty_schedule("interleaved", num_ranks, num_ranks * virtual_stages,
                              num_micro_batches);
  std::vector<std::vector<Action>> compute;
  for (int r = 0; r < num_ranks; ++r)
    compute.push_back(interleaved_compute(r, num_ranks, virtual_stages, num_micro_batches));
  s = with_communication(s, compute);
  return s;
}

Schedule generate_zb_h1(int num_ranks, int num_micro_batches, const StageActionTimes& times,
                        double w_slack) {
  check_sizes("zb-h1", num_ranks, num_micro_batches);
  Schedule s = empty_schedule("zb-h1", num_ranks, num_ranks, num_micro_batches);
  ListPolicy policy;
  for (int st = 0; st < num_ranks; ++st)
  {
    policy.stage_limit.push_back(std::min(num_ranks, num_micro_batches));
    policy.order.push_back(one_f_one_b_order(st, num_ranks, num_micro_batches));
  }
  policy.costs = checked_times("zb-h1", times, num_ranks);
  policy.w_slack = w_slack;
  s.timed = !times.empty();
  s = with_communication(s, list_schedule(s, policy));
  return s;
}

Schedule generate_zb_v(int num_ranks, int num_micro_batches, const StageActionTimes& times,
                       double w_slack) {
  check_sizes("zb-v", num_ranks, num_micro_batches);
  Schedule s = empty_schedule("zb-v", num_ranks, 2 * num_ranks, num_micro_batches);
  for (int st = 0; st < 2 * num_ranks; ++st)
    s.placement.push_back(st < num_ranks ? st : 2 * num_ranks - 1 - st);
  if (num_ranks == 1) s.placement.clear();  // stages 0 and 1 on rank 0: stage % 1
  ListPolicy policy;
  policy.rank_limit = 2 * num_ranks;
  policy.costs = checked_times("zb-v", times, 2 * num_ranks);
  policy.w_slack = w_slack;
  s.timed = !times.empty();
  s = with_communication(s, list_schedule(s, policy));
  return s;
}

}  // namespace pt
