// action.cpp: the text form of schedule actions and whole schedules.
//
// An action prints as "<stage><KIND><mb>" ("2F5", "1SEND_F4"); a schedule
// prints as one line per rank with its actions separated by single spaces.
// Parsing is strict and reports bad input as pt::InputError naming the text,
// the source and the line.
#include <cctype>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/schedule/schedule.hpp"

namespace pt {

namespace {

constexpr ActionKind kAllKinds[] = {ActionKind::F,      ActionKind::B,      ActionKind::W,
                                    ActionKind::SEND_F, ActionKind::RECV_F,
                                    ActionKind::SEND_B, ActionKind::RECV_B};

// At most 9 digits so that the value always fits in an int.
constexpr size_t kMaxDigits = 9;

const char* expected_form() {
  return "expected <stage><KIND><micro-batch> such as 2F5, 0W3 or 1SEND_F4, with "
         "decimal stage and micro-batch and KIND one of F, B, W, SEND_F, RECV_F, "
         "SEND_B, RECV_B";
}

[[noreturn]] void bad_action(const std::string& text, const std::string& why) {
  throw InputError("bad action '" + text + "': " + why + "; " + expected_form());
}

// Reads a run of decimal digits starting at `pos`; advances `pos`.
int read_number(const std::string& text, size_t& pos, const char* what) {
  size_t start = pos;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == start) bad_action(text, std::string("no ") + what + " number");
  if (pos - start > kMaxDigits) bad_action(text, std::string(what) + " number too large");
  return std::stoi(text.substr(start, pos - start));
}

// The KIND is everything between the two numbers.
bool is_kind_char(char c) { return !std::isdigit(static_cast<unsigned char>(c)); }

ActionKind kind_from_name(const std::string& text, const std::string& name) {
  for (ActionKind kind : kAllKinds) {
    if (name == kind_name(kind)) return kind;
  }
  bad_action(text, name.empty() ? "no KIND" : "unknown KIND '" + name + "'");
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  return lines;
}

// True for blank lines and lines whose first non-blank character is '#'.
bool is_ignored_line(const std::string& line) {
  size_t first = line.find_first_not_of(" \t");
  return first == std::string::npos || line[first] == '#';
}

std::vector<Action> parse_rank_line(const std::string& line, const std::string& where) {
  std::vector<Action> actions;
  std::istringstream tokens(line);
  std::string token;
  while (tokens >> token) {
    try {
      actions.push_back(parse_action(token));
    } catch (const InputError& e) {
      throw InputError(where + ": " + e.what());
    }
  }
  return actions;
}

void check_sizes(const std::string& source, int num_stages, int num_micro_batches) {
  if (num_stages < 1 || num_micro_batches < 1) {
    throw InputError(source + ": a schedule needs at least 1 stage and 1 micro-batch (got " +
                     std::to_string(num_stages) + " stages, " +
                     std::to_string(num_micro_batches) + " micro-batches)");
  }
}

constexpr const char* kPlacement = "placement:";

bool is_placement_line(const std::string& line) {
  size_t first = line.find_first_not_of(" \t");
  return first != std::string::npos && line.compare(first, 10, kPlacement) == 0;
}

// "placement: 0 1 1 0": the rank of stage 0, 1, ...
std::vector<int> parse_placement(const std::string& line, const std::string& where) {
  std::istringstream tokens(line.substr(line.find(kPlacement) + 10));
  std::vector<int> placement;
  std::string token;
  while (tokens >> token) {
    if (token.find_first_not_of("0123456789") != std::string::npos || token.size() > kMaxDigits)
      throw InputError(where + ": bad placement entry '" + token +
                       "'; expected 'placement:' and the rank of each stage, e.g. "
                       "'placement: 0 1 1 0'");
    placement.push_back(std::stoi(token));
  }
  return placement;
}

constexpr const char* kWeightGrad = "weight_grad:";

bool is_weight_grad_line(const std::string& line) {
  size_t first = line.find_first_not_of(" \t");
  return first != std::string::npos && line.compare(first, 12, kWeightGrad) == 0;
}

// "weight_grad: step" (the only value a file needs to name: without the line
// the weight gradients run as the W actions say, one micro-batch each).
void parse_weight_grad(const std::string& line, const std::string& where, Schedule& s) {
  std::istringstream tokens(line.substr(line.find(kWeightGrad) + 12));
  std::string value, extra;
  tokens >> value >> extra;
  if (value != "step" || !extra.empty())
    throw InputError(where + ": bad weight_grad line '" + line +
                     "'; expected 'weight_grad: step' (each stage's W actions run as one pass "
                     "over the step's micro-batches)");
  if (s.step_weight_grads || !s.ranks.empty())
    throw InputError(where + ": the weight_grad line must come once, before the rank lines");
  s.step_weight_grads = true;
}

// The header lines that carry a flag of the schedule, each "name: value":
// "timed: measured" (placed at measured times) and "pass: evaluate" (an
// evaluation schedule, forward only). Printed only when set.
struct FlagLine {
  const char* name;   // "timed:"
  const char* value;  // "measured"
  bool Schedule::*flag;
  const char* meaning;  // for the message of a bad line
};
constexpr FlagLine kFlagLines[] = {
    {"timed:", "measured", &Schedule::timed,
     "the placement was made at measured action times, not in unit time"},
    {"pass:", "evaluate", &Schedule::forward_only,
     "an evaluation schedule: forward actions only"},
};

const FlagLine* flag_line_of(const std::string& line) {
  size_t first = line.find_first_not_of(" \t");
  if (first == std::string::npos) return nullptr;
  for (const FlagLine& f : kFlagLines)
    if (line.compare(first, std::strlen(f.name), f.name) == 0) return &f;
  return nullptr;
}

void parse_flag_line(const FlagLine& f, const std::string& line, const std::string& where,
                     Schedule& s) {
  const std::string name(f.name, std::strlen(f.name) - 1);  // without the colon
  std::istringstream tokens(line.substr(line.find(f.name) + std::strlen(f.name)));
  std::string value, extra;
  tokens >> value >> extra;
  if (value != f.value || !extra.empty())
    throw InputError(where + ": bad " + name + " line '" + line + "'; expected '" + f.name + " " +
                     f.value + "' (" + f.meaning + ")");
  if (s.*f.flag || !s.ranks.empty())
    throw InputError(where + ": the " + name + " line must come once, before the rank lines");
  s.*f.flag = true;
}

}  // namespace

std::vector<int> rank_stages(const Schedule& s, int rank) {
  std::vector<int> stages;
  for (int st = 0; st < s.num_stages; ++st)
    if (stage_rank(s, st) == rank) stages.push_back(st);
  return stages;
}

bool is_compute(ActionKind kind) {
  return kind == ActionKind::F || kind == ActionKind::B || kind == ActionKind::W;
}

std::vector<std::vector<Action>> compute_actions(const Schedule& s) {
  std::vector<std::vector<Action>> compute(s.ranks.size());
  for (size_t r = 0; r < s.ranks.size(); ++r)
    for (const Action& a : s.ranks[r])
      if (is_compute(a.kind)) compute[r].push_back(a);
  return compute;
}

bool splits_backward(const Schedule& s) {
  for (const std::vector<Action>& rank : s.ranks)
    for (const Action& a : rank)
      if (a.kind == ActionKind::W) return true;
  return false;
}

const char* kind_name(ActionKind kind) {
  switch (kind) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::SEND_F: return "SEND_F";
    case ActionKind::RECV_F: return "RECV_F";
    case ActionKind::SEND_B: return "SEND_B";
    case ActionKind::RECV_B: return "RECV_B";
    case ActionKind::W: return "W";
  }
  PT_FAIL("unknown ActionKind " + std::to_string(static_cast<int>(kind)));
}

std::string to_string(const Action& a) {
  return std::to_string(a.stage) + kind_name(a.kind) + std::to_string(a.mb);
}

Action parse_action(const std::string& text) {
  size_t pos = 0;
  Action a;
  a.stage = read_number(text, pos, "stage");
  size_t kind_start = pos;
  while (pos < text.size() && is_kind_char(text[pos])) ++pos;
  a.kind = kind_from_name(text, text.substr(kind_start, pos - kind_start));
  a.mb = read_number(text, pos, "micro-batch");
  if (pos != text.size()) bad_action(text, "unexpected text after the micro-batch");
  return a;
}

std::string format_schedule(const Schedule& s) {
  std::string out;
  if (!s.placement.empty()) {
    out += kPlacement;
    for (int r : s.placement) out += " " + std::to_string(r);
    out += '\n';
  }
  if (s.step_weight_grads) out += std::string(kWeightGrad) + " step\n";
  for (const FlagLine& f : kFlagLines)
    if (s.*f.flag) out += std::string(f.name) + " " + f.value + "\n";
  for (const std::vector<Action>& rank : s.ranks) {
    for (size_t i = 0; i < rank.size(); ++i) {
      if (i > 0) out += ' ';
      out += to_string(rank[i]);
    }
    out += '\n';
  }
  return out;
}

Schedule parse_schedule(const std::string& text, const std::string& source_name,
                        int num_stages, int num_micro_batches) {
  check_sizes(source_name, num_stages, num_micro_batches);
  Schedule s;
  s.name = source_name;
  s.num_stages = num_stages;
  s.num_micro_batches = num_micro_batches;
  std::vector<std::string> lines = split_lines(text);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (is_ignored_line(lines[i])) continue;
    std::string where = source_name + ":" + std::to_string(i + 1);
    if (is_placement_line(lines[i])) {
      if (!s.placement.empty() || !s.ranks.empty())
        throw InputError(where + ": the placement line must come once, before the rank lines");
      s.placement = parse_placement(lines[i], where);
      if (static_cast<int>(s.placement.size()) != num_stages)
        throw InputError(where + ": the placement names " + std::to_string(s.placement.size()) +
                         " stages; give the rank of each of the " + std::to_string(num_stages) +
                         " stages");
      continue;
    }
    if (is_weight_grad_line(lines[i])) {
      parse_weight_grad(lines[i], where, s);
      continue;
    }
    if (const FlagLine* flag = flag_line_of(lines[i])) {
      parse_flag_line(*flag, lines[i], where, s);
      continue;
    }
    s.ranks.push_back(parse_rank_line(lines[i], where));
  }
  int rank_lines = static_cast<int>(s.ranks.size());
  if (rank_lines < 1 || rank_lines > num_stages) {
    throw InputError(source_name + ": found " + std::to_string(rank_lines) +
                     " rank lines; expected one line per rank, between 1 and the " +
                     std::to_string(num_stages) +
                     " stages (every rank must own at least one stage)");
  }
  s.num_ranks = rank_lines;
  return s;
}

Schedule load_schedule_file(const std::string& path, int num_stages, int num_micro_batches) {
  std::ifstream in(path);
  if (!in) {
    throw InputError("schedule file '" + path + "' cannot be opened (missing or unreadable)");
  }
  std::ostringstream text;
  text << in.rdbuf();
  return parse_schedule(text.str(), path, num_stages, num_micro_batches);
}

Action make_action(int stage, ActionKind kind, int mb) {
  Action a;
  a.stage = stage;
  a.kind = kind;
  a.mb = mb;
  return a;
}

}  // namespace pt
