// alternatives.cpp: enumerate, simulate and rank training plans.
//
// The schedule of each (schedule, N) pair is generated once and shared by
// its recompute x partition points; each point's plan_s still counts the
// whole generation, as if it were planned alone. Generated schedules are
// known to be valid, so the O(rounds x actions) validator is not run: the
// in-flight counts come from schedule_in_flight in O(actions).
#include "pipetrain/plan/alternatives.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <limits>

#include "pipetrain/base/error.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/schedule/schedule.hpp"
#include "plan_text.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double cpu_seconds_since(std::clock_t start) {
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

std::vector<int> micro_batch_counts(const PlanRequest& request) {
  if (request.batch_size < 1)
    throw InputError("plan request: batch_size must be >= 1 (got " +
                     std::to_string(request.batch_size) + ")");
  std::vector<int> counts = request.micro_batch_counts;
  if (counts.empty()) {
    for (int64_t n = 1; n <= request.batch_size; ++n)
      if (request.batch_size % n == 0) counts.push_back(static_cast<int>(n));
  }
  for (int n : counts)
    if (n < 1 || request.batch_size % n != 0)
      throw InputError("plan request: " + std::to_string(n) +
                       " micro-batches do not divide the batch of " +
                       std::to_string(request.batch_size));
  return counts;
}

void check_request(const PlanRequest& request) {
  if (request.num_stages < 1)
    throw InputError("plan request: num_stages must be >= 1 (got " +
                     std::to_string(request.num_stages) + ")");
  if (!(request.memory_budget_bytes > 0.0))
    throw InputError("plan request: the memory budget must be > 0 bytes");
  if (request.schedules.empty() || request.recompute.empty() || request.partitions.empty())
    throw InputError("plan request: give at least one schedule, recompute policy and partition");
}

// One (recompute, partition) point of a generated schedule.
PlanRow plan_point(const ModelProfile& profile, const Schedule& schedule,
                   const std::vector<int>& in_flight, const std::vector<LinkCost>& links,
                   const std::string& recompute, PartitionObjective objective,
                   const PlanRequest& request) {
  PlanRow row;
  row.schedule = schedule.name;
  row.micro_batches = schedule.num_micro_batches;
  row.micro_batch_size = request.batch_size / schedule.num_micro_batches;
  row.recompute = recompute;
  row.partition = objective;
  // Only balanced partitions take the budget as a constraint; the others
  // are marked infeasible below when their peak is over it.
  const double budget = objective == PartitionObjective::Balanced ? request.memory_budget_bytes : 0.0;
  PartitionSetup setup{request.num_stages, in_flight, {PlanRecompute::parse(recompute)}, budget, {}};
  PartitionResult part;
  try {
    part = solve_partition(profile, objective, setup);
  } catch (const MemoryBudgetError& e) {
    row.step_time_s = std::numeric_limits<double>::infinity();
    row.note = e.what();
    return row;
  }
  SimulationInput sim{part.stages, links, profile.step_overhead_s, request.batch_size, false};
  const SimulationResult result = simulate_schedule(schedule, sim);
  row.units_per_stage = part.units_per_stage;
  row.step_time_s = result.step_time_s;
  row.throughput_samples_per_s = result.throughput_samples_per_s;
  row.bubble = result.bubble;
  const auto largest = std::max_element(result.peak_bytes.begin(), result.peak_bytes.end());
  row.max_peak_bytes = *largest;
  row.largest_stage = static_cast<int>(largest - result.peak_bytes.begin());
  row.fits = row.max_peak_bytes <= request.memory_budget_bytes;
  if (!row.fits)
    row.note = "stage " + std::to_string(row.largest_stage) + " needs " +
               plan_text::gib(row.max_peak_bytes) + ", over the budget of " +
               plan_text::gib(request.memory_budget_bytes);
  return row;
}

void rank_rows(PlanTable& table) {
  std::stable_sort(table.rows.begin(), table.rows.end(), [](const PlanRow& a, const PlanRow& b) {
    return a.step_time_s < b.step_time_s;
  });
  for (size_t i = 0; i < table.rows.size(); ++i)
    if (table.rows[i].fits) {
      table.best = static_cast<int>(i);
      break;
    }
}

std::string row_text(const PlanRow& r, size_t rank) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "%4zu  %-6s %5d %5lld  %-9s %-8s %12.5g %10.5g %6.3f %12s  %-4s %6.3f  ",
                rank + 1, r.schedule.c_str(), r.micro_batches,
                static_cast<long long>(r.micro_batch_size), r.recompute.c_str(),
                objective_name(r.partition), r.step_time_s * 1e3, r.throughput_samples_per_s,
                r.bubble, plan_text::size(r.max_peak_bytes).c_str(), r.fits ? "yes" : "no", r.plan_s);
  return buf + (r.units_per_stage.empty() ? std::string("-") : plan_text::list(r.units_per_stage));
}

}  // namespace

PlanTable rank_plans(const ProfileForMicroBatch& profile_for, const std::vector<LinkCost>& links,
                     const PlanRequest& request) {
  check_request(request);
  PlanTable table;
  table.num_stages = request.num_stages;
  table.memory_budget_bytes = request.memory_budget_bytes;
  for (int n : micro_batch_counts(request)) {
    const ModelProfile profile = profile_for(request.batch_size / n);
    table.model = profile.model;
    table.device = profile.backend;
    for (const std::string& name : request.schedules) {
      const Clock::time_point generation_start = Clock::now();
      const std::clock_t generation_cpu = std::clock();
      const Schedule schedule = generate_schedule(name, request.num_stages, n);
      const std::vector<int> in_flight = schedule_in_flight(schedule);
      const double generation_s = seconds_since(generation_start);
      const double generation_cpu_s = cpu_seconds_since(generation_cpu);
      for (const std::string& recompute : request.recompute)
        for (PartitionObjective objective : request.partitions) {
          const Clock::time_point start = Clock::now();
          const std::clock_t cpu_start = std::clock();
          PlanRow row = plan_point(profile, schedule, in_flight, links, recompute, objective, request);
          row.plan_s = generation_s + seconds_since(start);
          row.plan_cpu_s = generation_cpu_s + cpu_seconds_since(cpu_start);
          table.rows.push_back(std::move(row));
        }
    }
  }
  rank_rows(table);
  return table;
}

PlanTable plan_alternatives(const GptSpec& gpt, const DeviceSpec& device, PlanRequest request) {
  if (request.memory_budget_bytes == 0.0) request.memory_budget_bytes = device.memory_bytes;
  const std::vector<LinkCost> links =
      request.num_stages > 1 ? stage_links(device, request.num_stages)
                             : std::vector<LinkCost>{device.intra_node};
  return rank_plans([&](int64_t rows) { return gpt_profile(gpt, device, rows); }, links, request);
}

std::string format_plan_table(const PlanTable& table, size_t max_rows) {
  char budget[64];
  std::snprintf(budget, sizeof budget, "%.4g GB (%s)", table.memory_budget_bytes / 1e9,
                plan_text::gib(table.memory_budget_bytes).c_str());
  std::string out = table.model + " on " + std::to_string(table.num_stages) + " x " +
                    table.device + ", memory budget " + budget + " per stage\n";
  out += "rank  sched      N    mb  recompute partition     step (ms)  samples/s bubble         peak  fits plan (s)  units per stage\n";
  for (size_t i = 0; i < table.rows.size() && i < max_rows; ++i) out += row_text(table.rows[i], i) + "\n";
  if (table.rows.size() > max_rows)
    out += "... " + std::to_string(table.rows.size() - max_rows) + " more\n";
  if (table.best < 0) {
    out += "best: none of the " + std::to_string(table.rows.size()) + " plans fits the budget\n";
  } else {
    const PlanRow& best = table.rows[static_cast<size_t>(table.best)];
    out += "best: rank " + std::to_string(table.best + 1) + ", " + best.schedule + " N=" +
           std::to_string(best.micro_batches) + " recompute " + best.recompute + ", " +
           objective_name(best.partition) + " partition " + plan_text::list(best.units_per_stage) +
           "\n";
  }
  return out;
}

}  // namespace pt
