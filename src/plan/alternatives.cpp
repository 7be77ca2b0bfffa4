// alternatives.cpp: enumerate, simulate and rank training plans.
//
// The schedule of each (schedule, N) pair is generated once and shared by
// its recompute x partition points; each point's plan_s still counts the
// whole generation, as if it were planned alone. Generated schedules are
// known to be valid, so the O(rounds x actions) validator is not run: the
// in-flight counts come from schedule_in_flight in O(actions). With
// PlanRequest::timed_placement, the zero-bubble rows that could win are
// planned a second time, at the placement the run will make
// (place_zero_bubble_rows_at_times).
#include "pipetrain/plan/alternatives.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <ctime>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <tuple>

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

// One replica's share of the global batch.
int64_t replica_batch(const PlanRequest& request) {
  return request.batch_size / std::max(1, request.data_parallel);
}

std::vector<int> micro_batch_counts(const PlanRequest& request) {
  if (request.batch_size < 1)
    throw InputError("plan request: batch_size must be >= 1 (got " +
                     std::to_string(request.batch_size) + ")");
  if (request.data_parallel < 1 || request.batch_size % request.data_parallel != 0)
    throw InputError("plan request: " + std::to_string(request.data_parallel) +
                     " data-parallel replicas do not divide the batch of " +
                     std::to_string(request.batch_size));
  const int64_t batch = replica_batch(request);
  std::vector<int> counts = request.micro_batch_counts;
  if (counts.empty()) {
    for (int64_t n = 1; n <= batch; ++n)
      if (batch % n == 0) counts.push_back(static_cast<int>(n));
  }
  for (int n : counts)
    if (n < 1 || batch % n != 0)
      throw InputError("plan request: " + std::to_string(n) +
                       " micro-batches do not divide the replica's batch of " +
                       std::to_string(batch));
  return counts;
}

// Gradient bytes of each stage: its partitionable units, the pinned first
// (embedding) and last (head) units with the first and last stage.
std::vector<double> stage_grad_bytes(const ModelProfile& profile,
                                     const std::vector<int64_t>& units_per_stage) {
  std::vector<double> bytes(units_per_stage.size(), 0.0);
  size_t stage = 0;
  int64_t left = units_per_stage.empty() ? 0 : units_per_stage[0];
  for (const UnitCost& u : profile.units) {
    if (!u.partitionable) {
      bytes[&u == &profile.units.front() ? 0 : bytes.size() - 1] += u.grad_bytes;
      continue;
    }
    while (left == 0 && stage + 1 < units_per_stage.size()) left = units_per_stage[++stage];
    bytes[stage] += u.grad_bytes;
    --left;
  }
  return bytes;
}

// Interleaved needs N to be a multiple of the ranks; the others take any N.
bool schedule_accepts(const std::string& name, int ranks, int n) {
  ScheduleKind kind = ScheduleKind::OneFOneB;
  return !parse_kind(name, kind) || kind != ScheduleKind::Interleaved || n % ranks == 0;
}

// `links` are per neighbouring rank pair (or one for all); the simulator
// takes one per neighbouring stage pair. With several stages per rank,
// stages s and s+1 on neighbouring ranks use those ranks' link; on the same
// rank the link is not used; further apart (interleaved's wrap from the last
// rank to the first) the slowest link, for a 1 MiB message.
std::vector<LinkCost> stage_pair_links(const std::vector<LinkCost>& links, const Schedule& s) {
  if (links.size() <= 1 || static_cast<int>(links.size()) == s.num_stages - 1) return links;
  const auto slowest = *std::max_element(links.begin(), links.end(), [](const LinkCost& a, const LinkCost& b) {
    return a.time_s(1048576.0) < b.time_s(1048576.0);
  });
  std::vector<LinkCost> out;
  for (int st = 0; st + 1 < s.num_stages; ++st) {
    const int a = stage_rank(s, st), b = stage_rank(s, st + 1);
    const bool neighbours = std::abs(a - b) == 1;
    out.push_back(a == b ? links.front() : neighbours ? links[static_cast<size_t>(std::min(a, b))] : slowest);
  }
  return out;
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

// Each stage's factor: its rank's request.rank_time_scale (empty: none).
std::vector<double> stage_time_scales(const PlanRequest& request, const Schedule& schedule) {
  if (request.rank_time_scale.empty()) return {};
  if (static_cast<int>(request.rank_time_scale.size()) != schedule.num_ranks)
    throw InputError("plan request: " + std::to_string(request.rank_time_scale.size()) +
                     " rank time scales for " + std::to_string(schedule.num_ranks) + " ranks");
  std::vector<double> k;
  for (int st = 0; st < schedule.num_stages; ++st)
    k.push_back(request.rank_time_scale[static_cast<size_t>(stage_rank(schedule, st))]);
  return k;
}

// The stages' compute times times their factors (none: unchanged).
void scale_stage_times(std::vector<StageCost>& stages, const std::vector<double>& k) {
  for (size_t st = 0; st < stages.size() && st < k.size(); ++st) {
    StageCost& c = stages[st];
    c.forward_s *= k[st];
    c.backward_s *= k[st];
    c.recompute_s *= k[st];
    if (c.weight_s >= 0.0) c.weight_s *= k[st];
    if (c.input_s >= 0.0) c.input_s *= k[st];
    c.optimizer_s *= k[st];
  }
}

// The span no placement of a schedule can beat at these costs: its busiest
// rank's compute, and one micro-batch's way through every stage's F and
// then back through every B (without W, which nothing waits for).
double pipeline_floor_s(const SimulationInput& sim, const std::vector<double>& busy_s) {
  double path = 0.0;
  for (const auto& t : split_action_times(sim)) path += t[0] + t[1];
  const double busiest = busy_s.empty() ? 0.0 : *std::max_element(busy_s.begin(), busy_s.end());
  return std::max(path, busiest);
}

// One (recompute, partition) point of a generated schedule.
PlanRow plan_point(const ModelProfile& profile, const Schedule& schedule,
                   const std::vector<int>& in_flight, const std::vector<LinkCost>& links,
                   const std::string& recompute, PartitionObjective objective,
                   const PlanRequest& request, const ModelProfile& pass_profile,
                   bool place_at_times) {
  PlanRow row;
  row.data_parallel = request.data_parallel;
  row.num_stages = request.num_stages;
  row.schedule = schedule.name;
  row.micro_batches = schedule.num_micro_batches;
  row.micro_batch_size = replica_batch(request) / schedule.num_micro_batches;
  row.recompute = recompute;
  row.partition = objective;
  row.weight_grad = schedule.step_weight_grads ? WeightGradKind::Step : WeightGradKind::MicroBatch;
  // Only balanced partitions take the budget as a constraint; the others
  // are marked infeasible below when their peak is over it.
  const double budget = objective == PartitionObjective::Balanced ? request.memory_budget_bytes : 0.0;
  PartitionSetup setup{schedule.num_stages, in_flight, {PlanRecompute::parse(recompute)}, budget,
                       stage_time_scales(request, schedule)};
  PartitionResult part;
  row.fixed_partition = !request.fixed_partition.empty();
  try {
    part = row.fixed_partition ? evaluate_partition(profile, request.fixed_partition, setup)
                               : solve_partition(profile, objective, setup);
  } catch (const MemoryBudgetError& e) {
    row.step_time_s = std::numeric_limits<double>::infinity();
    row.note = e.what();
    return row;
  }
  std::vector<double> step_weight_s;  // sets the stages' input_s when measured
  if (schedule.step_weight_grads)
    step_weight_s = step_pass_seconds(profile, &pass_profile, request.weight_grad_share, part.units_per_stage,
                                      {PlanRecompute::parse(recompute)}, schedule.num_micro_batches,
                                      part.stages);
  scale_stage_times(part.stages, setup.stage_time_scale);
  const std::vector<LinkCost> pipeline_links = links.empty() ? std::vector<LinkCost>{profile.link} : links;
  SimulationInput sim{part.stages, stage_pair_links(pipeline_links, schedule), profile.step_overhead_s,
                      replica_batch(request), false};
  sim.receiver_progress = receiver_driven_links(profile);
  sim.weight_grad_share = request.weight_grad_share;
  sim.step_weight_s = std::move(step_weight_s);
  for (size_t st = 0; st < sim.step_weight_s.size() && st < setup.stage_time_scale.size(); ++st)
    sim.step_weight_s[st] *= setup.stage_time_scale[st];
  // The run's placement at measured times, made here at the predicted ones.
  Schedule placed;
  const Schedule* ran = &schedule;
  if (place_at_times) {
    TimedPlacement placement = generate_at_times(schedule.name, schedule.num_ranks,
                                                 schedule.num_micro_batches, split_action_times(sim));
    if (placement.schedule.timed) placed = std::move(placement.schedule), ran = &placed;
    row.timed_placement = ran == &placed;
  }
  SimulationResult result = simulate_schedule(*ran, sim);
  row.units_per_stage = part.units_per_stage;
  // Data parallelism: stage s's reduction starts at the end of its last
  // compute (its span) and the step waits for the last one to finish; the
  // buckets' buffers (send and D receives per slot) add to each stage's peak.
  const int slots = request.dp_reduction == DpReductionKind::Ordered ? schedule.num_micro_batches : 1;
  row.reduction_s = add_replica_reductions(result, profile, part.units_per_stage, request.data_parallel,
                                           slots, request.replica_link);
  row.step_time_s = result.step_time_s;
  row.placement_floor_s = row.step_time_s - result.span_s_max + pipeline_floor_s(sim, result.busy_s);
  row.throughput_samples_per_s = static_cast<double>(request.batch_size) / row.step_time_s;
  row.bubble = result.bubble;
  row.rank_busy_s = result.busy_s;
  // A rank holding several stages (interleaved, ZB-V) holds all their
  // memory: the sum of their peaks (an upper bound: their transients do not
  // coincide). The row names the rank's first stage.
  std::vector<double> rank_peak(static_cast<size_t>(schedule.num_ranks), 0.0);
  for (size_t st = 0; st < result.peak_bytes.size(); ++st)
    rank_peak[static_cast<size_t>(stage_rank(schedule, static_cast<int>(st)))] += result.peak_bytes[st];
  const auto largest = std::max_element(rank_peak.begin(), rank_peak.end());
  row.max_peak_bytes = *largest;
  row.largest_stage = rank_stages(schedule, static_cast<int>(largest - rank_peak.begin())).front();
  row.fits = row.max_peak_bytes <= request.memory_budget_bytes;
  if (!row.fits)
    row.note = "stage " + std::to_string(row.largest_stage) + " needs " +
               plan_text::gib(row.max_peak_bytes) + ", over the budget of " +
               plan_text::gib(request.memory_budget_bytes);
  return row;
}

// A generated schedule and what its points share.
struct GeneratedSchedule {
  Schedule schedule;
  std::vector<int> in_flight;
  const ModelProfile* profile;       // at its micro-batch size
  const ModelProfile* pass_profile;  // of its per-step weight gradients (or profile)
  double generation_s, generation_cpu_s;
};

// A (schedule, recompute, partition) point of the request.
struct PlannedPoint {
  const GeneratedSchedule* generated;
  std::string recompute;
  PartitionObjective objective;
};

PlanRow plan_planned_point(const PlannedPoint& p, const std::vector<LinkCost>& links,
                           const PlanRequest& request, bool place_at_times) {
  const GeneratedSchedule& g = *p.generated;
  const Clock::time_point start = Clock::now();
  const std::clock_t cpu_start = std::clock();
  PlanRow row = plan_point(*g.profile, g.schedule, g.in_flight, links, p.recompute, p.objective, request,
                           *g.pass_profile, place_at_times);
  row.plan_s = g.generation_s + seconds_since(start);
  row.plan_cpu_s = g.generation_cpu_s + cpu_seconds_since(cpu_start);
  return row;
}

// PlanRequest::timed_placement: the rows of zb-h1 and zb-v that could beat
// `fastest`, the fastest feasible step so far (PlanRow::placement_floor_s
// below it), planned again at the placement the run will make, in order of
// their floors, `fastest` updated as they go. Rows with the
// same schedule, N, recompute and units per stage share one placement (the
// partition objectives often agree). A placement never holds more
// micro-batches in flight than the unit-time one (placement_search.hpp), so
// a row's partition stays valid; its peak is simulated again all the same.
void place_zero_bubble_rows_at_times(PlanTable& table, const std::vector<PlannedPoint>& points,
                                     const std::vector<LinkCost>& links, const PlanRequest& request,
                                     double& fastest) {
  std::vector<size_t> candidates;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const PlanRow& row = table.rows[i];
    if (schedule_takes_times(row.schedule) && std::isfinite(row.step_time_s) && row.placement_floor_s < fastest)
      candidates.push_back(i);
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](size_t a, size_t b) {
    return table.rows[a].placement_floor_s < table.rows[b].placement_floor_s;
  });
  std::map<std::string, PlanRow> placed;  // by schedule, N, recompute, units
  for (size_t i : candidates) {
    PlanRow& row = table.rows[i];
    if (row.placement_floor_s >= fastest) break;
    const std::string key = row.schedule + " " + std::to_string(row.micro_batches) + " " + row.recompute + " " +
                            plan_text::list(row.units_per_stage);
    auto same = placed.find(key);
    if (same != placed.end()) {
      const PlanRow unit = row;
      row = same->second;
      row.partition = unit.partition, row.fixed_partition = unit.fixed_partition;
      row.plan_s = unit.plan_s, row.plan_cpu_s = unit.plan_cpu_s;
    } else {
      // plan_s: both plannings, the schedule's generation once.
      const GeneratedSchedule& g = *points[i].generated;
      const double unit_s = row.plan_s - g.generation_s, unit_cpu_s = row.plan_cpu_s - g.generation_cpu_s;
      row = plan_planned_point(points[i], links, request, true);
      row.plan_s += unit_s;
      row.plan_cpu_s += unit_cpu_s;
      placed.emplace(key, row);
    }
    if (row.fits) fastest = std::min(fastest, row.step_time_s);
  }
}

int schedule_passes_rank(const std::string& schedule) {
  if (schedule == "gpipe" || schedule == "1f1b") return 0;
  if (schedule.rfind("zb", 0) == 0) return 2;  // zb-h1, zb-v: B and W apart
  return 1;
}

// The fastest row that fits the budget (rows ranked by step time), or end.
std::vector<PlanRow>::const_iterator fastest_fit(const std::vector<PlanRow>& rows) {
  return std::find_if(rows.begin(), rows.end(), [](const PlanRow& r) { return r.fits; });
}

// Rows by predicted step time; the best is the simplest feasible row within
// kPlanTieMargin of the fastest feasible one whose peak leaves that margin of
// the budget (plan_choice_order), or the fastest feasible one.
void rank_rows(PlanTable& table) {
  std::stable_sort(table.rows.begin(), table.rows.end(), [](const PlanRow& a, const PlanRow& b) {
    return a.step_time_s < b.step_time_s;
  });
  const auto fastest = fastest_fit(table.rows);
  table.best = -1;
  if (fastest == table.rows.end()) return;
  const double tie_limit = fastest->step_time_s * (1.0 + kPlanTieMargin);
  const double peak_limit = table.memory_budget_bytes * (1.0 - kPlanTieMargin);
  auto chosen = fastest;
  for (auto row = fastest + 1; row != table.rows.end() && row->step_time_s <= tie_limit; ++row)
    if (row->fits && row->max_peak_bytes <= peak_limit && plan_choice_order(*row, *chosen)) chosen = row;
  table.best = static_cast<int>(chosen - table.rows.begin());
}

// Why the best row is not the fastest feasible one, or "".
std::string tie_text(const PlanTable& table) {
  const auto fastest = fastest_fit(table.rows);
  const size_t fastest_rank = static_cast<size_t>(fastest - table.rows.begin()) + 1;
  if (fastest == table.rows.end() || static_cast<int>(fastest_rank) == table.best + 1) return "";
  const PlanRow& best = table.rows[static_cast<size_t>(table.best)];
  char buf[200];
  std::snprintf(buf, sizeof buf, " (predicted %+.1f%% against rank %zu, within the %.0f%% tie margin: the simplest of the tied plans)",
                100.0 * (best.step_time_s / fastest->step_time_s - 1.0), fastest_rank, 100.0 * kPlanTieMargin);
  return buf;
}

// The schedule column: "1f1b", or "1f1b/step" with weight gradients once per step.
std::string schedule_text(const PlanRow& r) {
  return r.schedule + (r.weight_grad == WeightGradKind::Step ? "/step" : "");
}

std::string row_text(const PlanRow& r, size_t rank) {
  char buf[320];
  std::snprintf(buf, sizeof buf, "%4zu %4dx%-4d %9.4g  %-16s %5d %5lld  %-9s %-8s %12.5g %10.5g %6.3f %12s  %-4s %6.3f  ",
                rank + 1, r.num_stages, r.data_parallel, r.reduction_s * 1e3, schedule_text(r).c_str(), r.micro_batches,
                static_cast<long long>(r.micro_batch_size), r.recompute.c_str(),
                r.fixed_partition ? "explicit" : objective_name(r.partition), r.step_time_s * 1e3, r.throughput_samples_per_s,
                r.bubble, plan_text::size(r.max_peak_bytes).c_str(), r.fits ? "yes" : "no", r.plan_s);
  return buf + (r.units_per_stage.empty() ? std::string("-") : plan_text::list(r.units_per_stage));
}

// Every point of one request, predicted at unit-time placements, with what a
// second planning at times needs (profiles and schedules at fixed addresses).
struct WeighedPlans {
  PlanRequest request;
  std::vector<LinkCost> links;
  PlanTable table;
  std::map<int64_t, ModelProfile> profiles;  // by micro-batch rows (profile_at)
  std::deque<GeneratedSchedule> generated;
  std::vector<PlannedPoint> points;           // one per row, in table.rows' order

  double fastest_fit_s() const {
    double fastest = std::numeric_limits<double>::infinity();
    for (const PlanRow& row : table.rows)
      if (row.fits) fastest = std::min(fastest, row.step_time_s);
    return fastest;
  }
  void place_at_times(double& fastest) {
    if (request.timed_placement) place_zero_bubble_rows_at_times(table, points, links, request, fastest);
  }
};

// Measured once per key: the pass profile (key -rows) apart from an N's.
const ModelProfile& profile_at(WeighedPlans& w, const ProfileForMicroBatch& profile_for, int64_t rows,
                               bool pass = false) {
  const int64_t key = pass ? -rows : rows;
  auto it = w.profiles.find(key);
  return it != w.profiles.end() ? it->second : w.profiles.emplace(key, profile_for(rows)).first->second;
}

std::unique_ptr<WeighedPlans> weigh_plans(const ProfileForMicroBatch& profile_for,
                                          const std::vector<LinkCost>& links, const PlanRequest& request) {
  check_request(request);
  auto w = std::make_unique<WeighedPlans>();
  w->request = request;
  w->links = links;
  PlanTable& table = w->table;
  table.num_stages = request.num_stages;
  table.total_ranks = request.num_stages * request.data_parallel;
  table.memory_budget_bytes = request.memory_budget_bytes;
  // weight_grad = "step": an N's profile carries the step's B and pass when
  // its stage chains timed them (has_step_split); else the profile at a
  // whole replica batch's rows times the pass, measured at the first N
  // without them.
  const ModelProfile* pass_profile = nullptr;
  for (int n : micro_batch_counts(request)) {
    const int64_t rows = replica_batch(request) / n;
    const ModelProfile& profile = profile_at(*w, profile_for, rows);
    if (request.weight_grad == WeightGradKind::Step && !has_step_split(profile) && !pass_profile)
      pass_profile = &profile_at(*w, profile_for, replica_batch(request), true);
    table.model = profile.model;
    table.device = profile.backend;
    for (const std::string& name : request.schedules) {
      const Clock::time_point generation_start = Clock::now();
      const std::clock_t generation_cpu = std::clock();
      if (!schedule_accepts(name, request.num_stages, n)) continue;
      Schedule schedule = generate_schedule(name, request.num_stages, n, request.virtual_stages);
      if (!request.fixed_partition.empty() &&
          request.fixed_partition.size() != static_cast<size_t>(schedule.num_stages))
        continue;  // the fixed counts are for another number of stages
      const bool step = request.weight_grad == WeightGradKind::Step && !splits_backward(schedule);
      if (step) schedule = with_step_weight_grads(schedule);
      const std::vector<int> in_flight = schedule_in_flight(schedule);
      w->generated.push_back({std::move(schedule), in_flight, &profile, step && pass_profile ? pass_profile : &profile,
                              seconds_since(generation_start), cpu_seconds_since(generation_cpu)});
      for (const std::string& recompute : request.recompute)
        for (PartitionObjective objective : request.partitions) {
          w->points.push_back({&w->generated.back(), recompute, objective});
          table.rows.push_back(plan_planned_point(w->points.back(), links, request, false));
        }
    }
  }
  return w;
}

}  // namespace

PlanTable rank_plans(const ProfileForMicroBatch& profile_for, const std::vector<LinkCost>& links,
                     const PlanRequest& request) {
  std::unique_ptr<WeighedPlans> w = weigh_plans(profile_for, links, request);
  double fastest = w->fastest_fit_s();
  w->place_at_times(fastest);
  rank_rows(w->table);
  return std::move(w->table);
}

bool plan_choice_order(const PlanRow& a, const PlanRow& b) {
  const auto key = [](const PlanRow& r) {
    return std::make_tuple(r.recompute == "none" ? 0 : 1, r.micro_batches, schedule_passes_rank(r.schedule),
                           r.step_time_s);
  };
  return key(a) < key(b);
}

PlanTable merge_plan_tables(std::vector<PlanTable> tables) {
  if (tables.empty()) return {};
  PlanTable merged = std::move(tables.front());
  for (size_t i = 1; i < tables.size(); ++i)
    for (PlanRow& row : tables[i].rows) merged.rows.push_back(std::move(row));
  rank_rows(merged);
  return merged;
}

double replica_reduction_s(double grad_bytes, int replicas, int slots, const LinkCost& link) {
  if (replicas <= 1) return 0.0;
  const double share = grad_bytes / replicas;  // one replica's chunk
  return (replicas - 1) * (link.time_s(share * slots) + link.time_s(share));
}

double replica_reduction_bytes(double grad_bytes, int replicas, int slots) {
  return grad_bytes * (2.0 * slots + 1.0 + 1.0 / replicas);
}

LinkCost fit_reduction_link(int replicas, const std::vector<double>& grad_bytes,
                            const std::vector<double>& seconds) {
  if (replicas < 2 || grad_bytes.empty() || grad_bytes.size() != seconds.size())
    throw InputError("measured reductions: expected D >= 2 and one time per size, got D = " +
                     std::to_string(replicas) + ", " + std::to_string(grad_bytes.size()) + " sizes and " +
                     std::to_string(seconds.size()) + " times");
  // replica_reduction_s at slots = 1: (D - 1) (2 latency + 2 (G / D) / bandwidth),
  // a line y = a + b x in x = 2 G / D, y = t / (D - 1), a = 2 latency, b = 1 / bandwidth.
  const size_t n = grad_bytes.size();
  std::vector<double> x(n), y(n);
  for (size_t i = 0; i < n; ++i) {
    if (!(grad_bytes[i] > 0.0 && seconds[i] > 0.0))
      throw InputError("measured reductions: sizes and times must be positive (size " +
                       std::to_string(grad_bytes[i]) + " B, " + std::to_string(seconds[i]) + " s)");
    x[i] = 2.0 * grad_bytes[i] / replicas;
    y[i] = seconds[i] / (replicas - 1);
  }
  double mx = 0.0, my = 0.0;
  for (size_t i = 0; i < n; ++i) mx += x[i] / n, my += y[i] / n;
  double sxx = 0.0, sxy = 0.0;
  for (size_t i = 0; i < n; ++i) sxx += (x[i] - mx) * (x[i] - mx), sxy += (x[i] - mx) * (y[i] - my);
  LinkCost link;
  const double slope = sxx > 0.0 ? sxy / sxx : 0.0;
  const double intercept = my - slope * mx;
  if (slope > 0.0 && intercept >= 0.0) {
    link.latency_s = intercept / 2.0;
    link.bandwidth_bytes_per_s = 1.0 / slope;
    return link;
  }
  double sx = 0.0, sy = 0.0;  // through the origin: the mean bandwidth
  for (size_t i = 0; i < n; ++i) sx += x[i], sy += y[i];
  link.bandwidth_bytes_per_s = sx / sy;
  return link;
}

double add_replica_reductions(SimulationResult& result, const ModelProfile& profile,
                              const std::vector<int64_t>& units_per_stage, int replicas, int slots,
                              const LinkCost& link) {
  if (replicas <= 1 && slots <= 1) return 0.0;
  const std::vector<double> grads = stage_grad_bytes(profile, units_per_stage);
  double end = result.span_s_max;
  for (size_t st = 0; st < grads.size() && st < result.span_s.size(); ++st) {
    end = std::max(end, result.span_s[st] + replica_reduction_s(grads[st], replicas, slots, link));
    result.peak_bytes[st] += replica_reduction_bytes(grads[st], replicas, slots);
  }
  const double waited = end - result.span_s_max;
  if (result.step_time_s > 0.0)
    result.throughput_samples_per_s *= result.step_time_s / (result.step_time_s + waited);
  result.step_time_s += waited;
  return waited;
}

PlanTable rank_grid_plans(const ProfileForMicroBatch& profile_for, const LinksForStages& links_for,
                          const ReplicaLinkFor& replica_link_for, const PlanRequest& request,
                          int total_ranks) {
  if (total_ranks < 1) throw InputError("plan request: total ranks must be >= 1");
  PlanTable table;
  table.total_ranks = total_ranks;
  table.memory_budget_bytes = request.memory_budget_bytes;
  std::string skipped;
  std::vector<std::unique_ptr<WeighedPlans>> grids;
  for (int d = 1; d <= total_ranks; ++d) {
    if (total_ranks % d != 0 || request.batch_size % d != 0) continue;
    PlanRequest r = request;
    r.data_parallel = d;
    r.num_stages = total_ranks / d;
    r.replica_link = replica_link_for(r.num_stages, d);
    if (!r.micro_batch_counts.empty()) {  // the requested N that fit this replica's batch
      r.micro_batch_counts.clear();
      for (int n : request.micro_batch_counts)
        if (replica_batch(r) % n == 0) r.micro_batch_counts.push_back(n);
      if (r.micro_batch_counts.empty()) continue;
    }
    try {
      grids.push_back(weigh_plans(profile_for, links_for(r.num_stages), r));
    } catch (const InputError& e) {  // e.g. more stages than units: that grid is not a plan
      skipped += std::string(skipped.empty() ? "" : "; ") + std::to_string(r.num_stages) + " x " +
                 std::to_string(d) + ": " + e.what();
      continue;
    }
  }
  // Zero-bubble rows placed at times against the fastest row of every grid.
  double fastest = std::numeric_limits<double>::infinity();
  for (const auto& grid : grids) fastest = std::min(fastest, grid->fastest_fit_s());
  for (const auto& grid : grids) {
    grid->place_at_times(fastest);
    table.model = grid->table.model;
    table.device = grid->table.device;
    for (PlanRow& row : grid->table.rows) table.rows.push_back(std::move(row));
  }
  if (table.rows.empty())
    throw InputError("plan request: no P x D grid of " + std::to_string(total_ranks) +
                     " ranks can be planned (" + skipped + ")");
  rank_rows(table);
  return table;
}

PlanTable plan_grid_alternatives(const GptSpec& gpt, const DeviceSpec& device, PlanRequest request,
                                 int total_ranks) {
  if (request.memory_budget_bytes == 0.0) request.memory_budget_bytes = device.memory_bytes;
  return rank_grid_plans(
      [&](int64_t rows) { return gpt_profile(gpt, device, rows); },
      [&](int stages) {
        return stages > 1 ? stage_links(device, stages) : std::vector<LinkCost>{device.intra_node};
      },
      [&](int stages, int replicas) {
        return stages * replicas <= device.devices_per_node ? device.intra_node : device.inter_node;
      },
      request, total_ranks);
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
  const int ranks = table.total_ranks > 0 ? table.total_ranks : table.num_stages;
  std::string out = table.model + " on " + std::to_string(ranks) + " x " + table.device +
                    (table.num_stages == 0 ? " as every P x D grid" : "") + ", memory budget " +
                    budget + " per stage\n";
  out += "rank  P x D  dp (ms)  sched                N    mb  recompute partition     step (ms)  samples/s bubble         peak  fits plan (s)  units per stage\n";
  for (size_t i = 0; i < table.rows.size() && i < max_rows; ++i) out += row_text(table.rows[i], i) + "\n";
  if (table.rows.size() > max_rows)
    out += "... " + std::to_string(table.rows.size() - max_rows) + " more\n";
  const auto placed = std::count_if(table.rows.begin(), table.rows.end(),
                                    [](const PlanRow& r) { return r.timed_placement; });
  if (std::any_of(table.rows.begin(), table.rows.end(),
                  [](const PlanRow& r) { return r.weight_grad == WeightGradKind::Step; }))
    out += "/step: weight gradients in one pass per stage after its last B (pipeline.weight_grad = \"step\")\n";
  if (placed > 0)
    out += "placed at times: " + std::to_string(placed) + " zb-h1/zb-v rows predicted at the placement the run "
           "makes at its measured F, B and W times (pipeline.schedule_times), made here at their predicted "
           "ones; the other zero-bubble rows at the unit-time placement\n";
  if (table.best < 0) {
    out += "best: none of the " + std::to_string(table.rows.size()) + " plans fits the budget\n";
  } else {
    const PlanRow& best = table.rows[static_cast<size_t>(table.best)];
    const std::string grid = table.num_stages == 0 || best.data_parallel > 1
                                 ? "P x D = " + std::to_string(best.num_stages) + " x " +
                                       std::to_string(best.data_parallel) + ", "
                                 : "";
    out += "best: rank " + std::to_string(table.best + 1) + ", " + grid + best.schedule + " N=" +
           std::to_string(best.micro_batches) + " recompute " + best.recompute +
           (best.weight_grad == WeightGradKind::Step ? " weight_grad step" : "") + ", " +
           objective_name(best.partition) + " partition " + plan_text::list(best.units_per_stage) +
           (best.timed_placement ? " (placed at times)" : "") + tie_text(table) + "\n";
  }
  return out;
}

}  // namespace pt
