// auto_plan.cpp: pipeline.auto, the planner's choice made for the run
// (app/auto_plan.hpp, docs/planner.md).
//
// What is open to the choice is decided on rank 0, whose deck knows which
// keys the file or --set wrote (the other ranks hold the resolved deck, in
// which every key is written), and broadcast. Every pipeline measures its
// brief profiles; world rank 0's ranking decides, and its choice is
// broadcast, so every replica and stage runs the same plan.
#include "pipetrain/app/auto_plan.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

#include "pipetrain/app/profile_command.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/runtime/deck_plan.hpp"
#include "pipetrain/runtime/profile_reduction.hpp"
#include "pipetrain/schedule/recompute.hpp"

namespace pt {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The keys auto leaves alone when the deck sets them, in broadcast order.
const char* const kOpenKeys[] = {"pipeline.schedule",       "pipeline.micro_batches", "pipeline.recompute",
                                 "pipeline.partition",      "pipeline.virtual_stages", "pipeline.weight_grad",
                                 "data_parallel.replicas", "pipeline.stages"};
constexpr int kOpenKeyCount = sizeof(kOpenKeys) / sizeof(kOpenKeys[0]);

bool deck_sets(const Deck& deck, const std::string& key) { return deck.key_origin.count(key) > 0; }

double node_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0.0;
}

std::string mib(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / kMiB);
  return buf;
}

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Which of kOpenKeys the deck sets: rank 0 knows, every rank learns.
std::vector<bool> share_set_keys(const Deck& deck, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  int flags[kOpenKeyCount] = {};
  if (rank == 0)
    for (int i = 0; i < kOpenKeyCount; ++i) flags[i] = deck_sets(deck, kOpenKeys[i]) ? 1 : 0;
  timed_bcast(flags, kOpenKeyCount, MPI_INT, 0, comm, "pipeline.auto's open keys from rank 0");
  return std::vector<bool>(flags, flags + kOpenKeyCount);
}

// The deck with key_origin saying which of kOpenKeys it sets (and no others).
Deck with_set_keys(const Deck& deck, const std::vector<bool>& set) {
  Deck d = deck;
  for (int i = 0; i < kOpenKeyCount; ++i) {
    if (set[static_cast<size_t>(i)] && !deck_sets(d, kOpenKeys[i])) d.key_origin[kOpenKeys[i]] = d.source_file;
    if (!set[static_cast<size_t>(i)]) d.key_origin.erase(kOpenKeys[i]);
  }
  return d;
}

// The schedules auto weighs when the deck does not name one.
std::vector<std::string> open_schedules(const Deck& deck, int stages) {
  std::vector<std::string> s = {"gpipe", "1f1b", "zb-h1"};
  if (stages > 1 && model_units(deck.model) >= 2 * static_cast<int64_t>(stages)) {
    s.push_back("interleaved");
    s.push_back("zb-v");
  }
  return s;
}

void narrow_recompute(const Deck& deck, PlanRequest& r) {
  const std::string& policy = deck.pipeline.recompute;
  if (!deck_sets(deck, "pipeline.recompute")) {
    if (!selective_recompute_drops(deck.model)) r.recompute = {"none", "full"};
    return;
  }
  if (policy == "auto")
    throw InputError(deck.where("pipeline.recompute") +
                     " = \"auto\": pipeline.auto chooses the recompute policy itself; leave "
                     "pipeline.recompute out, or name one policy (none, selective, every:K, full)");
  RecomputePolicy::parse(policy);  // a bad policy was refused by the deck; kept as written
  r.recompute = {policy};
}

void narrow_partition(const Deck& deck, PlanRequest& r) {
  if (!deck_sets(deck, "pipeline.partition")) return;
  if (deck.pipeline.partition_strategy == PartitionStrategy::Explicit) {
    r.fixed_partition = deck.pipeline.partition;
    r.partitions = {PartitionObjective::Uniform};  // evaluated as given, not solved
  } else {
    r.partitions = {objective_of(deck.pipeline.partition_strategy)};
  }
}

// The plan's recompute and partition as the row names them.
std::string partition_text(const PlanRow& row) {
  return list_text(row.units_per_stage) + " (" +
         (row.fixed_partition ? std::string("as the deck gives it") : objective_name(row.partition)) + ")";
}

// Rank 0's row (its schedule, N, recompute and partition) on every rank.
PlanRow share_row(const PlanRow* row_on_rank0, MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  std::string text;
  if (rank == 0) {
    const PlanRow& r = *row_on_rank0;
    text = r.schedule + " " + std::to_string(r.micro_batches) + " " + r.recompute + " " +
           std::to_string(static_cast<int>(r.partition)) + " " + (r.fixed_partition ? "1" : "0") + " " +
           std::to_string(static_cast<int>(r.weight_grad)) + " " + std::to_string(r.data_parallel) + " " +
           std::to_string(r.num_stages);
    for (int64_t u : r.units_per_stage) text += " " + std::to_string(u);
  }
  long long size = static_cast<long long>(text.size());
  timed_bcast(&size, 1, MPI_LONG_LONG, 0, comm, "pipeline.auto's choice from rank 0");
  text.resize(static_cast<size_t>(size));
  timed_bcast(text.data(), static_cast<int>(size), MPI_CHAR, 0, comm, "pipeline.auto's choice from rank 0");
  if (rank == 0) return *row_on_rank0;
  PlanRow row;
  std::istringstream in(text);
  int objective = 0, fixed = 0, weight_grad = 0;
  in >> row.schedule >> row.micro_batches >> row.recompute >> objective >> fixed >> weight_grad >>
      row.data_parallel >> row.num_stages;
  row.partition = static_cast<PartitionObjective>(objective);
  row.weight_grad = static_cast<WeightGradKind>(weight_grad);
  row.fixed_partition = fixed == 1;
  for (int64_t u = 0; in >> u;) row.units_per_stage.push_back(u);
  return row;
}

// The choice an earlier run of the deck wrote into its deck.resolved.toml.
PlanRow choice_in(const std::string& resolved_path) {
  const Deck d = parse_deck_file(resolved_path, {});
  PlanRow row;
  row.schedule = kind_name(d.pipeline.schedule);
  row.micro_batches = static_cast<int>(d.pipeline.micro_batches);
  row.recompute = d.pipeline.recompute;
  row.weight_grad = d.pipeline.weight_grad;
  row.data_parallel = static_cast<int>(data_parallel_size(d));
  row.fixed_partition = true;
  row.units_per_stage = d.pipeline.partition;
  if (d.pipeline.partition_strategy != PartitionStrategy::Explicit || row.units_per_stage.empty())
    throw InputError(resolved_path + ": pipeline.partition is not a list of counts; a run with "
                     "pipeline.auto writes its choice there, and a resume keeps it");
  return row;
}

void print_choice(const Deck& deck, const AutoChoice& c) {
  const PlanTable& t = c.table;
  const PlanRow& best = t.rows[static_cast<size_t>(c.chosen)];
  std::printf("auto: chose %s: predicted step %.2f ms, %.1f samples/s, largest stage peak %s "
              "(budget %s: %s); %zu plans weighed\n",
              plan_choice_text(best).c_str(), best.step_time_s * 1e3, best.throughput_samples_per_s,
              mib(best.max_peak_bytes).c_str(), mib(t.memory_budget_bytes).c_str(),
              plan_budget_name(deck).c_str(), t.rows.size());
  // Runners-up: the next plans that fit and differ from those shown (several
  // objectives often find the same counts).
  std::vector<const PlanRow*> shown_rows = {&best};
  const auto same_plan = [](const PlanRow& a, const PlanRow& b) {
    return a.data_parallel == b.data_parallel && a.schedule == b.schedule &&
           a.micro_batches == b.micro_batches && a.weight_grad == b.weight_grad &&
           a.recompute == b.recompute && a.units_per_stage == b.units_per_stage;
  };
  int shown = 0;
  for (size_t i = static_cast<size_t>(c.chosen) + 1; i < t.rows.size() && shown < 3; ++i) {
    const PlanRow& r = t.rows[i];
    if (!r.fits || std::any_of(shown_rows.begin(), shown_rows.end(),
                               [&](const PlanRow* s) { return same_plan(*s, r); }))
      continue;
    shown_rows.push_back(&r);
    std::printf("auto: runner-up %d: %s: %.2f ms (+%.1f%%)\n", ++shown, plan_choice_text(r).c_str(),
                r.step_time_s * 1e3, 100.0 * (r.step_time_s / best.step_time_s - 1.0));
  }
  if (t.num_stages == 0)  // the rows hold several grids
    std::printf("auto: grid P x D = %d x %d of the %d ranks (every grid of them weighed)\n",
                best.num_stages, best.data_parallel, t.total_ranks);
  std::printf("auto: %s\n", deck_rank_text(deck, t).c_str());
  std::fflush(stdout);
}

// The chosen deck passes the checks a deck written by hand does (layout,
// divisibility, the schedule's validator with the transport's semantics);
// a failure is a defect of auto, named as such.
void check_chosen_layout(const Deck& chosen, int ranks) {
  try {
    const DeckLayout layout = resolve_deck_layout(chosen, ranks);
    validate_schedule(schedule_for_deck(chosen, layout.pipeline_ranks),
                      comm_semantics_of(chosen.pipeline.transport, chosen.training.device));
  } catch (const Error& e) {
    PT_FAIL(std::string("pipeline.auto chose a plan the deck checks refuse (a defect): ") + e.what());
  }
}

}  // namespace

Deck with_open_keys_of_rank0(const Deck& deck, MPI_Comm comm) {
  return with_set_keys(deck, share_set_keys(deck, comm));
}

double plan_budget_bytes(const Deck& deck, int stages) {
  if (deck.pipeline.memory_budget_mb > 0.0) return deck.pipeline.memory_budget_mb * kMiB;
  return node_memory_bytes() / std::max(1, stages);
}

std::string plan_budget_name(const Deck& deck) {
  if (deck.pipeline.memory_budget_mb > 0.0)
    return deck.described("pipeline.memory_budget_mb", std::to_string(deck.pipeline.memory_budget_mb));
  return "this node's memory over the stages, pipeline.memory_budget_mb being 0";
}

bool auto_chooses_grid(const Deck& deck, int ranks) {
  const bool counts_given =
      deck_sets(deck, "pipeline.partition") && deck.pipeline.partition_strategy == PartitionStrategy::Explicit;
  return ranks > 1 && !deck_sets(deck, "data_parallel.replicas") && !deck_sets(deck, "pipeline.stages") &&
         !deck.rebalance.enabled && !counts_given;
}

PlanRequest auto_plan_request(const Deck& deck, int stages, double budget_bytes) {
  const PipelineConfig& p = deck.pipeline;
  if (!p.recompute_stages.empty())
    throw InputError(deck.where("pipeline.recompute_stages") +
                     ": pipeline.auto chooses one recompute policy for every stage; remove "
                     "pipeline.recompute_stages, or set pipeline.auto = false");
  PlanRequest r;
  r.num_stages = stages;
  r.batch_size = deck.training.batch_size;
  // 0: every P x D grid of the `stages` ranks (measure_plans, rank_grid_plans).
  r.data_parallel = auto_chooses_grid(deck, stages) ? 0 : static_cast<int>(data_parallel_size(deck));
  r.memory_budget_bytes = budget_bytes;
  r.weight_grad_share = weight_grad_share(deck.model);
  r.weight_grad = p.weight_grad;
  r.timed_placement = zero_bubble_placed_at_measured_times(deck);
  if (deck_sets(deck, "pipeline.micro_batches")) r.micro_batch_counts = {static_cast<int>(p.micro_batches)};
  if (deck_sets(deck, "pipeline.schedule")) {
    if (p.schedule == ScheduleKind::File)
      throw InputError(deck.where("pipeline.schedule") +
                       " = \"file\": pipeline.auto weighs the generated schedules only; leave "
                       "pipeline.schedule out or name a generated one");
    r.schedules = {kind_name(p.schedule)};
  } else {
    r.schedules = open_schedules(deck, stages);
  }
  r.virtual_stages = deck_sets(deck, "pipeline.virtual_stages") ? static_cast<int>(p.virtual_stages) : 2;
  narrow_recompute(deck, r);
  narrow_partition(deck, r);
  return r;
}

namespace {

// The D > 1 that `request` weighs on the ranks of `world` (the P x D grids
// of comm's ranks when it leaves D open).
std::vector<int> weighed_replica_counts(const PlanRequest& request, MPI_Comm comm, MPI_Comm world) {
  int ranks = 1, world_ranks = 1;
  MPI_CHECK(MPI_Comm_size(comm, &ranks));
  MPI_CHECK(MPI_Comm_size(world, &world_ranks));
  if (request.data_parallel == 0) return grid_replica_counts(ranks, request.batch_size);
  if (request.data_parallel > 1 && world_ranks % request.data_parallel == 0) return {request.data_parallel};
  return {};
}

}  // namespace

PlanTable measure_plans(const Deck& deck, const PlanRequest& request, MPI_Comm comm, MPI_Comm world,
                        const ComputeResources& compute, const ProfileOptions& options,
                        bool both_weight_grads, std::map<int64_t, ModelProfile>* profiles) {
  Backend& be = compute.setup.backend ? *compute.setup.backend : cpu_backend();
  ProfileOptions measuring = options;  // the chains time the step's split where "step" is weighed
  measuring.step_weight_grads = both_weight_grads || request.weight_grad == WeightGradKind::Step;
  // The reductions of every D weighed, timed first (the grids' replica links
  // are asked for before their profiles) and kept in every profile.
  const std::vector<MeasuredReduction> reductions =
      time_replica_reductions(deck, be, world, weighed_replica_counts(request, comm, world), measuring);
  // One profile per micro-batch size, measured at its first use: every rank
  // asks for the same sizes in the same order (collective).
  std::map<int64_t, ModelProfile> measured;
  const auto profile_for = [&](int64_t rows) {
    auto it = measured.find(rows);
    if (it == measured.end()) {
      BatchSplit split;  // `rows` is already one replica's micro-batch
      split.batch_size = deck.training.batch_size;
      split.micro_batches = deck.training.batch_size / rows;
      it = measured.emplace(rows, profile_model(deck, split, be, comm, measuring)).first;
      it->second.reductions = reductions;
    }
    return it->second;
  };
  // The pipelines' links: each plan's profile's own (empty links). The
  // replicas': the reductions' fitted link (every D weighed was timed).
  const auto rank_for = [&](const PlanRequest& r) {
    if (r.data_parallel == 0)  // every P x D grid of the ranks
      return rank_grid_plans(profile_for, [](int) { return std::vector<LinkCost>{}; },
                             [&](int, int d) { return replica_link_of(reductions, d, LinkCost{}); }, r,
                             r.num_stages);
    PlanRequest fixed = r;
    fixed.replica_link = replica_link_of(reductions, r.data_parallel, LinkCost{});
    return rank_plans(profile_for, {}, fixed);
  };
  const auto keep_profiles = [&] {  // after the last rank_for: nothing is measured later
    if (profiles) *profiles = std::move(measured);
  };
  if (!both_weight_grads) {
    PlanTable table = rank_for(request);
    keep_profiles();
    return table;
  }
  // pipeline.weight_grad open: the schedules without W of their own once
  // more with one weight-gradient pass per step.
  PlanRequest per_micro_batch = request, per_step = request;
  per_micro_batch.weight_grad = WeightGradKind::MicroBatch;
  per_step.weight_grad = WeightGradKind::Step;
  per_step.schedules.clear();
  for (const std::string& name : request.schedules)
    if (name == "gpipe" || name == "1f1b" || name == "interleaved") per_step.schedules.push_back(name);
  std::vector<PlanTable> tables;
  tables.push_back(rank_for(per_micro_batch));
  if (!per_step.schedules.empty()) tables.push_back(rank_for(per_step));
  keep_profiles();
  return merge_plan_tables(std::move(tables));
}

bool weight_grad_open(const Deck& deck) { return !deck_sets(deck, "pipeline.weight_grad"); }

int auto_pick(const PlanTable& table, const Deck& deck) {
  if (table.best >= 0) return table.best;
  const PlanRow* smallest = nullptr;
  for (const PlanRow& r : table.rows)
    if (!r.units_per_stage.empty() && std::isfinite(r.step_time_s) &&
        (!smallest || r.max_peak_bytes < smallest->max_peak_bytes))
      smallest = &r;
  std::string text = "pipeline.auto: no plan of the " + std::to_string(table.rows.size()) +
                     " weighed fits the memory budget of " + mib(table.memory_budget_bytes) + " (" +
                     plan_budget_name(deck) + ")";
  if (smallest)
    text += "; the smallest feasible budget is " + mib(smallest->max_peak_bytes) + ", with " +
            plan_choice_text(*smallest) + "; raise pipeline.memory_budget_mb to at least " +
            std::to_string(static_cast<long long>(std::ceil(smallest->max_peak_bytes / kMiB))) +
            ", or fix fewer keys";
  else if (!table.rows.empty())
    text += "; " + table.rows.front().note;
  throw InputError(text);
}

Deck deck_with_plan(const Deck& deck, const PlanRow& row, int stages) {
  Deck d = deck;
  PipelineConfig& p = d.pipeline;
  p.schedule = kind_named<ScheduleKind>(row.schedule);
  p.micro_batches = row.micro_batches;
  p.recompute = row.recompute;
  p.partition_strategy = PartitionStrategy::Explicit;
  p.partition = row.units_per_stage;
  if (!deck_sets(deck, "pipeline.weight_grad")) p.weight_grad = row.weight_grad;
  const bool grid = auto_chooses_grid(deck, stages);
  if (grid) d.data_parallel.replicas = std::max(1, row.data_parallel);  // pipeline.stages: 0 = ranks / D
  const int pipeline_ranks = grid ? stages / std::max(1, row.data_parallel) : stages;
  const int64_t stage_count = static_cast<int64_t>(row.units_per_stage.size());
  if (p.schedule == ScheduleKind::Interleaved) p.virtual_stages = stage_count / std::max(1, pipeline_ranks);
  p.auto_plan = false;
  for (const char* key : kOpenKeys)
    if (!deck_sets(deck, key) && (grid || std::string(key) != "data_parallel.replicas") &&
        std::string(key) != "pipeline.stages")
      d.key_origin[key] = "pipeline.auto";
  return d;
}

Deck choose_auto_plan(const Deck& deck, MPI_Comm world, MPI_Comm pipeline,
                      const ComputeResources& compute, const std::string& earlier_resolved,
                      AutoChoice* choice) {
  int rank = 0, stages = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(pipeline, &stages);
  const Deck open = with_open_keys_of_rank0(deck, world);
  int resume_flag = rank == 0 && !earlier_resolved.empty() && access(earlier_resolved.c_str(), R_OK) == 0;
  timed_bcast(&resume_flag, 1, MPI_INT, 0, world, "pipeline.auto's resume flag from rank 0");
  AutoChoice c;
  PlanRow row;
  if (resume_flag) {  // a resume keeps the first run's choice: no new profiles
    PlanRow earlier;
    if (rank == 0) earlier = choice_in(earlier_resolved);
    row = share_row(&earlier, world);
    if (rank == 0)
      std::printf("auto: resuming: keeps the choice in %s: %s\n", earlier_resolved.c_str(),
                  plan_choice_text(row).c_str());
  } else {
    set_wait_phase("in pipeline.auto's profiles");
    const PlanRequest request = auto_plan_request(open, stages, plan_budget_bytes(deck, stages));
    c.table = measure_plans(deck, request, pipeline, world, compute, options_on(compute, ProfileOptions::brief()),
                            weight_grad_open(open), &c.profiles);
    if (rank == 0) c.chosen = auto_pick(c.table, open);  // InputError: MPI_Abort ends every rank
    row = share_row(rank == 0 ? &c.table.rows[static_cast<size_t>(c.chosen)] : nullptr, world);
    if (rank == 0) print_choice(open, c);
  }
  if (choice) *choice = std::move(c);
  Deck chosen = deck_with_plan(open, row, stages);
  const std::map<std::string, std::string> chosen_keys = chosen.key_origin;
  chosen.key_origin = deck.key_origin;  // messages keep pointing where the deck set a key
  for (const char* key : kOpenKeys)
    if (!deck_sets(open, key) && chosen_keys.count(key) && chosen_keys.at(key) == "pipeline.auto")
      chosen.key_origin[key] = "pipeline.auto";
  if (rank == 0) check_chosen_layout(chosen, stages);  // InputError: MPI_Abort ends every rank
  return chosen;
}

std::string plan_choice_text(const PlanRow& row) {
  return row.schedule + " N=" + std::to_string(row.micro_batches) + " recompute " + row.recompute +
         (row.weight_grad == WeightGradKind::Step ? " weight_grad step" : "") + ", partition " +
         partition_text(row) +
         (row.data_parallel > 1 ? ", " + std::to_string(row.data_parallel) + " data-parallel replicas" : "");
}

std::string deck_rank_text(const Deck& deck, const PlanTable& table) {
  const PartitionStrategy strategy = deck.pipeline.partition_strategy;
  std::string recompute = deck.pipeline.recompute;
  std::string recompute_text = recompute;
  if (recompute == "selective" && !selective_recompute_drops(deck.model)) {
    recompute = "none";
    recompute_text += " (= none for this model)";
  }
  const std::string point = std::string("the deck as written (") + kind_name(deck.pipeline.schedule) +
                            ", N=" + std::to_string(deck.pipeline.micro_batches) + ", recompute " +
                            recompute_text + ", partition " + kind_name(strategy) + ")";
  for (size_t i = 0; i < table.rows.size(); ++i) {
    const PlanRow& r = table.rows[i];
    const bool same_partition = strategy == PartitionStrategy::Explicit
                                    ? r.units_per_stage == deck.pipeline.partition
                                    : !r.fixed_partition && strategy_of(r.partition) == strategy;
    const bool step = deck.pipeline.weight_grad == WeightGradKind::Step &&
                      (r.schedule == "gpipe" || r.schedule == "1f1b" || r.schedule == "interleaved");
    const WeightGradKind weight_grad = step ? WeightGradKind::Step : WeightGradKind::MicroBatch;
    if (r.data_parallel == data_parallel_size(deck) && r.schedule == kind_name(deck.pipeline.schedule) &&
        r.weight_grad == weight_grad &&
        r.micro_batches == deck.pipeline.micro_batches && r.recompute == recompute && same_partition) {
      char step[48];
      std::snprintf(step, sizeof step, ": predicted %.2f ms", r.step_time_s * 1e3);
      std::string text = point + " ranks " + std::to_string(i + 1) + " of " +
                         std::to_string(table.rows.size()) + step;
      if (!r.fits) text += ", does not fit (" + r.note + ")";
      return text;
    }
  }
  return point + " is not among the plans weighed";
}

}  // namespace pt
