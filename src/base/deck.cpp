// deck.cpp: Deck::where and Deck::described, the "file:line: key" prefix of
// every message about a deck value and a second key in it, and what
// pipeline.schedule_times = "auto" means. In the base layer, since every
// layer may report one.
#include "pipetrain/base/deck.hpp"

namespace pt {

std::string Deck::where(const std::string& dotted_key) const {
  auto it = key_origin.find(dotted_key);
  if (it != key_origin.end()) return it->second + ": " + dotted_key;
  return (source_file.empty() ? std::string("deck") : source_file) + ": " + dotted_key;
}

std::string Deck::described(const std::string& dotted_key, const std::string& value) const {
  auto it = key_origin.find(dotted_key);
  return dotted_key + " = " + value + " (" + (it == key_origin.end() ? "default" : it->second) + ")";
}

bool PipelineConfig::places_at_measured_times() const {
  const bool zero_bubble = schedule == ScheduleKind::ZbH1 || schedule == ScheduleKind::ZbV;  // schedule_takes_times
  return zero_bubble && (schedule_times == ScheduleTimesKind::Measured ||
                         (schedule_times == ScheduleTimesKind::Auto && !rebalance));
}

}  // namespace pt
