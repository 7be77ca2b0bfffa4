// plan_text.cpp: number formatting for the planner's messages and tables.
#include "plan_text.hpp"

#include <cmath>
#include <cstdio>

namespace pt {
namespace plan_text {

namespace {

constexpr size_t kShortestRun = 3;

template <typename T>
std::string list_of(const std::vector<T>& values) {
  std::string text = "[";
  for (size_t i = 0; i < values.size();) {
    size_t run = 1;
    while (i + run < values.size() && values[i + run] == values[i]) ++run;
    if (run < kShortestRun) run = 1;
    text += (i ? ", " : "") + std::to_string(values[i]);
    if (run >= kShortestRun) text += " x" + std::to_string(run);
    i += run;
  }
  return text + "]";
}

}  // namespace

std::string bytes(double value) {
  char buf[64];
  const double mib = value / 1048576.0;
  if (std::fabs(mib) >= 1024.0)
    std::snprintf(buf, sizeof buf, "%.0f bytes (%.2f GiB)", value, mib / 1024.0);
  else
    std::snprintf(buf, sizeof buf, "%.0f bytes (%.2f MiB)", value, mib);
  return buf;
}

std::string gib(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", value / 1073741824.0);
  return buf;
}

std::string size(double value) {
  if (std::fabs(value) >= 1073741824.0) return gib(value);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g MiB", value / 1048576.0);
  return buf;
}

std::string number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.6g", value);
  return buf;
}

std::string list(const std::vector<int64_t>& values) { return list_of(values); }
std::string list(const std::vector<int>& values) { return list_of(values); }

}  // namespace plan_text
}  // namespace pt
