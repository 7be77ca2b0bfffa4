// recompute.cpp: the one parser of recomputation policies, their layer
// bookkeeping and the unit-to-layer map (schedule/recompute.hpp).
#include "pipetrain/schedule/recompute.hpp"

#include <algorithm>
#include <cstdlib>

#include "pipetrain/base/error.hpp"

namespace pt {

std::string RecomputePolicy::name() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::Selective: return "selective";
    case Kind::Every: return "every:" + std::to_string(every);
    case Kind::Full: return "full";
  }
  PT_FAIL("unknown RecomputePolicy kind");
}

bool RecomputePolicy::keeps_input(size_t index) const {
  switch (kind) {
    case Kind::None:
    case Kind::Selective: return true;
    case Kind::Every: return index % every == 0;
    case Kind::Full: return index == 0;
  }
  return true;
}

size_t RecomputePolicy::segment_start(size_t index) const {
  switch (kind) {
    case Kind::None:
    case Kind::Selective: return index;
    case Kind::Every: return index - index % every;
    case Kind::Full: return 0;
  }
  return index;
}

namespace {

bool parse_every(const std::string& text, size_t& k) {
  if (text.rfind("every:", 0) != 0 || text.size() == 6) return false;
  const std::string digits = text.substr(6);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 6) return false;
  k = static_cast<size_t>(std::strtoul(digits.c_str(), nullptr, 10));
  return k >= 1;
}

// The one grammar of a policy; false for anything else ("auto" included).
bool parse_into(const std::string& text, RecomputePolicy& p) {
  using Kind = RecomputePolicy::Kind;
  if (text == "none") p.kind = Kind::None;
  else if (text == "selective") p.kind = Kind::Selective;
  else if (text == "full") p.kind = Kind::Full;
  else if (parse_every(text, p.every)) p.kind = Kind::Every;
  else return false;
  return true;
}

}  // namespace

RecomputePolicy RecomputePolicy::parse(const std::string& text) {
  RecomputePolicy p;
  if (!parse_into(text, p))
    throw InputError("recompute policy '" + text +
                     "': expected \"none\", \"selective\", \"every:K\" (K >= 1) or \"full\"");
  return p;
}

RecomputePolicy parse_recompute_policy(const std::string& text, const std::string& where) {
  RecomputePolicy p;
  if (!parse_into(text, p))
    throw InputError(where + " = \"" + text +
                     "\": expected \"none\", \"selective\", \"every:K\" (K >= 1), \"full\" or \"auto\"");
  return p;
}

bool is_auto_recompute(const std::string& setting) { return setting == "auto"; }

bool any_auto_recompute(const PipelineConfig& pipeline) {
  if (is_auto_recompute(pipeline.recompute)) return true;
  for (const std::string& s : pipeline.recompute_stages)
    if (is_auto_recompute(s)) return true;
  return false;
}

bool is_recompute_setting(const std::string& text) {
  RecomputePolicy p;
  return is_auto_recompute(text) || parse_into(text, p);
}

UnitLayerMap::UnitLayerMap(std::vector<int64_t> layers_per_unit) : prefix_{0} {
  for (int64_t n : layers_per_unit) {
    PT_CHECK(n >= 1, "a partition unit holds at least one layer");
    prefix_.push_back(prefix_.back() + static_cast<size_t>(n));
  }
}

size_t UnitLayerMap::unit_of(size_t first, size_t layer, bool& first_layer) const {
  const size_t global = prefix_[first] + layer;
  PT_CHECK(global < prefix_.back(), "layer beyond the units' layers");
  // The last unit whose first layer is at or before `global`.
  const auto it = std::upper_bound(prefix_.begin(), prefix_.end(), global) - 1;
  first_layer = *it == global;
  return static_cast<size_t>(it - prefix_.begin());
}

}  // namespace pt
