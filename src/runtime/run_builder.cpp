// run_builder.cpp: the one factory of a rank's part of a run (build_run) and
// of its engine (build_engine); see runtime/run_builder.hpp.
#include "pipetrain/runtime/run_builder.hpp"

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/family.hpp"
#include "pipetrain/model/activation_copies.hpp"
#include "pipetrain/model/weight_copies.hpp"
#include "pipetrain/runtime/data_set_config.hpp"

namespace pt {

ScheduleSettings schedule_settings_for(const Deck& deck) {
  ScheduleSettings s;
  s.kind = deck.pipeline.schedule;
  s.file = deck.pipeline.schedule_file;
  s.micro_batches = deck.pipeline.micro_batches;
  s.virtual_stages = deck.pipeline.virtual_stages;
  s.weight_grad = deck.pipeline.weight_grad;
  return s;
}

Schedule make_schedule(const ScheduleSettings& settings, int ranks) {
  const int n = static_cast<int>(settings.micro_batches);
  const int v = static_cast<int>(settings.virtual_stages);
  if (settings.kind == ScheduleKind::File) return load_schedule_file(settings.file, ranks * v, n);
  Schedule schedule = generate_schedule(settings.kind, ranks, n, v);
  return settings.weight_grad == WeightGradKind::Step ? with_step_weight_grads(schedule) : schedule;
}

Schedule schedule_for_deck(const Deck& deck, int ranks) {
  return make_schedule(schedule_settings_for(deck), ranks);
}

MemoryStats stage_memory_stats(const ComputeSetup& setup) {
  return setup.device_memory_stats ? setup.device_memory_stats() : memory_stats();
}

RankPlace rank_place_of(const ProcessGrid& grid) {
  RankPlace p;
  p.pipeline = grid.pipeline();
  p.replicas = grid.replicas();
  p.replica = grid.replica();
  p.replica_count = grid.data_parallel();
  p.replica_group_text = grid.replica_group_text();
  MPI_CHECK(MPI_Comm_rank(p.pipeline, &p.rank));
  MPI_CHECK(MPI_Comm_size(p.pipeline, &p.ranks));
  return p;
}

RunSettings run_settings_for(const Deck& deck, const RankPlace& place) {
  PT_CHECK(data_parallel_size(deck) == place.replica_count,
           "data_parallel.replicas = " + std::to_string(data_parallel_size(deck)) +
               " but the process grid has " + std::to_string(place.replica_count) + " replicas");
  RunSettings s;
  s.model = deck.model;
  s.schedule = schedule_settings_for(deck);
  s.training = deck.training;
  s.data = data_set_config_for(deck);
  s.executor = executor_config_for(deck);
  s.executor.replica = place.replica;
  if (deck.slowdown.rank == place.rank)
    s.executor.slowdown = {deck.slowdown.from_step, deck.slowdown.factor};
  s.reduction = reduction_config_for(deck);
  s.recompute = recompute_settings_for(deck);
  s.semantics = comm_semantics_of(deck.pipeline.transport, deck.training.device);
  s.trace = deck.output.trace;
  s.measured_placement = places_at_measured_times(deck);
  s.replica_check_every = deck.data_parallel.check_every;
  s.checkpoint_every = deck.output.checkpoint_every;
  return s;
}

RunParts::RunParts(RunSettings settings_in, RankPlace place_in, ComputeSetup setup_in)
    : settings(std::move(settings_in)), place(std::move(place_in)), setup(std::move(setup_in)),
      backend(setup.backend ? *setup.backend : cpu_backend()) {}

void make_run_gemm_copies(RunParts& run) {
  if (run.settings.training.weight_copies) make_weight_copies(run.backend, run.params());
  for (StageModel& stage : run.stages)
    set_activation_copies(stage, run.settings.training.activation_copies);
}

std::vector<Param*> RunParts::params() {
  std::vector<Param*> all;
  for (StageModel& st : stages)
    for (Param* p : st.params()) all.push_back(p);
  return all;
}

namespace {

// The run's schedule on this pipeline's ranks, validated under the
// transport's semantics, and its forward-only twin.
void build_schedules(RunParts& run) {
  RunSchedules& s = run.schedules;
  const int ranks = run.place.ranks;
  s.train = make_schedule(run.settings.schedule, ranks);
  PT_CHECK(s.train.num_ranks == ranks, "schedule '" + s.train.name + "' has " +
                                           std::to_string(s.train.num_ranks) + " ranks, the job " +
                                           std::to_string(ranks));
  s.report = validate_schedule(s.train, run.settings.semantics);
  s.eval = forward_only_schedule(s.train);
  validate_schedule(s.eval, run.settings.semantics);
}

// Synthetic data caches itself on first use: for the stages of this rank
// that read inputs (the first) or targets (the last), before step 0.
void fill_data_caches(const RunParts& run) {
  const int64_t rows = run.settings.executor.rows;
  bool first = false, last = false;
  for (const StageModel& st : run.stages) {
    first = first || st.is_first();
    last = last || st.is_last();
  }
  fill_data_cache(*run.data, rows, first, last);
  if (run.eval_data) fill_data_cache(*run.eval_data, rows, first, last);
}

// This rank's stages of `partition` (built and initialised on the host,
// then moved to the device), and the data they read.
void build_stages(RunParts& run, const std::vector<int64_t>& partition) {
  const RunSettings& s = run.settings;
  run.partition = partition_units(model_units(s.model), run.schedules.train.num_stages, partition);
  for (int st : rank_stages(run.schedules.train, run.place.rank))
    run.stages.push_back(build_stage(s.model, run.partition, st));
  check_family_backend(s.model, run.backend);
  run.data = open_dataset(run.setup.open_dataset, s.data, Split::Train);
  if (s.training.eval_every > 0) run.eval_data = open_dataset(run.setup.open_dataset, s.data, Split::Eval);
  fill_data_caches(run);
  run.transport = run.setup.make_transport ? run.setup.make_transport(run.place.pipeline)
                                           : make_mpi_transport(run.place.pipeline);
  for (StageModel& st : run.stages) move_parameters(st, run.backend.device());
  make_run_gemm_copies(run);
}

// On the device: the optimizer over the stages' parameters, the fp16 loss scaler.
void build_optimizer(RunParts& run) {
  const TrainingConfig& t = run.settings.training;
  run.optimizer = std::make_unique<Optimizer>(t, run.params());
  if (t.precision == Precision::Fp16) {
    LossScalerConfig scaling;
    scaling.initial_scale = t.loss_scale;
    run.scaler = std::make_unique<LossScaler>(scaling);
  }
}

// Each of this rank's stages' policy: fixed, or ("auto", one stage per
// rank) measured; collective.
RecomputeDecision decide_recompute(RunParts& run) {
  if (run.schedules.train.num_stages == run.place.ranks)
    return choose_recompute(run.settings.recompute, probe_site_of(run), run.place.pipeline);
  return fixed_recompute(run.settings.recompute, run.schedules.train, run.place.rank);
}

}  // namespace

RecomputeProbeSite probe_site_of(RunParts& run) {
  StageModel& stage = run.stages.front();
  const ComputeSetup& setup = run.setup;
  return {stage,
          run.backend,
          *run.data,
          static_cast<double>(run.schedules.report.peak_in_flight[stage.stage]),
          [&setup] { return stage_memory_stats(setup); },
          setup.reset_device_memory_peaks};
}

std::unique_ptr<RunParts> build_run(RunSettings settings, RankPlace place,
                                    const std::vector<int64_t>& partition, ComputeSetup setup) {
  auto run = std::make_unique<RunParts>(std::move(settings), std::move(place), std::move(setup));
  build_schedules(*run);
  run->collectives = std::make_unique<StepCollectives>(run->place.pipeline, run->place.replicas,
                                                       run->place.replica_count, run->schedules.train);
  build_stages(*run, partition);
  build_optimizer(*run);
  run->tracer = std::make_unique<Tracer>(run->settings.trace);
  if (run->tracer->enabled()) run->clocks = run->tracer->align_clocks(run->place.pipeline);
  run->recompute = decide_recompute(*run);
  if (run->settings.measured_placement && schedule_takes_times(run->schedules.train.name))
    run->placement = std::make_unique<MeasuredPlacement>(run->schedules.train.num_stages);
  run->replica_group = run->setup.make_replica_group
                           ? run->setup.make_replica_group(run->place.replicas)
                           : make_mpi_replica_group(run->place.replicas);
  run->engine = build_engine(*run);
  return run;
}

// The constructor of a run and every rebalancing move build the engine here
// (both the reducer and the executor hold the stages' layers), so a rebuild
// forgets nothing: the executor's configuration is the run's settings plus
// loss scaling (fp16) and the hooks into this reducer.
Engine build_engine(RunParts& run) {
  Engine engine;
  std::vector<StageModel*> mine;
  for (StageModel& st : run.stages) mine.push_back(&st);
  engine.reducer = std::make_unique<GradientReducer>(mine, *run.replica_group, run.settings.reduction,
                                                     run.backend, run.tracer.get(),
                                                     run.place.replica_group_text);
  ExecutorConfig config = run.settings.executor;
  config.loss_scaling = run.scaler != nullptr;
  if (engine.reducer->active()) {
    GradientReducer* r = engine.reducer.get();
    config.reduction = {[r](int stage, int mb, size_t layer) { r->layer_done(stage, mb, layer); },
                        [r] { r->poll(); }};
  }
  engine.executor = std::make_unique<Executor>(config, mine, run.recompute.mine, *run.transport,
                                               run.backend, run.tracer.get());
  return engine;
}

}  // namespace pt
