// validator.cpp: checks a schedule before step 0 and draws its rank x step grid.
//
// validate_schedule() runs, in order: shape checks (placement included);
// per-action checks (ranges, owning rank, comm actions that may not exist);
// counts (exactly one of every required action; with any W, one W per B);
// order on each rank (F before B before W, send after its compute, receive
// before its consumer); and a lock-step simulation that finds deadlocks. Every failure is a pt::InputError that explains the problem and
// shows format_grid() (grid.cpp) with the offending actions marked ">2F5<".
#include <algorithm>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {

namespace {

using Mark = std::pair<int, int>;  // (rank, index in that rank's list)

constexpr ActionKind kComputeKinds[] = {ActionKind::F, ActionKind::B, ActionKind::W};
constexpr ActionKind kCommKinds[] = {ActionKind::SEND_F, ActionKind::RECV_F,
                                     ActionKind::SEND_B, ActionKind::RECV_B};
constexpr int kNumKinds = 7;
constexpr int kNever = std::numeric_limits<int>::max();  // a round after all rounds

// "1 stage", "4 stages", "2 micro-batches".
std::string count(int n, const std::string& noun) {
  std::string plural = noun.back() == 'h' ? noun + "es" : noun + "s";
  return std::to_string(n) + " " + (n == 1 ? noun : plural);
}

[[noreturn]] void reject(const Schedule& s, const std::string& problem,
                         const std::vector<Mark>& marks) {
  throw InputError("invalid schedule '" + s.name + "' (" + count(s.num_stages, "stage") +
                   ", " + count(s.num_micro_batches, "micro-batch") + ", " +
                   count(s.num_ranks, "rank") + "): " + problem + "\n" + format_grid(s, marks));
}

std::string at(const Schedule& s, const Mark& m) {
  return to_string(s.ranks[m.first][m.second]) + " (rank " + std::to_string(m.first) +
         ", step " + std::to_string(m.second) + ")";
}

bool same_rank(const Schedule& s, int stage_a, int stage_b) {
  return stage_rank(s, stage_a) == stage_rank(s, stage_b);
}

// The stage on the other end of a comm action.
int peer_stage(const Action& a) {
  bool towards_next = a.kind == ActionKind::SEND_F || a.kind == ActionKind::RECV_B;
  return towards_next ? a.stage + 1 : a.stage - 1;
}

// Why this comm action may not exist; empty when it is required.
std::string comm_forbidden(const Schedule& s, const Action& a) {
  int last = s.num_stages - 1;
  if (a.kind == ActionKind::SEND_F && a.stage == last)
    return "the last stage has no next stage to send activations to";
  if (a.kind == ActionKind::RECV_F && a.stage == 0)
    return "stage 0 reads the data and receives no activations";
  if (a.kind == ActionKind::SEND_B && a.stage == 0)
    return "stage 0 has no previous stage to send gradients to";
  if (a.kind == ActionKind::RECV_B && a.stage == last)
    return "the last stage starts backward from the loss and receives no gradient";
  int peer = peer_stage(a);
  if (same_rank(s, a.stage, peer))
    return "stages " + std::to_string(a.stage) + " and " + std::to_string(peer) +
           " both live on rank " + std::to_string(stage_rank(s, peer)) +
           ", so their handoff is local and takes no comm action";
  return "";
}

// Positions of every action, looked up by (kind, stage, mb). Built only after
// the per-action range checks passed.
class ActionIndex {
 public:
  explicit ActionIndex(const Schedule& s)
      : stages_(s.num_stages), mbs_(s.num_micro_batches),
        slots_(static_cast<size_t>(kNumKinds) * stages_ * mbs_) {
    for (int r = 0; r < static_cast<int>(s.ranks.size()); ++r)
      for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i)
        slots_[key(s.ranks[r][i])].push_back({r, i});
  }
  size_t key(const Action& a) const {
    return (static_cast<size_t>(a.kind) * stages_ + a.stage) * mbs_ + a.mb;
  }
  size_t size() const { return slots_.size(); }
  const std::vector<Mark>& find(const Action& a) const { return slots_[key(a)]; }
  Mark only(const Action& a) const { return find(a).front(); }

 private:
  int stages_, mbs_;
  std::vector<std::vector<Mark>> slots_;
};

void check_shape(const Schedule& s) {
  if (s.num_stages < 1 || s.num_micro_batches < 1)
    reject(s, "needs at least 1 stage and 1 micro-batch", {});
  if (s.num_ranks < 1 || s.num_ranks > s.num_stages)
    reject(s, "the number of ranks must be between 1 and the number of stages", {});
  if (static_cast<int>(s.ranks.size()) != s.num_ranks)
    reject(s, "has " + std::to_string(s.ranks.size()) + " rank lists for " +
                  std::to_string(s.num_ranks) + " ranks",
           {});
  if (s.placement.empty()) return;
  if (static_cast<int>(s.placement.size()) != s.num_stages)
    reject(s, "the placement names the rank of " + std::to_string(s.placement.size()) +
                  " stages; it needs one rank per stage",
           {});
  std::vector<bool> owns(s.num_ranks, false);
  for (int st = 0; st < s.num_stages; ++st) {
    const int r = s.placement[st];
    if (r < 0 || r >= s.num_ranks)
      reject(s, "the placement puts stage " + std::to_string(st) + " on rank " +
                    std::to_string(r) + "; ranks are 0.." + std::to_string(s.num_ranks - 1),
             {});
    owns[r] = true;
  }
  for (int r = 0; r < s.num_ranks; ++r)
    if (!owns[r]) reject(s, "rank " + std::to_string(r) + " owns no stage", {});
}

void check_action(const Schedule& s, const Mark& m) {
  const Action& a = s.ranks[m.first][m.second];
  std::string what = at(s, m) + ": ";
  if (a.stage < 0 || a.stage >= s.num_stages)
    reject(s, what + "stage out of range; stages are 0.." + std::to_string(s.num_stages - 1),
           {m});
  if (a.mb < 0 || a.mb >= s.num_micro_batches)
    reject(s, what + "micro-batch out of range; micro-batches are 0.." +
                  std::to_string(s.num_micro_batches - 1),
           {m});
  if (stage_rank(s, a.stage) != m.first)
    reject(s, what + "wrong rank; stage " + std::to_string(a.stage) + " lives on rank " +
                  std::to_string(stage_rank(s, a.stage)),
           {m});
  if (is_compute(a.kind)) return;
  std::string why = comm_forbidden(s, a);
  if (!why.empty()) reject(s, what + "comm action not allowed: " + why, {m});
}

void check_actions(const Schedule& s) {
  for (int r = 0; r < s.num_ranks; ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) check_action(s, {r, i});
}

// The compute action a comm action belongs to (sends follow it, receives
// precede it).
Action compute_of(const Action& a) {
  bool forward = a.kind == ActionKind::SEND_F || a.kind == ActionKind::RECV_F;
  return make_action(a.stage, forward ? ActionKind::F : ActionKind::B, a.mb);
}

std::string missing_comm_reason(const Schedule& s, const Action& a) {
  std::string peer = "stage " + std::to_string(peer_stage(a)) + " on rank " +
                     std::to_string(stage_rank(s, peer_stage(a)));
  std::string compute = to_string(compute_of(a));
  switch (a.kind) {
    case ActionKind::SEND_F: return "the output of " + compute + " must be sent to " + peer;
    case ActionKind::RECV_F: return compute + " needs a receive of its input from " + peer;
    case ActionKind::SEND_B: return "the input gradient of " + compute + " must be sent to " + peer;
    default: return compute + " needs a receive of its output gradient from " + peer;
  }
}

void check_count(const Schedule& s, const ActionIndex& index, const Action& a) {
  const std::vector<Mark>& found = index.find(a);
  if (found.size() > 1)
    reject(s, to_string(a) + " appears " + std::to_string(found.size()) +
                  " times; it must appear exactly once",
           found);
  if (!found.empty()) return;
  if (a.kind == ActionKind::W)
    reject(s, "missing " + to_string(a) + ": the schedule splits the backward (it has W "
                  "actions), so every B needs its W, which adds the deferred weight gradients",
           index.find(make_action(a.stage, ActionKind::B, a.mb)));
  if (is_compute(a.kind))
    reject(s, "missing " + to_string(a) + ": every stage runs exactly one " +
                  kind_name(a.kind) + " per micro-batch",
           {});
  if (!comm_forbidden(s, a).empty()) return;
  const std::vector<Mark>& owner = index.find(compute_of(a));
  reject(s, "missing " + to_string(a) + ": " + missing_comm_reason(s, a), owner);
}

bool is_backward(ActionKind kind) {
  return kind == ActionKind::B || kind == ActionKind::W || kind == ActionKind::SEND_B ||
         kind == ActionKind::RECV_B;
}

// A forward-only (evaluation) schedule must contain no backward action.
void check_absent(const Schedule& s, const ActionIndex& index, const Action& a) {
  const std::vector<Mark>& found = index.find(a);
  if (!found.empty())
    reject(s, to_string(a) + " in a forward-only schedule; it must have no backward actions",
           found);
}

void check_counts(const Schedule& s, const ActionIndex& index) {
  const bool split = splits_backward(s);
  auto check_kind = [&](ActionKind kind) {
    if (kind == ActionKind::W && !split && !s.forward_only) return;
    for (int st = 0; st < s.num_stages; ++st)
      for (int mb = 0; mb < s.num_micro_batches; ++mb) {
        if (s.forward_only && is_backward(kind)) check_absent(s, index, make_action(st, kind, mb));
        else check_count(s, index, make_action(st, kind, mb));
      }
  };
  for (ActionKind kind : kComputeKinds) check_kind(kind);
  for (ActionKind kind : kCommKinds) check_kind(kind);
}

// `first` must come before `second` on their (shared) rank.
void check_before(const Schedule& s, const ActionIndex& index, const Action& first,
                  const Action& second, const std::string& rule) {
  if (index.find(first).empty() || index.find(second).empty()) return;
  Mark a = index.only(first), b = index.only(second);
  if (a.second < b.second) return;
  reject(s, at(s, b) + " comes before " + at(s, a) + "; " + rule, {b, a});
}

void check_order(const Schedule& s, const ActionIndex& index, int st, int mb) {
  Action f = make_action(st, ActionKind::F, mb), b = make_action(st, ActionKind::B, mb);
  check_before(s, index, f, b, "backward needs the forward of the same micro-batch");
  check_before(s, index, b, make_action(st, ActionKind::W, mb),
               "W adds the weight gradients that B of the same micro-batch deferred");
  const char* send_rule = "a send must follow the compute that produces its data";
  const char* recv_rule = "a receive must be posted before the compute that consumes it";
  check_before(s, index, f, make_action(st, ActionKind::SEND_F, mb), send_rule);
  check_before(s, index, make_action(st, ActionKind::RECV_F, mb), f, recv_rule);
  check_before(s, index, b, make_action(st, ActionKind::SEND_B, mb), send_rule);
  check_before(s, index, make_action(st, ActionKind::RECV_B, mb), b, recv_rule);
}

// weight_grad: step: on its rank, each stage's W actions stand together in
// micro-batch order, since the executor runs them as one pass over all the
// micro-batches. Then every B of the stage precedes the pass: check_order
// puts B(m) before W(m), and no B can stand inside the run.
void check_step_weight_grads(const Schedule& s, const ActionIndex& index) {
  if (!s.step_weight_grads || s.forward_only) return;
  if (!splits_backward(s))
    reject(s, "the schedule says 'weight_grad: step' but has no W actions; give W of every "
              "(stage, micro-batch) after the stage's last B", {});
  const char* why = "with 'weight_grad: step' a stage's W actions run as one pass over the "
                    "step's micro-batches";
  for (int st = 0; st < s.num_stages; ++st) {
    for (int mb = 1; mb < s.num_micro_batches; ++mb) {
      const Mark prev = index.only(make_action(st, ActionKind::W, mb - 1));
      const Mark w = index.only(make_action(st, ActionKind::W, mb));
      if (w.first != prev.first || w.second != prev.second + 1)
        reject(s, at(s, w) + " does not follow " + at(s, prev) + " directly; " + why +
                      ", so they must stand together in micro-batch order", {prev, w});
    }
  }
}

// The rank on the other end of a comm action.
int peer_rank_of(const Schedule& s, const Action& a) { return stage_rank(s, peer_stage(a)); }

// A channel (NCCL's view): sender rank -> receiver rank.
using Channel = std::pair<int, int>;
Channel channel_of(const Schedule& s, int rank, const Action& a) {
  const bool send = a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B;
  return send ? Channel{rank, peer_rank_of(s, a)} : Channel{peer_rank_of(s, a), rank};
}

// The receive a send meets: SEND_F(s, m) -> RECV_F(s+1, m), SEND_B(s, m) -> RECV_B(s-1, m).
Action receive_of(const Action& send) {
  return send.kind == ActionKind::SEND_F ? make_action(send.stage + 1, ActionKind::RECV_F, send.mb)
                                         : make_action(send.stage - 1, ActionKind::RECV_B, send.mb);
}

std::string ordinal(size_t k) {
  const char* suffix = (k % 100 >= 11 && k % 100 <= 13) ? "th"
                       : k % 10 == 1                    ? "st"
                       : k % 10 == 2                    ? "nd"
                       : k % 10 == 3                    ? "rd"
                                                        : "th";
  return std::to_string(k) + suffix;
}

// NCCL matches a channel's messages by order: the k-th send of rank a to
// rank b must be the one the k-th receive of b from a expects.
void check_channel_order(const Schedule& s) {
  std::map<Channel, std::vector<Mark>> sends, recvs;
  for (int r = 0; r < s.num_ranks; ++r)
    for (int i = 0; i < static_cast<int>(s.ranks[r].size()); ++i) {
      const Action& a = s.ranks[r][i];
      if (is_compute(a.kind)) continue;
      const bool send = a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B;
      (send ? sends : recvs)[channel_of(s, r, a)].push_back({r, i});
    }
  for (const auto& [channel, list] : sends) {
    const std::vector<Mark>& theirs = recvs[channel];
    for (size_t k = 0; k < list.size() && k < theirs.size(); ++k) {
      const Action& send = s.ranks[list[k].first][list[k].second];
      const Action& recv = s.ranks[theirs[k].first][theirs[k].second];
      if (receive_of(send) == recv) continue;
      reject(s, "under NCCL semantics the messages from rank " + std::to_string(channel.first) +
                    " to rank " + std::to_string(channel.second) +
                    " meet by order, not by tag, but the " + ordinal(k + 1) + " send is " +
                    at(s, list[k]) + " and the " + ordinal(k + 1) + " receive is " +
                    at(s, theirs[k]) + "; post this channel's receives in the order of its sends",
             {list[k], theirs[k]});
    }
  }
}

// Lock-step simulation: in each round every rank runs its next action if the
// action's inputs were produced in an earlier round. Posting a send or a
// receive never blocks, except the first one on a channel under NCCL's lazy
// connection, which waits until the peer has reached its own first action on
// that channel (in an earlier round).
class Simulation {
 public:
  Simulation(const Schedule& s, const ActionIndex& index, const CommSemantics& comm)
      : s_(s), index_(index), comm_(comm), pc_(s.num_ranks, 0), done_round_(index.size(), -1) {}

  int run() {
    int round = 0;
    while (!finished()) {
      if (!step(round)) report_deadlock();
      ++round;
    }
    return round;
  }

 private:
  bool finished() const {
    for (int r = 0; r < s_.num_ranks; ++r)
      if (pc_[r] < static_cast<int>(s_.ranks[r].size())) return false;
    return true;
  }

  bool step(int round) {
    bool progressed = false;
    reached_something_ = false;
    for (int r = 0; r < s_.num_ranks; ++r) {
      if (pc_[r] >= static_cast<int>(s_.ranks[r].size())) continue;
      const Action& a = s_.ranks[r][pc_[r]];
      if (!unmet_dependencies(a, round).empty()) continue;
      if (blocked_connecting(r, a, round)) continue;
      done_round_[index_.key(a)] = round;
      ++pc_[r];
      progressed = true;
    }
    return progressed || reached_something_;
  }

  // What `a` needs before it can run (Prerequisites, schedule/semantics.hpp),
  // each as the action that delivers it: the peer's send, or for stages
  // sharing a rank the local compute.
  std::vector<Action> dependencies(const Action& a) const {
    std::vector<Action> deps;
    for (const Action& p : Prerequisites(a, s_.num_stages)) deps.push_back(delivery_of(s_, p, a.stage));
    return deps;
  }

  // NCCL lazy connection: the rank's first action on a channel; records the
  // round in which the rank reached it and blocks until the peer reached its own.
  bool blocked_connecting(int rank, const Action& a, int round) {
    if (!comm_.lazy_connect || is_compute(a.kind)) return false;
    const Channel ch = channel_of(s_, rank, a);
    auto mine = reached_.find({ch, rank});
    if (mine == reached_.end()) {
      mine = reached_.emplace(std::make_pair(ch, rank), round).first;
      reached_something_ = true;  // progress: the peer may connect next round
    }
    if (mine->second < 0) return false;  // connected already
    const int peer = ch.first == rank ? ch.second : ch.first;
    auto theirs = reached_.find({ch, peer});
    if (theirs == reached_.end() || (theirs->second >= 0 && theirs->second >= round)) {
      connecting_[rank] = ch;
      return true;
    }
    mine->second = -1;
    if (theirs->second >= 0) theirs->second = -1;
    connecting_.erase(rank);
    return false;
  }

  std::vector<Action> unmet_dependencies(const Action& a, int round) const {
    std::vector<Action> unmet;
    for (const Action& dep : dependencies(a)) {
      int done = done_round_[index_.key(dep)];
      if (done < 0 || done >= round) unmet.push_back(dep);
    }
    return unmet;
  }

  [[noreturn]] void report_deadlock() const {
    std::vector<Mark> stuck;
    std::string why;
    for (int r = 0; r < s_.num_ranks; ++r) {
      if (pc_[r] >= static_cast<int>(s_.ranks[r].size())) continue;
      Mark m{r, pc_[r]};
      stuck.push_back(m);
      auto connecting = connecting_.find(r);
      if (connecting != connecting_.end() &&
          unmet_dependencies(s_.ranks[r][pc_[r]], kNever).empty()) {
        const Channel ch = connecting->second;
        const int peer = ch.first == r ? ch.second : ch.first;
        why += "\n  " + at(s_, m) + " is rank " + std::to_string(r) +
               "'s first action on the NCCL channel " + std::to_string(ch.first) + "->" +
               std::to_string(ch.second) + " and blocks (lazy connection) until rank " +
               std::to_string(peer) + " reaches its own";
        continue;
      }
      why += "\n  " + at(s_, m) + " waits for";
      for (const Action& dep : unmet_dependencies(s_.ranks[r][pc_[r]], kNever))
        why += " " + to_string(dep) + " on rank " + std::to_string(stage_rank(s_, dep.stage));
    }
    reject(s_, "schedule deadlocks; no rank can make progress:" + why, stuck);
  }

  const Schedule& s_;
  const ActionIndex& index_;
  CommSemantics comm_;
  std::vector<int> pc_;
  std::vector<int> done_round_;
  // Lazy connection: ((channel, rank) -> round the rank reached its first
  // action on the channel, or -1 once connected) and the channel a rank is
  // blocked connecting.
  std::map<std::pair<Channel, int>, int> reached_;
  std::map<int, Channel> connecting_;
  bool reached_something_ = false;
};

}  // namespace

CommSemantics comm_semantics_of(TransportKind transport, DeviceKind device) {
  const bool nccl = transport == TransportKind::NcclModel || transport == TransportKind::Nccl ||
                    (device == DeviceKind::Cuda && transport == TransportKind::Auto);
  return nccl ? CommSemantics::nccl() : CommSemantics::mpi();
}

ScheduleReport validate_schedule(const Schedule& s, const CommSemantics& comm) {
  check_shape(s);
  check_actions(s);
  ActionIndex index(s);
  check_counts(s, index);
  for (int st = 0; st < s.num_stages; ++st)
    for (int mb = 0; mb < s.num_micro_batches; ++mb) check_order(s, index, st, mb);
  check_step_weight_grads(s, index);
  if (comm.match_by_order) check_channel_order(s);
  ScheduleReport report;
  report.simulated_rounds = Simulation(s, index, comm).run();
  const InFlightCounter counted = count_in_flight(s);
  report.peak_in_flight = counted.peak_in_flight();
  report.peak_pending_w = counted.peak_pending_w();
  return report;
}

}  // namespace pt
