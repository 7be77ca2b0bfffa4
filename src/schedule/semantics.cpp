// semantics.cpp: dependencies, in-flight counting and the bubble
// (schedule/semantics.hpp).
#include "pipetrain/schedule/semantics.hpp"

#include <algorithm>

#include "pipetrain/base/error.hpp"

namespace pt {

Prerequisites::Prerequisites(const Action& a, int num_stages) {
  auto add = [this](int stage, ActionKind kind, int mb) { actions_[count_++] = make_action(stage, kind, mb); };
  switch (a.kind) {
    case ActionKind::F:
      if (a.stage > 0) add(a.stage - 1, ActionKind::F, a.mb);
      break;
    case ActionKind::B:
      add(a.stage, ActionKind::F, a.mb);
      if (a.stage + 1 < num_stages) add(a.stage + 1, ActionKind::B, a.mb);
      break;
    case ActionKind::W: add(a.stage, ActionKind::B, a.mb); break;
    default: break;  // sends and receives: ordered by their lists, not here
  }
}

const Action* Prerequisites::from_other_stage(const Action& a) const {
  for (const Action& p : *this)
    if (p.stage != a.stage) return &p;
  return nullptr;
}

Action delivery_of(const Schedule& s, const Action& p, int consumer_stage) {
  if (stage_rank(s, p.stage) == stage_rank(s, consumer_stage)) return p;
  return make_action(p.stage, p.kind == ActionKind::F ? ActionKind::SEND_F : ActionKind::SEND_B, p.mb);
}

ActionKind stash_release(const Schedule& s) {
  return splits_backward(s) ? ActionKind::W : ActionKind::B;
}

InFlightCounter::InFlightCounter(const Schedule& s) : InFlightCounter(s.num_stages, splits_backward(s)) {}

InFlightCounter::InFlightCounter(int num_stages, bool split)
    : split_(split),
      now_(static_cast<size_t>(std::max(num_stages, 0)), 0),
      peak_(now_),
      pending_(now_),
      peak_pending_(now_) {}

int InFlightCounter::enter(const Action& a) {
  const auto st = static_cast<size_t>(a.stage);
  if (a.kind == ActionKind::F) peak_[st] = std::max(peak_[st], ++now_[st]);
  if (split_ && a.kind == ActionKind::B) peak_pending_[st] = std::max(peak_pending_[st], ++pending_[st]);
  return now_[st];
}

void InFlightCounter::leave(const Action& a) {
  const auto st = static_cast<size_t>(a.stage);
  if (a.kind == (split_ ? ActionKind::W : ActionKind::B)) --now_[st];
  if (split_ && a.kind == ActionKind::W) --pending_[st];
}

InFlightCounter count_in_flight(const Schedule& s) {
  InFlightCounter counter(s);
  for (const std::vector<Action>& rank : s.ranks)
    for (const Action& a : rank)
      if (a.stage >= 0 && a.stage < s.num_stages) counter.run(a);
  return counter;
}

double bubble_of(const std::vector<double>& busy, const std::vector<double>& span) {
  PT_CHECK(busy.size() == span.size() && !busy.empty(), "bubble_of: one busy time and span per rank");
  const double longest = *std::max_element(span.begin(), span.end());
  double idle = 0.0;
  for (double b : busy) idle += longest > 0.0 ? 1.0 - b / longest : 0.0;
  return idle / static_cast<double>(busy.size());
}

}  // namespace pt
