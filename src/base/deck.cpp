// deck.cpp: Deck::where and Deck::described, the "file:line: key" prefix of
// every message about a deck value and a second key in it, and what
// pipeline.schedule_times = "auto" means. In the base layer, since every
// layer may report one. A key the deck wrote under its old name (e.g.
// pipeline.rebalance_every for rebalance.every) is named as written.
#include "pipetrain/base/deck.hpp"

namespace pt {

std::string Deck::named(const std::string& dotted_key) const {
  auto it = written_as.find(dotted_key);
  return it != written_as.end() ? it->second : dotted_key;
}

std::string Deck::where(const std::string& dotted_key) const {
  auto it = key_origin.find(dotted_key);
  if (it != key_origin.end()) return it->second + ": " + named(dotted_key);
  return (source_file.empty() ? std::string("deck") : source_file) + ": " + dotted_key;
}

std::string Deck::described(const std::string& dotted_key, const std::string& value) const {
  auto it = key_origin.find(dotted_key);
  return named(dotted_key) + " = " + value + " (" + (it == key_origin.end() ? "default" : it->second) + ")";
}

bool zero_bubble_placed_at_measured_times(const Deck& deck) {
  const ScheduleTimesKind times = deck.pipeline.schedule_times;
  return times == ScheduleTimesKind::Measured || (times == ScheduleTimesKind::Auto && !deck.rebalance.enabled);
}

bool places_at_measured_times(const Deck& deck) {
  const PipelineConfig& p = deck.pipeline;
  const bool zero_bubble = p.schedule == ScheduleKind::ZbH1 || p.schedule == ScheduleKind::ZbV;  // schedule_takes_times
  return zero_bubble && zero_bubble_placed_at_measured_times(deck);
}

}  // namespace pt
