// fault_injection.cpp: the table of fault-injection hooks, their one parser,
// and their actions (base/fault_injection.hpp).
#include "pipetrain/base/fault_injection.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <sstream>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

const char* const kStallPoints[] = {"step",   "loss",       "grad_norm", "bubble",
                                    "memory", "eval",       "checkpoint", "resume",
                                    "trace",  "startup",    "rebalance", "reduction",
                                    "replica_check"};

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, sep);) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.emplace_back();
  return parts;
}

// A whole non-negative integer, or nothing.
std::optional<long long> whole_number(const std::string& text) {
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  return std::stoll(text);
}

[[noreturn]] void malformed(const FaultHookInfo& info, const std::string& value,
                            const std::string& why) {
  throw InputError(std::string("environment: ") + info.variable + "=\"" + value + "\": " + why +
                   "; expected " + info.format + " (fault-injection hook, docs/reliability.md)");
}

long long number_field(const FaultHookInfo& info, const std::string& value, const std::string& field,
                       const char* name) {
  const auto n = whole_number(field);
  if (!n) malformed(info, value, std::string(name) + " '" + field + "' is not a whole number >= 0");
  return *n;
}

FaultRequest parse_rank_step(const FaultHookInfo& info, const std::string& value) {
  const auto f = split(value, ':');
  if (f.size() != 2) malformed(info, value, "two fields separated by ':' are needed");
  FaultRequest r;
  r.rank = static_cast<int>(number_field(info, value, f[0], "RANK"));
  r.step = number_field(info, value, f[1], "STEP");
  return r;
}

FaultRequest parse_stall(const FaultHookInfo& info, const std::string& value) {
  const auto f = split(value, ':');
  if (f.size() < 2 || f.size() > 3) malformed(info, value, "two or three fields separated by ':' are needed");
  FaultRequest r;
  r.rank = static_cast<int>(number_field(info, value, f[0], "RANK"));
  r.point = f[1];
  if (std::find(std::begin(kStallPoints), std::end(kStallPoints), r.point) == std::end(kStallPoints)) {
    std::string names;
    for (const char* p : kStallPoints) names += std::string(names.empty() ? "" : ", ") + p;
    malformed(info, value, "POINT '" + r.point + "' is not one of " + names);
  }
  if (f.size() == 3) r.step = number_field(info, value, f[2], "STEP");
  return r;
}

// RANK:STEP:NAME, NAME one of `names` (a message fault's KIND, an
// asynchronous save's PHASE): `label` names that field in the message.
FaultRequest parse_rank_step_named(const FaultHookInfo& info, const std::string& value,
                                   const char* label, const std::vector<std::string>& names) {
  const auto f = split(value, ':');
  if (f.size() != 3) malformed(info, value, "three fields separated by ':' are needed");
  FaultRequest r;
  r.rank = static_cast<int>(number_field(info, value, f[0], "RANK"));
  r.step = number_field(info, value, f[1], "STEP");
  r.point = f[2];
  if (std::find(names.begin(), names.end(), r.point) == names.end()) {
    std::string listed;
    for (const std::string& n : names) listed += (listed.empty() ? "" : ", ") + n;
    malformed(info, value, std::string(label) + " '" + r.point + "' is not one of " + listed);
  }
  return r;
}

const std::vector<std::string> kMessageFaults = {"bitflip", "wrong_mb", "truncate", "nan"};

FaultRequest parse_signal(const FaultHookInfo& info, const std::string& value) {
  const auto f = split(value, ':');
  if (f.size() < 2 || f.size() > 3) malformed(info, value, "two or three fields separated by ':' are needed");
  FaultRequest r;
  r.rank = static_cast<int>(number_field(info, value, f[0], "RANK"));
  r.step = number_field(info, value, f[1], "STEP");
  r.signo = f.size() == 3 ? static_cast<int>(number_field(info, value, f[2], "SIGNAL")) : SIGUSR1;
  if (r.signo < 1 || r.signo >= NSIG) malformed(info, value, "SIGNAL is not a signal number");
  return r;
}

FaultRequest parse_rebalance(const FaultHookInfo& info, const std::string& value) {
  const size_t colon = value.find(':');
  if (colon == std::string::npos) malformed(info, value, "no ':' after STEP");
  FaultRequest r;
  r.step = number_field(info, value, value.substr(0, colon), "STEP");
  for (const std::string& c : split(value.substr(colon + 1), ','))
    r.counts.push_back(number_field(info, value, c, "unit count"));
  if (r.counts.empty()) malformed(info, value, "no unit counts after ':'");
  return r;
}

FaultRequest parse_replan_speed(const FaultHookInfo& info, const std::string& value) {
  FaultRequest r;
  for (const std::string& f : split(value, ',')) {
    char* end = nullptr;
    const double x = std::strtod(f.c_str(), &end);
    if (f.empty() || *end != '\0' || !(x > 0.0) || !std::isfinite(x))
      malformed(info, value, "factor '" + f + "' is not a number > 0");
    r.factors.push_back(x);
  }
  if (r.factors.empty()) malformed(info, value, "no factors");
  return r;
}

FaultRequest parse(const FaultHookInfo& info, const std::string& value) {
  switch (info.hook) {
    case FaultHook::Stall: return parse_stall(info, value);
    case FaultHook::Signal: return parse_signal(info, value);
    case FaultHook::Rebalance: return parse_rebalance(info, value);
    case FaultHook::ReplanSpeed: return parse_replan_speed(info, value);
    case FaultHook::MessageFault: return parse_rank_step_named(info, value, "KIND", kMessageFaults);
    case FaultHook::BlasForced: return {};
    case FaultHook::AsyncSave: return parse_rank_step_named(info, value, "PHASE", async_save_phases());
    default: return parse_rank_step(info, value);
  }
}

struct ParsedHooks {
  std::once_flag once;
  std::vector<std::optional<FaultRequest>> requests;  // (hooks), in FaultHook order
};

ParsedHooks& parsed() {
  static ParsedHooks p;
  return p;
}

// Parses every hook the first time; the exception of a malformed value
// propagates to that caller, and every later call throws it again.
const std::vector<std::optional<FaultRequest>>& requests() {
  ParsedHooks& p = parsed();
  std::call_once(p.once, [&p] {
    std::vector<std::optional<FaultRequest>> r;
    for (const FaultHookInfo& info : fault_hooks()) {
      const char* value = std::getenv(info.variable);
      r.push_back(value ? std::optional<FaultRequest>(parse(info, value)) : std::nullopt);
    }
    p.requests = std::move(r);
  });
  return p.requests;
}

}  // namespace

const std::vector<FaultHookInfo>& fault_hooks() {
  static const std::vector<FaultHookInfo> table = {
      {FaultHook::Stall, "PIPETRAIN_TEST_STALL", "RANK:POINT[:STEP]",
       "world rank RANK stops (SIGSTOP) at the named point, in step STEP or the first time"},
      {FaultHook::NonFinite, "PIPETRAIN_TEST_NONFINITE", "RANK:STEP",
       "world rank RANK makes one gradient inf in step STEP"},
      {FaultHook::KillBeforePublish, "PIPETRAIN_TEST_KILL_BEFORE_PUBLISH", "RANK:STEP",
       "world rank RANK is killed just before the checkpoint of STEP steps is written"},
      {FaultHook::KillAfterPublish, "PIPETRAIN_TEST_KILL_AFTER_PUBLISH", "RANK:STEP",
       "world rank RANK is killed just after `latest` names the checkpoint of STEP steps"},
      {FaultHook::CrashInCheckpoint, "PIPETRAIN_TEST_CRASH_IN_CHECKPOINT", "RANK:STEP",
       "world rank RANK is killed halfway through writing its file of the checkpoint of STEP steps"},
      {FaultHook::Signal, "PIPETRAIN_TEST_SIGNAL", "RANK:STEP[:SIGNAL]",
       "world rank RANK raises SIGNAL (default SIGUSR1) before 0-based step STEP"},
      {FaultHook::Rebalance, "PIPETRAIN_TEST_REBALANCE", "STEP:C0,C1,...",
       "after 0-based step STEP the stages move to these unit counts, whatever was measured"},
      {FaultHook::BlasForced, "PIPETRAIN_TEST_BLAS_FORCED", "any value",
       "OPENBLAS_CORETYPE was set by a test, not the user: pipetrain may replace it"},
      {FaultHook::MessageFault, "PIPETRAIN_TEST_MESSAGE_FAULT", "RANK:STEP:KIND",
       "world rank RANK damages the first inter-stage message it sends in step STEP (KIND: "
       "bitflip, wrong_mb, truncate or nan)"},
      {FaultHook::CorruptReplica, "PIPETRAIN_TEST_CORRUPT_REPLICA", "RANK:STEP",
       "world rank RANK flips one bit of one of its parameters after the update of step STEP"},
      {FaultHook::AsyncSave, "PIPETRAIN_TEST_ASYNC_SAVE_FAULT", "RANK:STEP:PHASE",
       "world rank RANK is killed (or, for PHASE write_error, its write fails) at that phase of "
       "the asynchronous checkpoint of STEP steps"},
      {FaultHook::ReplanSpeed, "PIPETRAIN_TEST_REPLAN_SPEED", "F0,F1,...",
       "re-planning (pipeline.auto_replan_every) takes as measured the plan's predicted times "
       "with pipeline rank r computing F_r times as slow, not the clock"},
  };
  return table;
}

const FaultHookInfo& fault_hook_info(FaultHook hook) {
  return fault_hooks().at(static_cast<size_t>(hook));
}

FaultRequest parse_fault_hook(FaultHook hook, const std::string& value) {
  return parse(fault_hook_info(hook), value);
}

void check_fault_hooks() { requests(); }

std::optional<FaultRequest> fault_request(FaultHook hook) {
  return requests().at(static_cast<size_t>(hook));
}

bool fault_due(FaultHook hook, int rank, long long step) {
  const auto& r = requests().at(static_cast<size_t>(hook));
  return r && r->rank == rank && (r->step < 0 || r->step == step);
}

std::vector<std::string> active_fault_hooks() {
  std::vector<std::string> lines;
  for (const FaultHookInfo& info : fault_hooks())
    if (const char* value = std::getenv(info.variable))
      lines.push_back(std::string(info.variable) + "=" + value + ": " + info.effect);
  return lines;
}

void fault_point(const char* point, long long step) {
  static bool fired = false;
  const auto& r = requests().at(static_cast<size_t>(FaultHook::Stall));
  if (!r || fired || r->point != point || r->rank != world_rank()) return;
  if (r->step >= 0 && r->step != step) return;
  fired = true;
  std::fprintf(stderr, "pipetrain: rank %d: test fault: stopping at '%s' (step %lld)\n", r->rank,
               point, step);
  std::fflush(stderr);
  std::raise(SIGSTOP);
}

bool nonfinite_gradient_requested(long long step) {
  return fault_due(FaultHook::NonFinite, world_rank(), step);
}

std::string message_fault_due(long long step) {
  static bool fired = false;
  if (fired || !fault_due(FaultHook::MessageFault, world_rank(), step)) return "";
  fired = true;
  return fault_request(FaultHook::MessageFault)->point;
}

bool replica_corruption_due(long long step) {
  static bool fired = false;
  if (fired || !fault_due(FaultHook::CorruptReplica, world_rank(), step)) return false;
  fired = true;
  return true;
}

void kill_if_due(FaultHook hook, int rank, long long step, const std::string& detail) {
  if (!fault_due(hook, rank, step)) return;
  std::fprintf(stderr, "pipetrain: rank %d: %s: killed %s\n", rank, fault_hook_info(hook).variable,
               detail.c_str());
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::abort();
}

const std::vector<std::string>& async_save_phases() {
  static const std::vector<std::string> phases = {"staged", "written", "fsynced",
                                                  "bound", "published", "write_error"};
  return phases;
}

bool async_save_fault(int rank, long long step, const char* phase, const std::string& detail) {
  const auto& r = requests().at(static_cast<size_t>(FaultHook::AsyncSave));
  if (!r || r->rank != rank || r->step != step || r->point != phase) return false;
  if (r->point == "write_error") return true;
  std::fprintf(stderr, "pipetrain: rank %d: PIPETRAIN_TEST_ASYNC_SAVE_FAULT: killed at phase '%s' %s\n",
               rank, phase, detail.c_str());
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::abort();
}

}  // namespace pt
