// placement_search.cpp: the local search over a zero-bubble placement at
// given action times (semantics in include/pipetrain/plan/placement_search.hpp).
//
// Actions are numbered (kind, stage, micro-batch) -> id, so that a candidate
// order costs one pass of integer lookups to simulate: each rank runs its
// list until an action's input is not done yet, and the ranks take turns
// until none can move (all done, or a stall).
#include "pipetrain/plan/placement_search.hpp"

#include <algorithm>
#include <limits>
#include <utility>

#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

constexpr double kNotDone = -1.0;

int kind_index(ActionKind k) { return k == ActionKind::F ? 0 : k == ActionKind::B ? 1 : 2; }
ActionKind kind_of(int index) {
  return index == 0 ? ActionKind::F : index == 1 ? ActionKind::B : ActionKind::W;
}

bool is_compute(ActionKind k) {
  return k == ActionKind::F || k == ActionKind::B || k == ActionKind::W;
}

// The step of compute orders at per-stage costs, free links.
class SpanModel {
 public:
  SpanModel(const Schedule& s, const std::vector<ActionCost>& costs)
      : stages_(s.num_stages), mbs_(s.num_micro_batches), ranks_(s.num_ranks),
        cost_(static_cast<size_t>(3 * stages_ * mbs_)), end_(cost_.size()) {
    PT_CHECK(static_cast<int>(costs.size()) == stages_,
             "placement search: " + std::to_string(costs.size()) + " stage costs for " +
                 std::to_string(stages_) + " stages");
    for (int st = 0; st < stages_; ++st)
      for (int m = 0; m < mbs_; ++m) {
        cost_[id(0, st, m)] = costs[st].forward_s;
        cost_[id(1, st, m)] = costs[st].backward_s;
        cost_[id(2, st, m)] = costs[st].weight_s;
      }
  }

  int id(int kind, int stage, int mb) const { return (kind * stages_ + stage) * mbs_ + mb; }
  int id(const Action& a) const { return id(kind_index(a.kind), a.stage, a.mb); }
  int kind(int id) const { return id / (stages_ * mbs_); }
  int stage(int id) const { return (id / mbs_) % stages_; }
  Action action(int id) const { return make_action(stage(id), kind_of(kind(id)), id % mbs_); }
  int num_stages() const { return stages_; }
  double secondary() const { return secondary_; }

  // The longest rank span, or infinity on a stall; `work` += actions run.
  double span(const std::vector<std::vector<int>>& orders, int64_t& work) {
    std::fill(end_.begin(), end_.end(), kNotDone);
    pos_.assign(static_cast<size_t>(ranks_), 0);
    free_.assign(static_cast<size_t>(ranks_), 0.0);
    size_t left = 0;
    for (const auto& o : orders) left += o.size();
    work += static_cast<int64_t>(left);
    for (bool progress = true; progress && left > 0;) {
      progress = false;
      for (int r = 0; r < ranks_; ++r) {
        const std::vector<int>& order = orders[r];
        size_t& p = pos_[r];
        for (double ready = 0.0; p < order.size() && inputs_done(order[p], ready); ++p, --left) {
          end_[order[p]] = free_[r] = std::max(free_[r], ready) + cost_[order[p]];
          progress = true;
        }
      }
    }
    if (left > 0) return std::numeric_limits<double>::infinity();
    secondary_ = 0.0;
    for (int st = 0; st < stages_; ++st)
      for (int m = 0; m < mbs_; ++m) secondary_ += end_[id(1, st, m)];
    return *std::max_element(free_.begin(), free_.end());
  }

 private:
  // True when the inputs of `a` are done; `ready` = when the last one ended.
  bool inputs_done(int a, double& ready) const {
    const int k = kind(a), st = stage(a), m = a % mbs_;
    ready = 0.0;
    auto need = [&](int dep) {
      if (end_[dep] == kNotDone) return false;
      ready = std::max(ready, end_[dep]);
      return true;
    };
    if (k == 0) return st == 0 || need(id(0, st - 1, m));
    if (k == 1) return need(id(0, st, m)) && (st == stages_ - 1 || need(id(1, st + 1, m)));
    return need(id(1, st, m));
  }

  int stages_, mbs_, ranks_;
  std::vector<double> cost_;  // (3 stages mbs) seconds of each action
  std::vector<double> end_;   // (3 stages mbs) end time, kNotDone before
  std::vector<size_t> pos_;   // (ranks) next entry of each order
  std::vector<double> free_;  // (ranks) when each rank is free
  double secondary_ = 0.0;
};

std::vector<std::vector<int>> compute_ids(const SpanModel& model,
                                          const std::vector<std::vector<Action>>& compute) {
  std::vector<std::vector<int>> ids(compute.size());
  for (size_t r = 0; r < compute.size(); ++r)
    for (const Action& a : compute[r]) ids[r].push_back(model.id(a));
  return ids;
}

std::vector<std::vector<Action>> compute_lists(const Schedule& s) {
  std::vector<std::vector<Action>> compute(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (const Action& a : s.ranks[r])
      if (is_compute(a.kind)) compute[r].push_back(a);
  return compute;
}

// The local search over one schedule's compute orders.
class PlacementSearch {
 public:
  PlacementSearch(const Schedule& start, const std::vector<ActionCost>& costs, int64_t work_limit)
      : model_(start, costs), orders_(compute_ids(model_, compute_lists(start))),
        caps_(static_cast<size_t>(model_.num_stages()), 0), work_limit_(work_limit) {
    for (const std::vector<int>& order : orders_) {
      const std::vector<int> peaks = stage_peaks(order);
      for (size_t st = 0; st < caps_.size(); ++st) caps_[st] = std::max(caps_[st], peaks[st]);
    }
  }

  // First-improvement passes until a pass keeps no move or the work is spent.
  PlacementSearchResult run(const Schedule& start) {
    PlacementSearchResult result;
    span_ = result.start_span_s = model_.span(orders_, work_);
    sec_ = model_.secondary();
    PT_CHECK(span_ < std::numeric_limits<double>::infinity(),
             "placement search: schedule '" + start.name + "' stalls at the given times");
    for (bool improved = true; improved && work_ < work_limit_;) {
      improved = false;
      for (size_t r = 0; r < orders_.size() && work_ < work_limit_; ++r)
        improved |= improve_rank(orders_[r]);
    }
    result.span_s = span_;
    result.moves = moves_;
    result.evaluations = evaluations_;
    std::vector<std::vector<Action>> compute(orders_.size());
    for (size_t r = 0; r < orders_.size(); ++r)
      for (int a : orders_[r]) compute[r].push_back(model_.action(a));
    result.schedule = with_communication(start, compute);
    result.schedule.timed = true;
    return result;
  }

 private:
  // Tries every move of every action of `order`; true when one was kept.
  bool improve_rank(std::vector<int>& order) {
    bool improved = false;
    const int n = static_cast<int>(order.size());
    for (int i = 0; i < n && work_ < work_limit_; ++i)
      for (int d = -kPlacementMoveReach; d <= kPlacementMoveReach && work_ < work_limit_; ++d) {
        const int j = i + d;
        if (d == 0 || j < 0 || j >= n || passes_same_kind(order, i, j)) continue;
        move(order, i, j);
        if (within_caps(order) && try_keep()) {
          improved = true;
          continue;
        }
        move(order, j, i);
      }
    for (int i = 0; i < n && work_ < work_limit_; ++i)
      for (int j = i + 1; j < std::min(n, i + kPlacementMoveReach + 1) && work_ < work_limit_; ++j) {
        if (passes_same_kind(order, i, j) || passes_same_kind(order, j, i)) continue;
        std::swap(order[i], order[j]);
        if (within_caps(order) && try_keep()) {
          improved = true;
          continue;
        }
        std::swap(order[i], order[j]);
      }
    return improved;
  }

  // True when the step at the current orders is shorter (then it is kept).
  bool try_keep() {
    ++evaluations_;
    const double span = model_.span(orders_, work_);
    const double sec = model_.secondary();
    const bool better = span < span_ * (1.0 - 1e-9) || (span <= span_ * (1.0 + 1e-12) && sec < sec_ * (1.0 - 1e-9));
    if (!better) return false;
    span_ = span;
    sec_ = sec;
    ++moves_;
    return true;
  }

  // Moving order[i] to j would pass an action of its stage and kind (and so
  // change the micro-batch order of that stage's F, B or W).
  bool passes_same_kind(const std::vector<int>& order, int i, int j) const {
    const int lo = std::min(i, j), hi = std::max(i, j);
    const int k = model_.kind(order[i]), st = model_.stage(order[i]);
    for (int x = lo; x <= hi; ++x)
      if (x != i && model_.kind(order[x]) == k && model_.stage(order[x]) == st) return true;
    return false;
  }

  static void move(std::vector<int>& order, int from, int to) {
    if (from < to)
      std::rotate(order.begin() + from, order.begin() + from + 1, order.begin() + to + 1);
    else
      std::rotate(order.begin() + to, order.begin() + from, order.begin() + from + 1);
  }

  // (stages) peak micro-batches between F and W of each stage in `order`.
  std::vector<int> stage_peaks(const std::vector<int>& order) const {
    std::vector<int> now(caps_.size(), 0), peak(caps_.size(), 0);
    for (int a : order) {
      const int st = model_.stage(a), k = model_.kind(a);
      if (k == 0) peak[st] = std::max(peak[st], ++now[st]);
      if (k == 2) --now[st];
    }
    return peak;
  }

  bool within_caps(const std::vector<int>& order) const {
    const std::vector<int> peaks = stage_peaks(order);
    for (size_t st = 0; st < caps_.size(); ++st)
      if (peaks[st] > caps_[st]) return false;
    return true;
  }

  SpanModel model_;
  std::vector<std::vector<int>> orders_;  // (ranks, compute ids in run order)
  std::vector<int> caps_;                 // (stages) the start's peak in-flight
  int64_t work_limit_;
  int64_t work_ = 0, moves_ = 0, evaluations_ = 0;
  double span_ = 0.0, sec_ = 0.0;
};

}  // namespace

PlacementSearchResult improve_placement(const Schedule& start, const std::vector<ActionCost>& costs,
                                        int64_t work_limit) {
  PT_CHECK(splits_backward(start), "placement search: schedule '" + start.name +
                                       "' has no W actions (a split backward) to place");
  return PlacementSearch(start, costs, work_limit).run(start);
}

double compute_span(const Schedule& skeleton, const std::vector<std::vector<Action>>& compute,
                    const std::vector<ActionCost>& costs) {
  SpanModel model(skeleton, costs);
  int64_t work = 0;
  return model.span(compute_ids(model, compute), work);
}

}  // namespace pt
