// plan_text.hpp: number formatting shared by the planner's messages and
// tables (private to src/plan).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pt {
namespace plan_text {

std::string bytes(double bytes);     // "12345678 bytes (11.77 MiB)"
std::string gib(double bytes);       // "11.77 GiB"
std::string size(double bytes);      // "11.77 GiB", or "12.3 MiB" below 1 GiB
std::string number(double value);    // %.6g
// "[3, 3, 2]"; runs of 3 or more equal values as "v xk": "[2 x62, 1, 1]".
std::string list(const std::vector<int64_t>& values);
std::string list(const std::vector<int>& values);

}  // namespace plan_text
}  // namespace pt
