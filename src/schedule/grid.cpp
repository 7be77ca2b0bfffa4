// grid.cpp: the rank x step grid of a schedule (pipetrain validate
// --print-schedule and every validator error), marked actions as ">2F5<".
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/schedule/schedule.hpp"

namespace pt {

namespace {

using Mark = std::pair<int, int>;  // (rank, index in that rank's list)

constexpr size_t kGridLineBudget = 120;  // characters per grid line

std::string pad_right(std::string text, size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

std::string trim_right(std::string line) {
  line.erase(line.find_last_not_of(' ') + 1);
  return line;
}

bool is_marked(const std::vector<Mark>& marks, int rank, int index) {
  return std::find(marks.begin(), marks.end(), Mark{rank, index}) != marks.end();
}

}  // namespace

// Columns are one step (action index) wide; long schedules wrap into blocks
// of columns so that each line stays within kGridLineBudget characters.
std::string format_grid(const Schedule& s, const std::vector<std::pair<int, int>>& marks) {
  size_t cell = 4, steps = 0;
  for (const std::vector<Action>& rank : s.ranks) {
    steps = std::max(steps, rank.size());
    for (const Action& a : rank) cell = std::max(cell, to_string(a).size() + 2);
  }
  int num_rows = static_cast<int>(s.ranks.size());
  size_t label = std::string("rank " + std::to_string(std::max(num_rows - 1, 0))).size();
  size_t per_block = std::max<size_t>(1, (kGridLineBudget - label - 2) / (cell + 1));
  std::string out;
  for (size_t start = 0; start == 0 || start < steps; start += per_block) {
    size_t end = std::min(steps, start + per_block);
    std::string header = pad_right("step", label) + " |";
    for (size_t i = start; i < end; ++i) header += " " + pad_right(" " + std::to_string(i), cell);
    out += (start > 0 ? "\n" : "") + trim_right(header) + "\n";
    for (int r = 0; r < num_rows; ++r) {
      std::string line = pad_right("rank " + std::to_string(r), label) + " |";
      for (size_t i = start; i < end && i < s.ranks[r].size(); ++i) {
        std::string text = to_string(s.ranks[r][i]);
        bool mark = is_marked(marks, r, static_cast<int>(i));
        line += " " + pad_right(mark ? ">" + text + "<" : " " + text + " ", cell);
      }
      out += trim_right(line) + "\n";
    }
  }
  return out;
}


}  // namespace pt
