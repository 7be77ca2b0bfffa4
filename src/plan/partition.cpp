// partition.cpp: the exact contiguous partition solver.
//
// best[s][e] = the smallest achievable value (the objective's maximum over
// stages 0..s) when stages 0..s hold the first e partitionable units:
//   best[0][e] = value(0, 0, e)
//   best[s][e] = min over a < e of max(best[s-1][a], value(s, a, e))
// For each e the start a runs downwards from e - 1; the search stops as soon
// as a lower bound of value(s, a, e) that only grows as a decreases (the
// stage's time, or its peak without the terms that can shrink) reaches the
// best value found, which no smaller a can then beat. Balanced stages over
// the budget have value +infinity; once even the lower bound of a stage's
// peak is over the budget, smaller a are skipped too. The result is exact;
// brute_force_partition checks it in tests.
#include "pipetrain/plan/partition.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "pipetrain/base/error.hpp"
#include "plan_text.hpp"

namespace pt {

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

const PlanRecompute& policy_of(const PartitionSetup& setup, int stage) {
  return setup.recompute[setup.recompute.size() == 1 ? 0 : static_cast<size_t>(stage)];
}

double time_scale_of(const PartitionSetup& setup, size_t stage) {
  return setup.stage_time_scale.empty() ? 1.0 : setup.stage_time_scale[stage];
}

void check_setup(const UnitLayout& layout, PartitionObjective objective,
                 const PartitionSetup& setup) {
  const int p = setup.num_stages;
  if (p < 1) throw InputError("a partition needs at least 1 stage (got " + std::to_string(p) + ")");
  if (static_cast<int64_t>(layout.partitionable) < p)
    throw InputError(std::to_string(p) + " stages need at least " + std::to_string(p) +
                     " partitionable units (one per stage); the model has " +
                     std::to_string(layout.partitionable));
  if (static_cast<int>(setup.in_flight.size()) != p)
    throw InputError("partition setup: " + std::to_string(setup.in_flight.size()) +
                     " in-flight counts for " + std::to_string(p) + " stages");
  for (int n : setup.in_flight)
    if (n < 0) throw InputError("partition setup: negative in-flight count " + std::to_string(n));
  if (setup.recompute.size() != 1 && static_cast<int>(setup.recompute.size()) != p)
    throw InputError("partition setup: " + std::to_string(setup.recompute.size()) +
                     " recompute policies for " + std::to_string(p) +
                     " stages; give one, or one per stage");
  if (!setup.stage_time_scale.empty() && static_cast<int>(setup.stage_time_scale.size()) != p)
    throw InputError("partition setup: " + std::to_string(setup.stage_time_scale.size()) +
                     " stage time scales for " + std::to_string(p) + " stages");
  for (double k : setup.stage_time_scale)
    if (!(k > 0.0) || !std::isfinite(k))
      throw InputError("partition setup: a stage time scale must be finite and > 0 (got " +
                       plan_text::number(k) + ")");
  if (!(setup.memory_budget_bytes >= 0.0))
    throw InputError("partition setup: the memory budget must be >= 0 bytes (got " +
                     plan_text::number(setup.memory_budget_bytes) + ")");
  if (objective == PartitionObjective::Balanced && !(setup.memory_budget_bytes > 0.0))
    throw InputError("the balanced partition needs a memory budget > 0 bytes (got " +
                     plan_text::number(setup.memory_budget_bytes) + ")");
}

// The dynamic programme of the comment at the top of this file.
class Solver {
 public:
  Solver(const ModelProfile& profile, PartitionObjective objective, const PartitionSetup& setup)
      : ranges_(profile), layout_(unit_layout(profile)), objective_(objective), setup_(setup),
        stages_(setup.num_stages), units_(layout_.partitionable) {}

  // Counts per stage, or an empty vector when no partition has a finite value.
  std::vector<int64_t> solve() {
    std::vector<double> prev(units_ + 1, kInfinity), next(units_ + 1, kInfinity);
    choice_.assign(static_cast<size_t>(stages_) * (units_ + 1), -1);
    for (size_t e = first_end(0); e <= last_end(0); ++e) prev[e] = value(0, 0, e);
    for (int s = 1; s < stages_; ++s) {
      std::fill(next.begin(), next.end(), kInfinity);
      for (size_t e = first_end(s); e <= last_end(s); ++e) next[e] = best_start(s, e, prev);
      std::swap(prev, next);
    }
    if (prev[units_] == kInfinity) return {};
    return counts();
  }

 private:
  // Only the last unit ends the last stage.
  size_t first_end(int s) const { return s == stages_ - 1 ? units_ : static_cast<size_t>(s) + 1; }
  // Later stages need one unit each; the last stage ends at the last unit.
  size_t last_end(int s) const {
    return s == stages_ - 1 ? units_ : units_ - static_cast<size_t>(stages_ - 1 - s);
  }
  size_t first_unit(int s, size_t a) const { return s == 0 ? 0 : layout_.leading + a; }
  size_t end_unit(int s, size_t e) const {
    return s == stages_ - 1 ? ranges_.size() : layout_.leading + e;
  }
  double in_flight(int s) const { return setup_.in_flight[static_cast<size_t>(s)]; }

  double peak(int s, size_t a, size_t e) const {
    const StageCost c = ranges_.cost(first_unit(s, a), end_unit(s, e), s == 0, s == stages_ - 1,
                                     policy_of(setup_, s));
    return c.peak_bytes(in_flight(s));
  }

  double value(int s, size_t a, size_t e) const {
    if (objective_ == PartitionObjective::Memory) return peak(s, a, e);
    const double time = scaled_time(s, a, e);
    if (objective_ == PartitionObjective::Balanced && peak(s, a, e) > setup_.memory_budget_bytes)
      return kInfinity;
    return time;
  }

  // Never decreases as a decreases.
  double bound(int s, size_t a, size_t e) const {
    if (objective_ == PartitionObjective::Memory)
      return ranges_.peak_lower_bound(first_unit(s, a), end_unit(s, e), policy_of(setup_, s),
                                      in_flight(s));
    return scaled_time(s, a, e);
  }

  double scaled_time(int s, size_t a, size_t e) const {
    return time_scale_of(setup_, static_cast<size_t>(s)) *
           ranges_.time_s(first_unit(s, a), end_unit(s, e), policy_of(setup_, s));
  }

  bool over_budget_for_good(int s, size_t a, size_t e) const {
    return objective_ == PartitionObjective::Balanced &&
           ranges_.peak_lower_bound(first_unit(s, a), end_unit(s, e), policy_of(setup_, s),
                                    in_flight(s)) > setup_.memory_budget_bytes;
  }

  double best_start(int s, size_t e, const std::vector<double>& prev) {
    double best = kInfinity;
    const size_t highest = std::min(e - 1, last_end(s - 1));
    for (size_t a = highest + 1; a-- > static_cast<size_t>(s);) {
      if (bound(s, a, e) >= best || over_budget_for_good(s, a, e)) break;
      if (prev[a] >= best) continue;
      const double v = std::max(prev[a], value(s, a, e));
      if (v < best) {
        best = v;
        choice_[index(s, e)] = static_cast<int>(a);
      }
    }
    return best;
  }

  size_t index(int s, size_t e) const { return static_cast<size_t>(s) * (units_ + 1) + e; }

  std::vector<int64_t> counts() const {
    std::vector<int64_t> counts(static_cast<size_t>(stages_));
    size_t e = units_;
    for (int s = stages_ - 1; s > 0; --s) {
      const int a = choice_[index(s, e)];
      PT_CHECK(a >= 0, "the partition solver lost a stage boundary");
      counts[static_cast<size_t>(s)] = static_cast<int64_t>(e) - a;
      e = static_cast<size_t>(a);
    }
    counts[0] = static_cast<int64_t>(e);
    return counts;
  }

  UnitRanges ranges_;
  UnitLayout layout_;
  PartitionObjective objective_;
  const PartitionSetup& setup_;
  int stages_;
  size_t units_;
  std::vector<int> choice_;  // (stage, end) -> start of that stage in the best solution
};

std::string uniform_reason(const std::vector<int64_t>& counts) {
  const int64_t p = static_cast<int64_t>(counts.size());
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  std::string text = "uniform: " + std::to_string(total) + " units over " + std::to_string(p) +
                     " stages, " + std::to_string(total / p) + " each";
  if (total % p == 1) text += ", the first stage one more";
  if (total % p > 1) text += ", the first " + std::to_string(total % p) + " stages one more";
  return text;
}

std::string stage_summary(const PartitionResult& r) {
  return "slowest stage " + std::to_string(r.slowest_stage) + " at " +
         plan_text::number(r.max_time_s) + " s per micro-batch (F + B + recompute), largest peak " +
         plan_text::gib(r.max_peak_bytes) + " on stage " + std::to_string(r.largest_stage);
}

std::string reason_for(const PartitionResult& r, const PartitionSetup& setup) {
  const std::string counts = " " + plan_text::list(r.units_per_stage) + ": ";
  double total = 0.0;
  for (double t : r.stage_time_s) total += t;
  switch (r.objective) {
    case PartitionObjective::Uniform: return uniform_reason(r.units_per_stage) + "; " + stage_summary(r);
    case PartitionObjective::Time:
      return "time" + counts + "the slowest stage is the smallest achievable; " + stage_summary(r) +
             " (total / stages = " + plan_text::number(total / r.stage_time_s.size()) + " s)";
    case PartitionObjective::Memory:
      return "memory" + counts + "the largest stage peak is the smallest achievable; " +
             stage_summary(r);
    case PartitionObjective::Balanced:
      return "balanced" + counts + "the fastest slowest stage with every peak within " +
             plan_text::gib(setup.memory_budget_bytes) + "; " + stage_summary(r);
  }
  PT_FAIL("unknown partition objective");
}

PartitionResult evaluate_checked(const ModelProfile& profile, const std::vector<int64_t>& counts,
                                 const PartitionSetup& setup, PartitionObjective objective) {
  PartitionResult r;
  r.objective = objective;
  r.units_per_stage = counts;
  r.stages = stage_costs(profile, counts, setup.recompute);
  for (size_t s = 0; s < r.stages.size(); ++s) {
    r.stage_time_s.push_back(time_scale_of(setup, s) * r.stages[s].time_per_micro_batch_s());
    r.stage_peak_bytes.push_back(r.stages[s].peak_bytes(setup.in_flight[s]));
    if (r.stage_time_s[s] > r.max_time_s || s == 0) {
      r.max_time_s = r.stage_time_s[s];
      r.slowest_stage = static_cast<int>(s);
    }
    if (r.stage_peak_bytes[s] > r.max_peak_bytes || s == 0) {
      r.max_peak_bytes = r.stage_peak_bytes[s];
      r.largest_stage = static_cast<int>(s);
    }
  }
  return r;
}

[[noreturn]] void budget_unmet(const PartitionResult& frugal, const PartitionSetup& setup) {
  std::string policies;
  for (const PlanRecompute& p : setup.recompute) policies += (policies.empty() ? "" : ", ") + p.name();
  throw MemoryBudgetError(
      "memory budget " + plan_text::bytes(setup.memory_budget_bytes) +
      " is below the smallest achievable largest stage peak " +
      plan_text::bytes(frugal.max_peak_bytes) + ", on stage " +
      std::to_string(frugal.largest_stage) + " of the memory-optimal partition " +
      plan_text::list(frugal.units_per_stage) + " (" + std::to_string(setup.num_stages) +
      " stages, in flight " + plan_text::list(setup.in_flight) + ", recompute " + policies +
      "); raise the budget, recompute more, use fewer micro-batches in flight or more stages");
}

// Memory objective over the budget, or balanced without any feasible partition.
void check_budget(const PartitionResult& r, const PartitionSetup& setup,
                  const std::function<PartitionResult()>& memory_optimum) {
  const double budget = setup.memory_budget_bytes;
  if (r.objective == PartitionObjective::Memory && budget > 0.0 && r.max_peak_bytes > budget)
    budget_unmet(r, setup);
  if (r.objective == PartitionObjective::Balanced && r.units_per_stage.empty())
    budget_unmet(memory_optimum(), setup);
}

}  // namespace

PartitionStrategy strategy_of(PartitionObjective objective) {
  switch (objective) {
    case PartitionObjective::Uniform: return PartitionStrategy::Uniform;
    case PartitionObjective::Time: return PartitionStrategy::Time;
    case PartitionObjective::Memory: return PartitionStrategy::Memory;
    case PartitionObjective::Balanced: return PartitionStrategy::Balanced;
  }
  PT_FAIL("unknown partition objective");
}

PartitionObjective objective_of(PartitionStrategy strategy) {
  for (PartitionObjective o : {PartitionObjective::Uniform, PartitionObjective::Time,
                               PartitionObjective::Memory, PartitionObjective::Balanced})
    if (strategy_of(o) == strategy) return o;
  PT_FAIL("an explicit partition has no objective");
}

const char* objective_name(PartitionObjective objective) { return kind_name(strategy_of(objective)); }

PartitionObjective parse_partition_objective(const std::string& text) {
  for (PartitionObjective o : {PartitionObjective::Uniform, PartitionObjective::Time,
                               PartitionObjective::Memory, PartitionObjective::Balanced})
    if (text == objective_name(o)) return o;
  throw InputError("partition objective '" + text +
                   "': expected \"uniform\", \"time\", \"memory\" or \"balanced\"");
}

std::vector<int64_t> uniform_counts(int64_t units, int num_stages) {
  if (num_stages < 1 || units < num_stages)
    throw InputError(std::to_string(num_stages) + " stages need at least " +
                     std::to_string(std::max(num_stages, 1)) + " partitionable units; got " +
                     std::to_string(units));
  std::vector<int64_t> counts;
  for (int s = 0; s < num_stages; ++s)
    counts.push_back(units / num_stages + (s < units % num_stages ? 1 : 0));
  return counts;
}

PartitionResult evaluate_partition(const ModelProfile& profile,
                                   const std::vector<int64_t>& units_per_stage,
                                   const PartitionSetup& setup, PartitionObjective objective) {
  PartitionSetup sized = setup;
  sized.num_stages = static_cast<int>(units_per_stage.size());
  check_setup(unit_layout(profile), PartitionObjective::Uniform, sized);
  PartitionResult r = evaluate_checked(profile, units_per_stage, sized, objective);
  r.reason = "given " + plan_text::list(units_per_stage) + ": " + stage_summary(r);
  return r;
}

double objective_value(const PartitionResult& r, PartitionObjective objective,
                       const PartitionSetup& setup) {
  if (objective == PartitionObjective::Memory) return r.max_peak_bytes;
  if (objective == PartitionObjective::Balanced && r.max_peak_bytes > setup.memory_budget_bytes)
    return kInfinity;
  return r.max_time_s;
}

PartitionResult solve_partition(const ModelProfile& profile, PartitionObjective objective,
                                const PartitionSetup& setup) {
  const UnitLayout layout = unit_layout(profile);
  check_setup(layout, objective, setup);
  std::vector<int64_t> counts =
      objective == PartitionObjective::Uniform
          ? uniform_counts(static_cast<int64_t>(layout.partitionable), setup.num_stages)
          : Solver(profile, objective, setup).solve();
  PartitionResult r;
  r.objective = objective;
  if (!counts.empty()) {
    r = evaluate_checked(profile, counts, setup, objective);
    r.reason = reason_for(r, setup);
  }
  check_budget(r, setup, [&] {
    return solve_partition(profile, PartitionObjective::Memory,
                           PartitionSetup{setup.num_stages, setup.in_flight, setup.recompute, 0.0, {}});
  });
  return r;
}

void for_each_partition(int64_t units, int num_stages,
                        const std::function<void(const std::vector<int64_t>&)>& visit) {
  if (num_stages < 1 || units < num_stages) return;
  std::vector<int64_t> counts(static_cast<size_t>(num_stages), 1);
  counts.back() = units - (num_stages - 1);
  while (true) {
    visit(counts);
    // Next in lexicographic order: grow the rightmost count (before the last)
    // that the last can still pay for, reset everything after it to 1.
    int grow = num_stages - 2;
    while (grow >= 0 && counts.back() == 1) {
      counts.back() += counts[static_cast<size_t>(grow)] - 1;
      counts[static_cast<size_t>(grow)] = 1;
      --grow;
    }
    if (grow < 0) return;
    ++counts[static_cast<size_t>(grow)];
    --counts.back();
  }
}

PartitionResult brute_force_partition(const ModelProfile& profile, PartitionObjective objective,
                                      const PartitionSetup& setup) {
  const UnitLayout layout = unit_layout(profile);
  check_setup(layout, objective, setup);
  if (objective == PartitionObjective::Uniform) return solve_partition(profile, objective, setup);
  PartitionResult best;
  best.objective = objective;
  double best_value = kInfinity;
  for_each_partition(static_cast<int64_t>(layout.partitionable), setup.num_stages,
                     [&](const std::vector<int64_t>& counts) {
                       PartitionResult r = evaluate_checked(profile, counts, setup, objective);
                       const double v = objective_value(r, objective, setup);
                       if (v < best_value) {
                         best_value = v;
                         best = r;
                       }
                     });
  if (!best.units_per_stage.empty())
    best.reason = reason_for(best, setup) + " (best of all partitions by enumeration)";
  check_budget(best, setup, [&] {
    return brute_force_partition(profile, PartitionObjective::Memory,
                                 PartitionSetup{setup.num_stages, setup.in_flight,
                                                setup.recompute, 0.0, {}});
  });
  return best;
}

}  // namespace pt
