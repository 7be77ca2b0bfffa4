// trainer.cpp: the training step around the executor.
#include "pipetrain/runtime/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/stage_probe.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {

Schedule schedule_for_deck(const Deck& deck, int ranks) {
  const int n = static_cast<int>(deck.pipeline.micro_batches);
  const int v = static_cast<int>(deck.pipeline.virtual_stages);
  if (deck.pipeline.schedule == ScheduleKind::File)
    return load_schedule_file(deck.pipeline.schedule_file, ranks * v, n);
  Schedule schedule = generate_schedule(deck.pipeline.schedule, ranks, n, v);
  return deck.pipeline.weight_grad == WeightGradKind::Step ? with_step_weight_grads(schedule) : schedule;
}

// The cores of this node that its ranks share: PIPETRAIN_NODE_CORES when set
// (a positive integer; e.g. a node share smaller than the CPUs online), else
// the CPUs online.
int node_cores() {
  if (const char* env = std::getenv("PIPETRAIN_NODE_CORES")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > 1 << 20)
      throw InputError(std::string("PIPETRAIN_NODE_CORES = \"") + env +
                       "\": expected a positive integer (the cores this node's ranks share)");
    return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

BlasThreadsChoice choose_blas_threads(int64_t requested, MPI_Comm comm) {
  BlasThreadsChoice c;
  MPI_Comm node = MPI_COMM_NULL;
  {
    DeadlineScope deadline("the node-local communicator split (BLAS threads)");
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  }
  MPI_CHECK(MPI_Comm_size(node, &c.ranks_on_node));
  MPI_CHECK(MPI_Comm_free(&node));
  c.node_cores = node_cores();
  c.automatic = requested == 0;
  c.threads = c.automatic ? std::max(1, c.node_cores / c.ranks_on_node) : static_cast<int>(requested);
  return c;
}

Trainer::Trainer(const Deck& deck, MPI_Comm comm, ComputeSetup setup)
    : Trainer(deck, ProcessGrid::single(comm), std::move(setup)) {}

Trainer::Trainer(const Deck& deck, const ProcessGrid& grid, ComputeSetup setup)
    : Trainer(deck, deck.pipeline.partition, grid, std::move(setup)) {}

Trainer::Trainer(const Deck& deck, const std::vector<int64_t>& partition, const ProcessGrid& grid,
                 ComputeSetup setup)
    : deck_(deck), comm_(grid.pipeline()), replicas_comm_(grid.replicas()),
      replica_(grid.replica()), replicas_(grid.data_parallel()),
      replica_group_text_(grid.replica_group_text()), setup_(std::move(setup)),
      be_(setup_.backend ? *setup_.backend : cpu_backend()) {
  PT_CHECK(data_parallel_size(deck_) == replicas_,
           "pipeline.data_parallel = " + std::to_string(data_parallel_size(deck_)) +
               " but the process grid has " + std::to_string(replicas_) + " replicas");
  MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  MPI_CHECK(MPI_Comm_size(comm_, &size_));
  schedule_ = schedule_for_deck(deck_, size_);
  PT_CHECK(schedule_.num_ranks == size_, "schedule '" + schedule_.name + "' has " +
                                             std::to_string(schedule_.num_ranks) + " ranks, the job " +
                                             std::to_string(size_));
  const CommSemantics semantics = comm_semantics_of(deck_.pipeline.transport, deck_.training.device);
  report_ = validate_schedule(schedule_, semantics);
  eval_schedule_ = forward_only_schedule(schedule_);
  validate_schedule(eval_schedule_, semantics);
  collectives_ = std::make_unique<StepCollectives>(comm_, replicas_comm_, replicas_, schedule_);
  partition_ = partition_units(model_units(deck_.model), schedule_.num_stages, partition);
  for (int st : rank_stages(schedule_, rank_)) stages_.push_back(build_stage(deck_.model, partition_, st));
  check_family_backend(deck_.model, be_);
  data_ = make_dataset(deck_, Split::Train);
  if (deck_.training.eval_every > 0) eval_data_ = make_dataset(deck_, Split::Eval);
  fill_data_caches();
  transport_ = setup_.make_transport ? setup_.make_transport(comm_) : make_mpi_transport(comm_);
  move_state_to_device();
  DefaultDeviceGuard on_device(be_.device());
  optimizer_ = std::make_unique<Optimizer>(deck_.training, params());
  if (deck_.training.precision == Precision::Fp16) {
    LossScalerConfig scaling;
    scaling.initial_scale = deck_.training.loss_scale;
    scaler_ = std::make_unique<LossScaler>(scaling);
  }
  tracer_ = std::make_unique<Tracer>(deck_.output.trace);
  if (tracer_->enabled()) clocks_ = tracer_->align_clocks(comm_);
  policies_ = resolve_recompute();
  if (deck_.pipeline.places_at_measured_times() && schedule_takes_times(schedule_.name))
    placement_ = std::make_unique<MeasuredPlacement>(schedule_.num_stages);
  replica_group_ = setup_.make_replica_group ? setup_.make_replica_group(replicas_comm_)
                                             : make_mpi_replica_group(replicas_comm_);
  build_engine();
}

// The one factory of what runs the schedule: the gradient reducer over this
// rank's stages and the executor hooked into it, configured for this rank
// and replica. The constructor and every rebalancing move build them here
// (both hold the stages' layers), so a rebuild forgets nothing.
void Trainer::build_engine() {
  executor_.reset();
  reducer_.reset();
  std::vector<StageModel*> mine;
  for (StageModel& st : stages_) mine.push_back(&st);
  reducer_ = std::make_unique<GradientReducer>(mine, *replica_group_, reduction_config_for(deck_), be_, tracer_.get(),
                                               replica_group_text_);
  ExecutorConfig config = executor_config_for(deck_);
  config.replica = replica_;
  config.loss_scaling = scaler_ != nullptr;
  if (deck_.pipeline.slowdown_rank == rank_)
    config.slowdown = {deck_.pipeline.slowdown_from_step, deck_.pipeline.slowdown_factor};
  if (reducer_->active()) {
    GradientReducer* r = reducer_.get();
    config.reduction = {[r](int stage, int mb, size_t layer) { r->layer_done(stage, mb, layer); },
                        [r] { r->poll(); }};
  }
  executor_ = std::make_unique<Executor>(config, mine, policies_, *transport_, be_, tracer_.get());
}

std::vector<Param*> Trainer::params() {
  std::vector<Param*> all;
  for (StageModel& st : stages_)
    for (Param* p : st.params()) all.push_back(p);
  return all;
}

// Synthetic data caches itself on first use: for the stages of this rank
// that read inputs (the first) or targets (the last), before step 0.
void Trainer::fill_data_caches() {
  const int64_t rows = micro_batch_rows(deck_);
  bool first = false, last = false;
  for (const StageModel& st : stages_) {
    first = first || st.is_first();
    last = last || st.is_last();
  }
  fill_data_cache(*data_, rows, first, last);
  if (eval_data_) fill_data_cache(*eval_data_, rows, first, last);
}

// Parameters are built (and initialised) on the host, then moved.
void Trainer::move_state_to_device() {
  for (StageModel& st : stages_) move_parameters(st, be_.device());
}

MemoryStats Trainer::stage_memory_stats() const {
  return setup_.device_memory_stats ? setup_.device_memory_stats() : memory_stats();
}

Trainer::~Trainer() = default;

StepRecord Trainer::train_step(int64_t step) {
  reset_memory_peaks();
  if (setup_.reset_device_memory_peaks) setup_.reset_device_memory_peaks();
  DefaultDeviceGuard on_device(be_.device());
  const auto start = std::chrono::steady_clock::now();
  Backend& be = be_;
  optimizer_->zero_grad(be);
  StepRecord rec;
  rec.step = step;
  rec.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  reducer_->begin_step(step);
  StepOutcome outcome =
      executor_->run(schedule_, *data_, step, Pass::Train, scaler_ ? scaler_->scale() : 1.f);
  // Data parallelism: the buckets still running complete; every replica
  // then holds the same gradients (the global batch's).
  reducer_->finish();

  const double reduce_start = tracer_->now_us();
  fault_point("loss", step);
  rec.loss = collectives_->mean_loss(outcome, stages_, deck_.training.batch_size);
  // fp16: unscale, or skip the whole step on every stage after an overflow.
  rec.skipped = scaler_ && !scaler_->finish_backward(be, params(), comm_);
  fault_point("grad_norm", step);
  rec.grad_norm = rec.skipped ? std::nan("") : collectives_->global_grad_norm(stages_, be, step);
  fault_point("bubble", step);
  rec.bubble = collectives_->measured_bubble(outcome, rec.rank_compute_s);
  rec.partition = partition_;
  if (rebalancer_) rebalancer_->observe(rec.rank_compute_s);
  tracer_->record(EventKind::Reduction, step, stage().stage, -1, reduce_start, tracer_->now_us());
  rec.lr = learning_rate(deck_.training, step);
  const float clip_scale = StepCollectives::clip_scale(rec.grad_norm, deck_.training.grad_clip);
  const double optimizer_start = tracer_->now_us();
  if (!rec.skipped) optimizer_->step(be, static_cast<float>(rec.lr), clip_scale);
  be.synchronize();
  tracer_->record(EventKind::Optimizer, step, stage().stage, -1, optimizer_start, tracer_->now_us());
  be.trim_cached_memory();  // a step boundary: cached blocks this step did not reuse go back
  rec.step_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fault_point("memory", step);
  rec.rank_peak_bytes = collectives_->gather_memory_peaks(stage_memory_stats());
  // Placed only with a step left to run it (the same decision on every rank).
  if (placement_ && placement_->observe(executor_->action_times()) && step + 1 < deck_.training.steps)
    place_schedule(step, rec);
  return rec;
}

void Trainer::place_schedule(int64_t step, StepRecord& rec) {
  placement_times_ = placement_->agreed_times(comm_, replicas_comm_);
  placement_.reset();
  PlacedSchedules placed = place_at_times(
      schedule_, placement_times_, comm_semantics_of(deck_.pipeline.transport, deck_.training.device));
  rec.schedule_placed = true;
  rec.placed_bubble_before = placed.unit_bubble;  // schedule_ is the unit-time placement
  rec.placed_bubble_after = placed.bubble;
  rec.placed_bubble_timed = placed.timed_bubble;
  schedule_ = std::move(placed.train);
  eval_schedule_ = std::move(placed.eval);
  report_ = std::move(placed.report);
  schedule_first_step_ = step + 1;
}

namespace {

std::string stage_setting(const Deck& deck, int stage) {
  const auto& per_stage = deck.pipeline.recompute_stages;
  return per_stage.empty() ? deck.pipeline.recompute : per_stage[static_cast<size_t>(stage)];
}

std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

}  // namespace

// "auto" measures one micro-batch under each candidate policy, from the
// cheapest in compute to the most frugal in memory, and keeps the first whose
// estimated peak -- persistent state + peak in-flight micro-batches x stash +
// transient + communication buffers -- fits the budget. Every rank learns every stage's choice; if a
// stage fits with none, every rank throws the same InputError.
std::vector<RecomputePolicy> Trainer::resolve_recompute() {
  if (schedule_.num_stages == size_) return {resolve_recompute_one()};
  // Several stages per rank: fixed policies ("auto" is refused by the deck
  // check, docs/schedules.md), the same on every rank.
  recompute_.clear();
  std::vector<RecomputePolicy> mine;
  for (int st = 0; st < schedule_.num_stages; ++st) {
    RecomputeChoice c;
    c.requested = stage_setting(deck_, st);
    PT_CHECK(!is_auto_recompute(c.requested), "recompute \"auto\" with several stages per rank");
    const RecomputePolicy policy = parse_recompute_policy(c.requested, deck_.where("pipeline.recompute"));
    c.policy = policy.name();
    recompute_.push_back(c);
    if (stage_rank(schedule_, st) == rank_) mine.push_back(policy);
  }
  return mine;
}

RecomputePolicy Trainer::resolve_recompute_one() {
  const StageModel& stage = stages_.front();
  const std::string setting = stage_setting(deck_, rank_);
  const std::string key = deck_.pipeline.recompute_stages.empty()
                              ? deck_.where("pipeline.recompute")
                              : deck_.where("pipeline.recompute_stages") + " entry " +
                                    std::to_string(rank_);
  RecomputeChoice mine;
  mine.requested = setting;
  RecomputePolicy chosen;
  bool fits = true;
  if (!is_auto_recompute(setting)) {
    chosen = parse_recompute_policy(setting, key);
  } else {
    mine.budget_bytes = deck_.pipeline.memory_budget_mb * 1048576.0;
    const double persistent = static_cast<double>(stage_memory_stats().live_total);
    const double in_flight = report_.peak_in_flight[stage.stage];
    // Receives posted one action early and sends not yet completed: up to two
    // micro-batches of stage input and output each.
    const int64_t rows = micro_batch_rows(deck_);
    const double comm = 2.0 * 4.0 * static_cast<double>(shape_numel(stage.input_shape(rows)) +
                                                        shape_numel(stage.output_shape(rows)));
    fits = false;
    for (const char* candidate : {"none", "selective", "every:2", "full"}) {
      chosen = parse_recompute_policy(candidate, key);
      StageProbe probe(stages_.front(), be_, chosen, executor_config_for(deck_));
      const MicroBatchProbe m = probe.probe_micro_batch(
          *data_, [this] { return stage_memory_stats(); }, setup_.reset_device_memory_peaks);
      mine.needed_bytes = stage_peak_bytes(persistent + comm, in_flight,
                                           static_cast<double>(m.stash_bytes),
                                           static_cast<double>(m.transient_bytes));
      if (mine.needed_bytes <= mine.budget_bytes) {
        fits = true;
        break;
      }
    }
  }
  mine.policy = chosen.name();
  // Share every stage's choice: (fits, needed, budget) numbers and names.
  double numbers[3] = {fits ? 1.0 : 0.0, mine.needed_bytes, mine.budget_bytes};
  std::vector<double> all(3 * size_);
  timed_allgather(numbers, 3, MPI_DOUBLE, all.data(), comm_,
                  "the recomputation choices all-gather");
  char name[32] = {0};
  std::snprintf(name, sizeof name, "%s", mine.policy.c_str());
  std::vector<char> names(32 * size_);
  timed_allgather(name, 32, MPI_CHAR, names.data(), comm_,
                  "the recomputation policy names all-gather");
  recompute_.clear();
  std::string failures;
  for (int r = 0; r < size_; ++r) {
    RecomputeChoice c;
    c.requested = stage_setting(deck_, r);
    c.policy = std::string(&names[32 * r]);
    c.needed_bytes = all[3 * r + 1];
    c.budget_bytes = all[3 * r + 2];
    if (all[3 * r] == 0.0)
      failures += "\n  stage " + std::to_string(r) + ": needs " + mib(c.needed_bytes) +
                  " even with full recomputation, has " + mib(c.budget_bytes);
    recompute_.push_back(c);
  }
  if (!failures.empty())
    throw InputError(deck_.where("pipeline.memory_budget_mb") + " = " +
                     std::to_string(deck_.pipeline.memory_budget_mb) +
                     ": no recomputation policy fits the budget on every stage:" + failures);
  return chosen;
}

std::vector<std::vector<TraceEvent>> Trainer::gather_trace() { return tracer_->gather(comm_, clocks_); }

double Trainer::evaluate() {
  DefaultDeviceGuard on_device(be_.device());
  PT_CHECK(eval_data_ != nullptr, "evaluation needs training.eval_every > 0");
  double sum = 0.0;
  fault_point("eval");
  for (int64_t b = 0; b < deck_.training.eval_batches; ++b)
    sum += collectives_->mean_loss(executor_->run(eval_schedule_, *eval_data_, b, Pass::Evaluate),
                                   stages_, deck_.training.batch_size);
  return sum / static_cast<double>(deck_.training.eval_batches);
}

std::vector<float> Trainer::gather_parameters() { return collectives_->gather_parameters(stages_); }

}  // namespace pt
