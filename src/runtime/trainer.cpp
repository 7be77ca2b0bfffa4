// trainer.cpp: the training step around the executor.
#include "pipetrain/runtime/trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/schedule/semantics.hpp"

namespace pt {

Schedule schedule_for_deck(const Deck& deck, int ranks) {
  const int n = static_cast<int>(deck.pipeline.micro_batches);
  const int v = static_cast<int>(deck.pipeline.virtual_stages);
  if (deck.pipeline.schedule == "file")
    return load_schedule_file(deck.pipeline.schedule_file, ranks * v, n);
  Schedule schedule = generate_schedule(deck.pipeline.schedule, ranks, n, v);
  return deck.pipeline.weight_grad == "step" ? with_step_weight_grads(schedule) : schedule;
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

BlasThreadsChoice choose_blas_threads(const Deck& deck, MPI_Comm comm) {
  BlasThreadsChoice c;
  MPI_Comm node = MPI_COMM_NULL;
  {
    DeadlineScope deadline("the node-local communicator split (BLAS threads)");
    MPI_CHECK(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  }
  MPI_CHECK(MPI_Comm_size(node, &c.ranks_on_node));
  MPI_CHECK(MPI_Comm_free(&node));
  c.node_cores = node_cores();
  c.automatic = deck.training.blas_threads == 0;
  c.threads = c.automatic ? std::max(1, c.node_cores / c.ranks_on_node)
                          : static_cast<int>(deck.training.blas_threads);
  return c;
}

Trainer::Trainer(const Deck& deck, MPI_Comm comm, ComputeSetup setup)
    : Trainer(deck, ProcessGrid::single(comm), std::move(setup)) {}

Trainer::Trainer(const Deck& deck, const ProcessGrid& grid, ComputeSetup setup)
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
  partition_ = partition_units(model_units(deck_.model), schedule_.num_stages,
                               deck_.pipeline.partition);
  for (int st : rank_stages(schedule_, rank_)) stages_.push_back(build_stage(deck_.model, partition_, st));
  data_ = make_dataset(deck_, Split::Train);
  if (deck_.training.eval_every > 0) eval_data_ = make_dataset(deck_, Split::Eval);
  fill_data_caches();
  transport_ = setup_.make_transport ? setup_.make_transport(comm_) : make_mpi_transport(comm_);
  move_state_to_device();
  DefaultDeviceGuard on_device(be_.device());
  optimizer_ = std::make_unique<Optimizer>(deck_.training, params());
  if (deck_.training.precision == "fp16") {
    LossScalerConfig scaling;
    scaling.initial_scale = deck_.training.loss_scale;
    scaler_ = std::make_unique<LossScaler>(scaling);
  }
  tracer_ = std::make_unique<Tracer>(deck_.output.trace);
  if (tracer_->enabled()) clocks_ = tracer_->align_clocks(comm_);
  std::vector<StageModel*> mine;
  for (StageModel& st : stages_) mine.push_back(&st);
  executor_ = std::make_unique<Executor>(mine, *transport_, deck_, be_, resolve_recompute(),
                                         tracer_.get());
  executor_->set_replica(replica_);
  if (deck_.pipeline.places_at_measured_times() && schedule_takes_times(schedule_.name)) {
    placement_ = std::make_unique<MeasuredPlacement>(schedule_.num_stages);
    executor_->set_time_actions(true);
  }
  replica_group_ = setup_.make_replica_group ? setup_.make_replica_group(replicas_comm_)
                                             : make_mpi_replica_group(replicas_comm_);
  connect_reducer();
}

// The gradient reducer over this rank's stages, hooked into the executor;
// made again after a rebalancing move (the reducer holds the layers).
void Trainer::connect_reducer() {
  std::vector<StageModel*> mine;
  for (StageModel& st : stages_) mine.push_back(&st);
  reducer_ = std::make_unique<GradientReducer>(mine, *replica_group_, deck_, be_, tracer_.get(),
                                               replica_group_text_);
  if (reducer_->active()) {
    GradientReducer* r = reducer_.get();
    executor_->set_reduction_hooks(
        {[r](int stage, int mb, size_t layer) { r->layer_done(stage, mb, layer); },
         [r] { r->poll(); }});
  }
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
  if (scaler_) executor_->set_loss_scale(scaler_->scale());
  executor_->set_compute_slowdown(slowdown_at(step));
  rec.loss_scale = scaler_ ? scaler_->scale() : 1.0;
  reducer_->begin_step(step);
  StepOutcome outcome = executor_->run(schedule_, *data_, step, Pass::Train);
  // Data parallelism: the buckets still running complete; every replica
  // then holds the same gradients (the global batch's).
  reducer_->finish();

  const double reduce_start = tracer_->now_us();
  fault_point("loss", step);
  rec.loss = mean_loss(outcome);
  // fp16: unscale, or skip the whole step on every stage after an overflow.
  rec.skipped = scaler_ && !scaler_->finish_backward(be, params(), comm_);
  fault_point("grad_norm", step);
  rec.grad_norm = rec.skipped ? std::nan("") : global_grad_norm(step);
  fault_point("bubble", step);
  rec.bubble = measured_bubble(outcome, rec.stage_compute_s);
  rec.partition = partition_;
  if (rebalancer_) rebalancer_->observe(rec.stage_compute_s);
  tracer_->record(EventKind::Reduction, step, stage().stage, -1, reduce_start, tracer_->now_us());
  rec.lr = learning_rate(deck_.training, step);
  float clip_scale = 1.f;
  const double clip = deck_.training.grad_clip;
  if (clip > 0.0 && rec.grad_norm > clip)
    clip_scale = static_cast<float>(clip / (rec.grad_norm + 1e-6));
  const double optimizer_start = tracer_->now_us();
  if (!rec.skipped) optimizer_->step(be, static_cast<float>(rec.lr), clip_scale);
  be.synchronize();
  tracer_->record(EventKind::Optimizer, step, stage().stage, -1, optimizer_start, tracer_->now_us());
  be.trim_cached_memory();  // a step boundary: cached blocks this step did not reuse go back
  rec.step_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fault_point("memory", step);
  rec.stage_peak_bytes = gather_memory_peaks();
  // Placed only with a step left to run it (the same decision on every rank).
  if (placement_ && placement_->observe(executor_->action_times()) && step + 1 < deck_.training.steps)
    place_schedule(step, rec);
  return rec;
}

void Trainer::place_schedule(int64_t step, StepRecord& rec) {
  placement_times_ = placement_->agreed_times(comm_, replicas_comm_);
  placement_.reset();
  executor_->set_time_actions(false);
  TimedPlacement placed = generate_at_times(schedule_.name, size_, schedule_.num_micro_batches,
                                            placement_times_);
  const CommSemantics semantics = comm_semantics_of(deck_.pipeline.transport, deck_.training.device);
  report_ = validate_schedule(placed.schedule, semantics);
  rec.schedule_placed = true;
  rec.placed_bubble_before = placed.unit_bubble;  // schedule_ is the unit-time placement
  rec.placed_bubble_after = placed.bubble;
  rec.placed_bubble_timed = placed.timed_bubble;
  schedule_ = std::move(placed.schedule);
  eval_schedule_ = forward_only_schedule(schedule_);
  validate_schedule(eval_schedule_, semantics);
  schedule_first_step_ = step + 1;
}

std::vector<std::vector<double>> Trainer::gather_memory_peaks() {
  const MemoryStats stats = stage_memory_stats();
  const int cats = static_cast<int>(MemCategory::Count);
  std::vector<double> mine(stats.peak, stats.peak + cats);
  mine.push_back(static_cast<double>(stats.peak_total));
  std::vector<double> all(rank_ == 0 ? mine.size() * size_ : 0);
  timed_gather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), 0, comm_,
               "the per-stage memory peaks gather");
  std::vector<std::vector<double>> per_stage;
  for (int r = 0; rank_ == 0 && r < size_; ++r)
    per_stage.emplace_back(all.begin() + r * mine.size(), all.begin() + (r + 1) * mine.size());
  return per_stage;
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
    PT_CHECK(c.requested != "auto", "recompute \"auto\" with several stages per rank");
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
  if (setting != "auto") {
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
      Executor probe(stages_.front(), *transport_, deck_, be_, chosen);
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

// 1 - (this rank's F + B time without waits) / (the longest rank's span of
// the schedule), averaged over ranks: the share of the step a stage idles.
double Trainer::measured_bubble(const StepOutcome& outcome, std::vector<double>& compute_s) {
  double mine[2] = {outcome.compute_us, outcome.span_us};
  std::vector<double> all(2 * size_);
  timed_allgather(mine, 2, MPI_DOUBLE, all.data(), comm_, "the measured-bubble all-gather");
  compute_s.clear();
  std::vector<double> busy_us, span_us;
  for (int r = 0; r < size_; ++r) {
    compute_s.push_back(all[2 * r] * 1e-6);
    busy_us.push_back(all[2 * r]);
    span_us.push_back(all[2 * r + 1]);
  }
  return bubble_of(busy_us, span_us);
}

std::vector<std::vector<TraceEvent>> Trainer::gather_trace() { return tracer_->gather(comm_, clocks_); }

double Trainer::mean_loss(const StepOutcome& outcome) {
  double mean = 0.0;
  for (const StageModel& st : stages_) {
    if (!st.is_last()) continue;
    double sum = outcome.loss_sum;
    if (replicas_ > 1) {
      const std::vector<double>& mine = outcome.micro_batch_losses;
      std::vector<double> all(mine.size() * static_cast<size_t>(replicas_));
      timed_allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                      replicas_comm_, "the loss all-gather across the last stage's replicas");
      sum = 0.0;  // global micro-batch order: as one pipeline would add them
      for (double l : all) sum += l;
    }
    mean = sum / static_cast<double>(deck_.training.batch_size * st.loss_terms_per_sample);
  }
  timed_bcast(&mean, 1, MPI_DOUBLE, stage_rank(schedule_, schedule_.num_stages - 1), comm_,
              "the loss broadcast from the last stage");
  return mean;
}

std::vector<int> Trainer::per_stage_counts(const std::vector<int>& mine, const char* what) {
  const int stages = schedule_.num_stages;
  std::vector<int> padded(stages, 0), all(static_cast<size_t>(stages) * size_);
  for (size_t i = 0; i < stages_.size(); ++i) padded[stages_[i].stage] = mine[i];
  timed_allgather(padded.data(), stages, MPI_INT, all.data(), comm_, what);
  std::vector<int> counts(stages);
  for (int st = 0; st < stages; ++st) counts[st] = all[stage_rank(schedule_, st) * stages + st];
  return counts;
}

std::vector<int> Trainer::rank_counts(const std::vector<int>& stage_counts) const {
  std::vector<int> counts(size_, 0);
  for (int st = 0; st < schedule_.num_stages; ++st) counts[stage_rank(schedule_, st)] += stage_counts[st];
  return counts;
}

// by_rank holds rank 0's stages' blocks (ascending), then rank 1's, ...;
// the result holds stage 0's block, then stage 1's, ...
template <typename T>
std::vector<T> Trainer::in_stage_order(const std::vector<T>& by_rank,
                                       const std::vector<int>& counts) const {
  std::vector<size_t> offset(counts.size());
  size_t at = 0;
  for (int r = 0; r < size_; ++r)
    for (int st : rank_stages(schedule_, r)) {
      offset[st] = at;
      at += static_cast<size_t>(counts[st]);
    }
  PT_CHECK(at == by_rank.size(), "per-stage blocks cover the gathered values");
  std::vector<T> ordered;
  ordered.reserve(by_rank.size());
  for (size_t st = 0; st < counts.size(); ++st)
    ordered.insert(ordered.end(), by_rank.begin() + offset[st], by_rank.begin() + offset[st] + counts[st]);
  return ordered;
}

double Trainer::evaluate() {
  DefaultDeviceGuard on_device(be_.device());
  PT_CHECK(eval_data_ != nullptr, "evaluation needs training.eval_every > 0");
  double sum = 0.0;
  fault_point("eval");
  for (int64_t b = 0; b < deck_.training.eval_batches; ++b)
    sum += mean_loss(executor_->run(eval_schedule_, *eval_data_, b, Pass::Evaluate));
  return sum / static_cast<double>(deck_.training.eval_batches);
}

// Per-parameter sums of squares are gathered in global parameter order and
// added in that order, so the norm is bitwise the same at any stage count.
double Trainer::global_grad_norm(int64_t step) {
  Backend& be = be_;
  std::vector<double> local;
  std::vector<int> per_stage;
  if (nonfinite_gradient_requested(step)) be.fill(params().back()->grad, INFINITY);
  for (StageModel& st : stages_) {
    per_stage.push_back(0);
    for (Param* p : st.params()) {
      settle_grad(be, *p);
      local.push_back(be.sum_squares(p->grad));
      ++per_stage.back();
      // A double sum of squared floats cannot overflow, so it is finite exactly
      // when every element is: this is the step's non-finite gradient check.
      if (!std::isfinite(local.back()))
        throw Error("non-finite gradient of " + p->name + " at step " + std::to_string(step) +
                    ", stage " + std::to_string(st.stage) + " (accumulated over micro-batches 0-" +
                    std::to_string(schedule_.num_micro_batches - 1) + ")");
    }
  }
  const std::vector<int> stage_counts =
      per_stage_counts(per_stage, "the gradient-norm counts all-gather");
  const int count = static_cast<int>(local.size());
  std::vector<int> counts = rank_counts(stage_counts), offsets(size_, 0);
  for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
  std::vector<double> all(static_cast<size_t>(offsets.back() + counts.back()));
  timed_allgatherv(local.data(), count, MPI_DOUBLE, all.data(), counts.data(), offsets.data(),
                   comm_, "the gradient-norm all-gather");
  // Added in global parameter order, whatever the placement of the stages.
  double sum = 0.0;
  for (double v : in_stage_order(all, stage_counts)) sum += v;
  return std::sqrt(sum);
}

std::vector<float> Trainer::gather_parameters() {
  std::vector<float> local;
  std::vector<int> per_stage;
  for (StageModel& st : stages_) {
    per_stage.push_back(0);
    for (Param* p : st.params()) {
      const Tensor host = p->value.to(Device::CPU);
      local.insert(local.end(), host.f32(), host.f32() + host.numel());
      per_stage.back() += static_cast<int>(host.numel());
    }
  }
  const std::vector<int> stage_counts = per_stage_counts(per_stage, "the parameter counts gather");
  const int count = static_cast<int>(local.size());
  std::vector<int> counts = rank_counts(stage_counts), offsets(size_, 0);
  std::vector<float> all;
  if (rank_ == 0) {
    for (int r = 1; r < size_; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    all.resize(static_cast<size_t>(offsets.back() + counts.back()));
  }
  timed_gatherv(local.data(), count, MPI_FLOAT, all.data(), counts.data(), offsets.data(), 0,
                comm_, "the parameter gather");
  return rank_ == 0 ? in_stage_order(all, stage_counts) : all;
}

}  // namespace pt
