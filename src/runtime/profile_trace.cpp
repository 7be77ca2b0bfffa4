// profile_trace.cpp: profile_from_trace: a cost profile from the events of
// an earlier traced run (trace.h5, read by io/trace_io.hpp).
//
// A trace times whole stages, not units, so each stage's times are split
// over its units: F, B and recompute in proportion to the units' forward
// matmul FLOPs, the optimizer in proportion to their parameter bytes. The
// approximations this makes are listed in docs/profile.md.
#include <algorithm>
#include <map>

#include "profile_parts.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"

namespace pt {

namespace {

bool is(const TraceEvent& e, EventKind kind) { return e.kind == static_cast<int32_t>(kind); }

double duration_us(const TraceEvent& e) { return e.end_us - e.start_us; }

// Medians over the used steps of one stage's events, in seconds.
struct StageTimes {
  double forward_s = 0.0;    // an F without the waits nested in it
  double backward_s = 0.0;   // a B without its waits and recompute
  double recompute_s = 0.0;  // the recompute inside a B
  bool recomputed = false;   // RECOMPUTE events were recorded
  double optimizer_s = 0.0;  // the optimizer update of a step
  size_t forwards = 0, backwards = 0;
};

// Start order, an enclosing event before the events nested in it.
std::vector<TraceEvent> in_nesting_order(std::vector<TraceEvent> events) {
  std::stable_sort(events.begin(), events.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return a.start_us != b.start_us ? a.start_us < b.start_us : a.end_us > b.end_us;
  });
  return events;
}

// Total time of the `kind` events nested in events[i] (same rank).
double nested_us(const std::vector<TraceEvent>& events, size_t i, EventKind kind) {
  double total = 0.0;
  for (size_t j = i + 1; j < events.size() && events[j].start_us < events[i].end_us; ++j)
    if (is(events[j], kind) && events[j].end_us <= events[i].end_us) total += duration_us(events[j]);
  return total;
}

StageTimes stage_times(const std::vector<TraceEvent>& rank_events, int64_t first_step) {
  const std::vector<TraceEvent> events = in_nesting_order(rank_events);
  std::vector<double> forward, backward, recompute, optimizer;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.step < first_step) continue;
    if (is(e, EventKind::F)) {
      forward.push_back(duration_us(e) - nested_us(events, i, EventKind::Wait));
    } else if (is(e, EventKind::B)) {
      const double r = nested_us(events, i, EventKind::Recompute);
      backward.push_back(duration_us(e) - nested_us(events, i, EventKind::Wait) - r);
      recompute.push_back(r);
    } else if (is(e, EventKind::Optimizer)) {
      optimizer.push_back(duration_us(e));
    }
  }
  StageTimes t;
  t.forwards = forward.size();
  t.backwards = backward.size();
  t.forward_s = median(forward) * 1e-6;
  t.backward_s = median(backward) * 1e-6;
  t.recompute_s = median(recompute) * 1e-6;
  t.recomputed = std::any_of(recompute.begin(), recompute.end(), [](double r) { return r > 0.0; });
  t.optimizer_s = median(optimizer) * 1e-6;
  return t;
}

// Step 0 warms caches up; it is left out when later steps exist.
int64_t first_used_step(const RunTrace& trace) {
  for (const auto& rank : trace.events)
    for (const TraceEvent& e : rank)
      if (e.step > 0) return 1;
  return 0;
}

// [begin, end) cost units of each stage: its partition units, with the
// family's pinned units (the GPT's embedding and head) on the first and last.
std::vector<std::pair<size_t, size_t>> stage_unit_ranges(const Deck& deck, int stages) {
  const std::vector<int64_t> counts =
      partition_units(model_units(deck.model), stages, deck.pipeline.partition);
  const ModelFamily& family = model_family(deck.model);
  std::vector<std::pair<size_t, size_t>> ranges;
  size_t next = 0;
  for (int s = 0; s < stages; ++s) {
    const size_t pinned = static_cast<size_t>((s == 0 ? family.pinned_front : 0) +
                                              (s == stages - 1 ? family.pinned_back : 0));
    ranges.emplace_back(next, next + static_cast<size_t>(counts[s]) + pinned);
    next = ranges.back().second;
  }
  return ranges;
}

// `value` shared in proportion to `weight` (equally when the weights are 0).
double share(double value, double weight, double total_weight, size_t count) {
  return total_weight > 0.0 ? value * weight / total_weight : value / static_cast<double>(count);
}

void split_stage(const StageTimes& t, std::vector<UnitCost>& units, size_t begin, size_t end) {
  double flops = 0.0, params = 0.0;
  for (size_t u = begin; u < end; ++u) {
    flops += units[u].forward_flops;
    params += units[u].param_bytes;
  }
  const size_t n = end - begin;
  for (size_t u = begin; u < end; ++u) {
    UnitCost& unit = units[u];
    unit.forward_s = share(t.forward_s, unit.forward_flops, flops, n);
    unit.backward_s = share(t.backward_s, unit.forward_flops, flops, n);
    // Without recomputation in the run, a re-run costs about a forward.
    unit.recompute_s = t.recomputed ? share(t.recompute_s, unit.forward_flops, flops, n) : unit.forward_s;
    unit.recompute_end_s = unit.recompute_s;
    unit.optimizer_s = share(t.optimizer_s, unit.param_bytes, params, n);
  }
}

// Latency: half the best round trip of the clock alignment's 8-byte
// ping-pong. Bandwidth: the activation message over the shortest SEND
// window (post to observed completion, an upper bound on the transfer);
// 0 (no bandwidth term) when that window is not longer than the latency.
LinkCost trace_link(const RunTrace& trace, double message_bytes, int64_t first_step) {
  LinkCost link;
  if (trace.num_stages < 2) return link;
  std::vector<double> errors;
  for (size_t r = 1; r < trace.clock_error_us.size(); ++r) errors.push_back(trace.clock_error_us[r]);
  link.latency_s = median(errors) * 1e-6;
  double shortest_us = -1.0;
  for (const auto& rank : trace.events)
    for (const TraceEvent& e : rank)
      if (is(e, EventKind::Send) && e.step >= first_step && (shortest_us < 0.0 || duration_us(e) < shortest_us))
        shortest_us = duration_us(e);
  const double transfer_s = shortest_us * 1e-6 - link.latency_s;
  if (shortest_us > 0.0 && transfer_s > 0.0) link.bandwidth_bytes_per_s = message_bytes / transfer_s;
  return link;
}

// Per step the shortest REDUCTION over the ranks (the rank that arrives last
// at the step's collectives waits least for the others); their median.
double trace_step_overhead(const RunTrace& trace, int64_t first_step) {
  std::map<int64_t, double> shortest_us;
  for (const auto& rank : trace.events)
    for (const TraceEvent& e : rank)
      if (is(e, EventKind::Reduction) && e.step >= first_step) {
        auto [it, fresh] = shortest_us.emplace(e.step, duration_us(e));
        if (!fresh) it->second = std::min(it->second, duration_us(e));
      }
  std::vector<double> values;
  for (const auto& entry : shortest_us) values.push_back(entry.second);
  return median(values) * 1e-6;
}

void check_trace(const Deck& deck, const RunTrace& trace) {
  const std::string& file = trace.source;
  if (trace.num_stages < 1 || static_cast<int>(trace.events.size()) != trace.num_stages)
    throw InputError(file + ": events of " + std::to_string(trace.events.size()) + " ranks for " +
                     std::to_string(trace.num_stages) + " stages; expected one rank per stage");
  const bool partition_fits = deck.pipeline.partition.empty() ||
                              static_cast<int>(deck.pipeline.partition.size()) == trace.num_stages;
  if (!partition_fits || model_units(deck.model) < trace.num_stages)
    throw InputError(file + ": the run's deck does not split its model into " +
                     std::to_string(trace.num_stages) + " stages (pipeline.partition, " +
                     "model." + model_family(deck.model).units_key + ")");
}

}  // namespace

ModelProfile profile_from_trace(const Deck& deck, const RunTrace& trace, Backend& be,
                                const ProfileOptions& options) {
  check_trace(deck, trace);
  ModelProfile p = profile_memory(deck, be, options);
  p.backend = kind_name(deck.training.device);
  p.cache = "as the traced run had it (times measured in that run)";
  p.calibration = "none: the traced run's stages measured whole";
  if (options.kernels.empty())
    p.kernels = "not recorded (derived from the trace " + trace.source + "); GEMM operands " +
                kind_name(deck.training.precision);
  const int64_t first_step = first_used_step(trace);
  const auto ranges = stage_unit_ranges(deck, trace.num_stages);
  double message_bytes = 0.0;
  for (int s = 0; s < trace.num_stages; ++s) {
    const StageTimes t = stage_times(trace.events[static_cast<size_t>(s)], first_step);
    if (t.forwards == 0 || t.backwards == 0)
      throw InputError(trace.source + ": rank " + std::to_string(s) + " (stage " + std::to_string(s) +
                       ") has no F and B events of training steps; expected the trace of a "
                       "training run (output.trace = true)");
    split_stage(t, p.units, ranges[s].first, ranges[s].second);
    if (s + 1 < trace.num_stages)
      message_bytes = std::max(message_bytes, p.units[ranges[s].second - 1].output_bytes);
  }
  p.link = trace_link(trace, message_bytes, first_step);
  p.step_overhead_s = trace_step_overhead(trace, first_step);
  return p;
}

}  // namespace pt
