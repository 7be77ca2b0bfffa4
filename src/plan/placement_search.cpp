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
#include <string>
#include <utility>

#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

constexpr double kNotDone = -1.0;

int kind_index(ActionKind k) { return k == ActionKind::F ? 0 : k == ActionKind::B ? 1 : 2; }
ActionKind kind_of(int index) {
  return index == 0 ? ActionKind::F : index == 1 ? ActionKind::B : ActionKind::W;
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
  double b_end_sum() const { return b_end_sum_; }

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
    b_end_sum_ = 0.0;
    if (left > 0) return std::numeric_limits<double>::infinity();
    for (int st = 0; st < stages_; ++st)
      for (int m = 0; m < mbs_; ++m) b_end_sum_ += end_[id(1, st, m)];
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
  double b_end_sum_ = 0.0;  // sum of every B's end time (the tie-break)
};

std::vector<std::vector<int>> compute_ids(const SpanModel& model,
                                          const std::vector<std::vector<Action>>& compute) {
  std::vector<std::vector<int>> ids(compute.size());
  for (size_t r = 0; r < compute.size(); ++r)
    for (const Action& a : compute[r]) ids[r].push_back(model.id(a));
  return ids;
}

// The local search over one schedule's compute orders.
class PlacementSearch {
 public:
  PlacementSearch(const Schedule& start, const std::vector<ActionCost>& costs, int64_t work_limit)
      : start_(start), model_(start, costs), orders_(compute_ids(model_, compute_actions(start))),
        caps_(static_cast<size_t>(model_.num_stages()), 0), rank_caps_(orders_.size(), 0),
        now_(caps_.size(), 0), peak_(caps_.size(), 0), work_limit_(work_limit) {
    for (size_t r = 0; r < orders_.size(); ++r) {
      rank_caps_[r] = count_peaks(orders_[r]);
      for (size_t st = 0; st < caps_.size(); ++st) caps_[st] = std::max(caps_[st], peak_[st]);
    }
  }

  // First-improvement passes until a pass keeps no move or the work is spent.
  PlacementSearchResult run() {
    const Schedule& start = start_;
    PlacementSearchResult result;
    span_ = result.start_span_s = model_.span(orders_, work_);
    b_end_sum_ = model_.b_end_sum();
    PT_CHECK(span_ < std::numeric_limits<double>::infinity(),
             "placement search: schedule '" + start.name + "' stalls at the given times");
    for (bool improved = true; improved && work_ < work_limit_;) {
      improved = false;
      for (size_t r = 0; r < orders_.size() && work_ < work_limit_; ++r)
        improved |= improve_rank(r);
    }
    result.span_s = span_;
    result.moves = moves_;
    result.evaluations = evaluations_;
    std::vector<std::vector<Action>> compute(orders_.size());
    for (size_t r = 0; r < orders_.size(); ++r)
      for (int a : orders_[r]) compute[r].push_back(model_.action(a));
    result.schedule = with_communication(start, compute);
    result.schedule.timed = start.timed || moves_ > 0;
    return result;
  }

 private:
  // Tries every move of every action of `order`; true when one was kept.
  bool improve_rank(size_t rank) {
    std::vector<int>& order = orders_[rank];
    bool improved = false;
    const int n = static_cast<int>(order.size());
    for (int i = 0; i < n && work_ < work_limit_; ++i)
      for (int d = -kPlacementMoveReach; d <= kPlacementMoveReach && work_ < work_limit_; ++d) {
        const int j = i + d;
        if (d == 0 || j < 0 || j >= n || passes_same_kind(order, i, j)) continue;
        move(order, i, j);
        if (within_caps(rank) && try_keep()) {
          improved = true;
          continue;
        }
        move(order, j, i);
      }
    for (int i = 0; i < n && work_ < work_limit_; ++i)
      for (int j = i + 1; j < std::min(n, i + kPlacementMoveReach + 1) && work_ < work_limit_; ++j) {
        if (passes_same_kind(order, i, j) || passes_same_kind(order, j, i)) continue;
        std::swap(order[i], order[j]);
        if (within_caps(rank) && try_keep()) {
          improved = true;
          continue;
        }
        std::swap(order[i], order[j]);
      }
    return improved;
  }

  // True when the step at the current orders is shorter, or as long with
  // the B actions ending earlier in sum (then the orders are kept). A gain
  // counts when over kRelativeGain, so rounding never decides.
  bool try_keep() {
    static constexpr double kRelativeGain = 1e-9;
    ++evaluations_;
    const double span = model_.span(orders_, work_);
    const double b_end_sum = model_.b_end_sum();
    const bool shorter = span < span_ * (1.0 - kRelativeGain);
    const bool tie_earlier_b = span <= span_ && b_end_sum < b_end_sum_ * (1.0 - kRelativeGain);
    if (!shorter && !tie_earlier_b) return false;
    span_ = span;
    b_end_sum_ = b_end_sum;
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

  // Fills peak_ with each stage's peak micro-batches between F and W in
  // `order` and returns the peak of their sum (the rank's).
  int count_peaks(const std::vector<int>& order) {
    std::fill(now_.begin(), now_.end(), 0);
    std::fill(peak_.begin(), peak_.end(), 0);
    int rank_now = 0, rank_peak = 0;
    for (int a : order) {
      const int st = model_.stage(a), k = model_.kind(a);
      if (k == 0) {
        peak_[st] = std::max(peak_[st], ++now_[st]);
        rank_peak = std::max(rank_peak, ++rank_now);
      }
      if (k == 2) --now_[st], --rank_now;
    }
    return rank_peak;
  }

  // No stage and no rank over the start's in-flight peak (counted as work).
  bool within_caps(size_t rank) {
    work_ += static_cast<int64_t>(orders_[rank].size());
    if (count_peaks(orders_[rank]) > rank_caps_[rank]) return false;
    for (size_t st = 0; st < caps_.size(); ++st)
      if (peak_[st] > caps_[st]) return false;
    return true;
  }

  const Schedule& start_;
  SpanModel model_;
  std::vector<std::vector<int>> orders_;  // (ranks, compute ids in run order)
  std::vector<int> caps_;                 // (stages) the start's peak in-flight
  std::vector<int> rank_caps_;            // (ranks) the start's peak, stages summed
  std::vector<int> now_, peak_;           // (stages) count_peaks' counts
  int64_t work_limit_;
  int64_t work_ = 0, moves_ = 0, evaluations_ = 0;
  double span_ = 0.0, b_end_sum_ = 0.0;
};

}  // namespace

PlacementSearchResult improve_placement(const Schedule& start, const std::vector<ActionCost>& costs,
                                        int64_t work_limit) {
  PT_CHECK(splits_backward(start), "placement search: schedule '" + start.name +
                                       "' has no W actions (a split backward) to place");
  return PlacementSearch(start, costs, work_limit).run();
}

double compute_span(const Schedule& skeleton, const std::vector<std::vector<Action>>& compute,
                    const std::vector<ActionCost>& costs) {
  SpanModel model(skeleton, costs);
  int64_t work = 0;
  return model.span(compute_ids(model, compute), work);
}

}  // namespace pt
