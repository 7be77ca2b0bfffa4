// replan.cpp: re-planning during training, the driver's side
// (app/replan.hpp, docs/planner.md "Re-planning during training").
#include "pipetrain/app/replan.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "pipetrain/app/auto_plan.hpp"
#include "pipetrain/app/grid_setup.hpp"
#include "pipetrain/app/profile_command.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/runtime/profile_reduction.hpp"
#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/runtime/profiler.hpp"

namespace pt {

namespace {

// The keys a plan consists of, which a switch writes (auto_plan.cpp's open
// keys but the grid, which a switch keeps).
const char* const kPlanKeys[] = {"pipeline.schedule", "pipeline.micro_batches", "pipeline.recompute",
                                 "pipeline.partition", "pipeline.virtual_stages", "pipeline.weight_grad"};

// `open` with the grid fixed at the running one: re-planning weighs plans of
// this grid only, and a switch keeps it (auto_chooses_grid is then false).
Deck with_grid_fixed(Deck open, const ProcessGrid& grid) {
  open.data_parallel.replicas = grid.data_parallel();
  if (!open.key_origin.count("data_parallel.replicas")) open.key_origin["data_parallel.replicas"] = "pipeline.auto";
  return open;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];  // the lower middle one, as rebalancing takes
}

std::string counts_text(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return "[" + s + "]";
}

std::string row_text(const PlanRow& r) {
  std::ostringstream os;
  os << r.schedule << ' ' << r.micro_batches << ' ' << r.recompute << ' ' << static_cast<int>(r.weight_grad);
  for (int64_t u : r.units_per_stage) os << ' ' << u;
  return os.str();
}

PlanRow row_of_text(const std::string& text) {
  PlanRow r;
  std::istringstream in(text);
  int weight_grad = 0;
  in >> r.schedule >> r.micro_batches >> r.recompute >> weight_grad;
  r.weight_grad = static_cast<WeightGradKind>(weight_grad);
  for (int64_t u = 0; in >> u;) r.units_per_stage.push_back(u);
  return r;
}

// Root's text on every rank of `comm`.
std::string share_text(std::string text, MPI_Comm comm, const char* what) {
  long long size = static_cast<long long>(text.size());
  timed_bcast(&size, 1, MPI_LONG_LONG, 0, comm, what);
  text.resize(static_cast<size_t>(size));
  timed_bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, comm, what);
  return text;
}

std::string ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  return buf;
}

std::string speeds_text(const std::vector<double>& k) {
  std::string s;
  for (size_t i = 0; i < k.size(); ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%s%.2f", i ? ", " : "", k[i]);
    s += buf;
  }
  return "[" + s + "]";
}

// Rank 0's line for a check.
void print_check(int64_t step, const ReplanCheck& c, const RunningPlan& current) {
  const ReplanDecision& d = c.decision;
  const std::string measured = c.forced_speeds
                                   ? std::string("test hook ") + fault_hook_info(FaultHook::ReplanSpeed).variable
                                   : "median of " + std::to_string(c.window_steps) + " steps";
  std::printf("replan after step %lld: measured step %s (%s), predicted %s for %s: %+.1f%%",
              static_cast<long long>(step + 1), ms(d.measured_step_s).c_str(), measured.c_str(),
              ms(d.predicted_step_s).c_str(), running_plan_text(current).c_str(), 100.0 * d.deviation);
  if (!d.ranked) {
    std::printf("; no re-planning: %s\n", d.reason.c_str());
  } else {
    std::printf("; rank speeds %s; %lld plans weighed at those speeds: best %s %s against %s in force",
                speeds_text(d.speed).c_str(), static_cast<long long>(d.plans_weighed),
                d.best.schedule.empty() ? "(none)" : plan_choice_text(d.best).c_str(),
                ms(d.best.step_time_s).c_str(), ms(d.current_at_speed_s).c_str());
    std::printf("; %s: %s\n", d.change ? "switching" : "no switch", d.reason.c_str());
  }
  std::fflush(stdout);
}

}  // namespace

std::string running_plan_text(const RunningPlan& plan) {
  const PlanRow& r = plan.row;
  return r.schedule + " N=" + std::to_string(r.micro_batches) + " recompute " + r.recompute +
         (r.weight_grad == WeightGradKind::Step ? " weight_grad step" : "") + ", partition " +
         counts_text(r.units_per_stage);
}

RunningPlan Replanner::running_plan(const Deck& deck, const std::vector<int64_t>& partition) {
  RunningPlan p;
  p.row.schedule = kind_name(deck.pipeline.schedule);
  p.row.micro_batches = static_cast<int>(deck.pipeline.micro_batches);
  p.row.recompute = deck.pipeline.recompute;
  p.row.weight_grad = deck.pipeline.weight_grad;
  p.row.units_per_stage = partition;
  p.row.fixed_partition = true;
  p.virtual_stages = static_cast<int>(deck.pipeline.virtual_stages);
  return p;
}

Replanner::Replanner(const Deck& written, const ProcessGrid& grid, const ComputeResources& compute,
                     std::map<int64_t, ModelProfile> profiles)
    : open_(with_grid_fixed(with_open_keys_of_rank0(written, grid.world()), grid)), written_(written),
      grid_(grid), compute_(compute), profiles_(std::move(profiles)) {
  MPI_Comm_size(grid.pipeline(), &stages_);
  MPI_Comm_rank(grid.world(), &world_rank_);
  request_ = auto_plan_request(open_, stages_, plan_budget_bytes(written, stages_));
  both_weight_grads_ = weight_grad_open(open_);
}

void Replanner::observe(const StepRecord& rec, bool first_of_plan) {
  if (world_rank_ != 0 || first_of_plan) return;
  step_times_.push_back(rec.step_time_s);
  rank_compute_.push_back(rec.rank_compute_s);
}

bool Replanner::due(int64_t step, int64_t steps) const {
  const int64_t every = written_.pipeline.auto_replan_every;
  return every > 0 && (step + 1) % every == 0 && step + 1 < steps;
}

void Replanner::measure_profiles() {
  if (measured_) return;
  measured_ = true;
  set_wait_phase("in re-planning's profiles");
  Backend& be = compute_.setup.backend ? *compute_.setup.backend : cpu_backend();
  const int64_t replica_batch = written_.training.batch_size / std::max(1, request_.data_parallel);
  std::vector<int64_t> rows = {replica_batch};  // the pass of weight gradients per step
  for (int64_t n = 1; n <= replica_batch; ++n) {
    const bool weighed = request_.micro_batch_counts.empty() ||
                         std::count(request_.micro_batch_counts.begin(), request_.micro_batch_counts.end(), n);
    if (replica_batch % n == 0 && weighed && n > 1) rows.push_back(replica_batch / n);
  }
  const ProfileOptions options = options_on(compute_, ProfileOptions::brief());
  for (int64_t r : rows) {  // the same sizes in the same order on every rank (collective)
    if (profiles_.count(r)) continue;  // pipeline.auto's, measured on these ranks at start
    BatchSplit split;
    split.batch_size = written_.training.batch_size;
    split.micro_batches = written_.training.batch_size / r;
    profiles_.emplace(r, profile_model(written_, split, be, grid_.pipeline(), options));
  }
  // D > 1: the replicas' reductions as this grid runs them (auto's profiles have them).
  const int replicas = grid_.data_parallel();
  if (replicas > 1 && profiles_.begin()->second.reductions.empty()) {
    const std::vector<MeasuredReduction> reductions =
        time_replica_reductions(written_, be, grid_.world(), {replicas}, options);
    for (auto& [rows, profile] : profiles_) profile.reductions = reductions;
  }
}

ModelProfile Replanner::profile_for(int64_t rows) {
  const auto it = profiles_.find(rows);
  PT_CHECK(it != profiles_.end(), "re-planning: no profile of micro-batches of " + std::to_string(rows) + " rows");
  return it->second;
}

ReplanCheck Replanner::check(int64_t step, const Deck& running, const std::vector<int64_t>& partition) {
  ReplanCheck c;
  c.checked = true;
  measure_profiles();  // collective, at the first check only
  set_wait_phase("in the re-planning check after step " + std::to_string(step));
  std::string decision;
  if (world_rank_ == 0) {
    const auto profile = [this](int64_t rows) { return profile_for(rows); };
    PlanRequest request = request_;  // pipelines over each profile's own link (links_ empty)
    request.replica_link =
        replica_link_of(profiles_.begin()->second, request.data_parallel, profiles_.begin()->second.link);
    ReplanInput in;
    in.request = request;
    in.both_weight_grads = both_weight_grads_;
    in.current = running_plan(running, partition);
    in.margin = written_.pipeline.auto_replan_margin;
    c.window_steps = static_cast<int64_t>(step_times_.size());
    if (const auto hook = fault_request(FaultHook::ReplanSpeed)) {
      c.forced_speeds = true;
      std::vector<double> factors = hook->factors;
      factors.resize(static_cast<size_t>(stages_), factors.empty() ? 1.0 : factors.back());
      const ReplanMeasurement m = simulated_measurement(profile, links_, request, in.current, factors);
      in.measured_step_s = m.step_s;
      in.measured_rank_compute_s = m.rank_compute_s;
    } else {
      in.measured_step_s = median(step_times_);
      for (size_t r = 0; r < static_cast<size_t>(stages_); ++r) {
        std::vector<double> times;
        for (const auto& s : rank_compute_) if (r < s.size()) times.push_back(s[r]);
        in.measured_rank_compute_s.push_back(median(times));
      }
    }
    if (c.forced_speeds || !step_times_.empty()) {
      try {
        c.decision = decide_replan(profile, links_, in);
      } catch (const InputError& e) {  // e.g. the plan in force cannot be simulated: keep it
        c.decision = {};
        c.decision.measured_step_s = in.measured_step_s;
        c.decision.reason = e.what();
      }
      print_check(step, c, in.current);
    } else {
      c.checked = false;  // no step measured since the last check (the first of a plan)
    }
    decision = c.decision.change ? row_text(c.decision.best) : "";
  }
  step_times_.clear();
  rank_compute_.clear();
  decision = share_text(decision, grid_.world(), "the re-planning decision from rank 0");
  if (decision.empty()) return c;
  const PlanRow row = world_rank_ == 0 ? c.decision.best : row_of_text(decision);
  c.decision.change = true;
  c.next = deck_of(row);
  return c;
}

Deck Replanner::deck_of(const PlanRow& row) const {
  Deck next = deck_with_plan(open_, row, stages_);
  next.key_origin = written_.key_origin;  // messages keep pointing where the deck set a key
  for (const char* key : kPlanKeys)
    if (!open_.key_origin.count(key)) next.key_origin[key] = "pipeline.auto";
  if (!written_.key_origin.count("data_parallel.replicas"))  // auto chose it at start, or the rank count
    next.key_origin["data_parallel.replicas"] = "pipeline.auto";
  return next;
}

namespace {

// The run rebuilt in `next` from the checkpoint in `dir` (a resume's load),
// keeping the trace events so far.
std::unique_ptr<Trainer> rebuild_from(const ProcessGrid& grid, const ComputeSetup& setup,
                                      std::unique_ptr<Trainer> trainer, const Deck& next,
                                      const std::string& resolved, const std::string& dir,
                                      int64_t first_step) {
  const std::vector<TraceEvent> events = trainer->tracer().events();
  const auto origin = trainer->tracer().origin();
  trainer.reset();  // its memory first: the new plan's run is built next
  auto rebuilt = std::make_unique<Trainer>(next, next.pipeline.partition, grid, setup);
  rebuilt->tracer().add_earlier(events, origin);
  rebuilt->runs_schedule_from(first_step);
  load_checkpoint(dir, LoadMode::Resume, next, resolved, *rebuilt, grid.pipeline());
  agree_across_replicas(grid, true);
  return rebuilt;
}

}  // namespace

std::unique_ptr<Trainer> switch_plan(const World& w, const ProcessGrid& grid, const ComputeSetup& setup,
                                     std::unique_ptr<Trainer> trainer, const Deck& next,
                                     int64_t step, MetricsFile& metrics) {
  const auto start = std::chrono::steady_clock::now();
  const std::string resolved = deck_to_toml(next);
  set_wait_phase("in the re-planning switch after step " + std::to_string(step));
  Deck synchronous = next;  // the switch reads the state back at once
  synchronous.output.checkpoint_async = false;
  checkpoint(w, grid, synchronous, resolved, *trainer, step + 1, metrics);
  const int stage = trainer->stage().stage;
  trainer = rebuild_from(grid, setup, std::move(trainer), next, resolved, checkpoint_dir(next, step + 1),
                         step + 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double end_us = trainer->tracer().now_us();
  trainer->tracer().record(EventKind::Replan, step, stage, -1, end_us - seconds * 1e6, end_us);
  if (w.rank == 0) {
    std::printf("replan after step %lld: switched to %s in %.3f s (checkpoint of step %lld in the new "
                "plan, the run rebuilt from it)\n",
                static_cast<long long>(step + 1),
                running_plan_text(Replanner::running_plan(next, next.pipeline.partition)).c_str(), seconds,
                static_cast<long long>(step + 1));
    std::fflush(stdout);
  }
  return trainer;
}

std::unique_ptr<Trainer> resume_in_checkpoint_plan(const World& w, const ProcessGrid& grid,
                                                   const ComputeSetup& setup, const Replanner& replanner,
                                                   std::unique_ptr<Trainer> trainer,
                                                   const CheckpointRead& loaded, int64_t first_step,
                                                   Deck& running) {
  std::string plan;  // rank 0: the checkpoint's plan, when it is not the running one
  if (w.rank == 0 && !loaded.deck_text.empty()) {
    const Deck saved = parse_deck_text(loaded.deck_text, loaded.path + "/manifest.h5 (deck)", {});
    const RunningPlan in_checkpoint = Replanner::running_plan(saved, saved.pipeline.partition);
    const RunningPlan now = Replanner::running_plan(running, trainer->partition());
    if (saved.pipeline.partition_strategy == PartitionStrategy::Explicit &&
        !same_plan(in_checkpoint.row, now.row))
      plan = row_text(in_checkpoint.row);
  }
  plan = share_text(plan, w.comm, "the checkpoint's plan from rank 0");
  if (plan.empty()) return trainer;
  running = replanner.deck_of(row_of_text(plan));
  if (w.rank == 0) {
    std::printf("replan: the checkpoint %s was saved after a switch: resuming in its plan, %s\n",
                loaded.path.c_str(),
                running_plan_text(Replanner::running_plan(running, running.pipeline.partition)).c_str());
    std::fflush(stdout);
  }
  return rebuild_from(grid, setup, std::move(trainer), running, deck_to_toml(running),
                      loaded.path, first_step);
}

}  // namespace pt
