// recompute.cpp: parsing and the layer bookkeeping of recomputation policies.
#include "pipetrain/runtime/recompute.hpp"

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
  return "?";
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
}  // namespace

RecomputePolicy parse_recompute_policy(const std::string& text, const std::string& where) {
  RecomputePolicy p;
  if (text == "none") p.kind = RecomputePolicy::Kind::None;
  else if (text == "selective") p.kind = RecomputePolicy::Kind::Selective;
  else if (text == "full") p.kind = RecomputePolicy::Kind::Full;
  else if (parse_every(text, p.every)) p.kind = RecomputePolicy::Kind::Every;
  else
    throw InputError(where + " = \"" + text +
                     "\": expected \"none\", \"selective\", \"every:K\" (K >= 1), \"full\" or \"auto\"");
  return p;
}

bool is_recompute_setting(const std::string& text) {
  size_t k = 0;
  return text == "none" || text == "selective" || text == "full" || text == "auto" ||
         parse_every(text, k);
}

}  // namespace pt
