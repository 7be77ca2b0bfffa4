// trainer.cpp: the Trainer facade (runtime/trainer.hpp): its parts are built
// by build_run and a step is run by run_training_step; its rebalancing side
// is repartition.cpp.
#include "pipetrain/runtime/trainer.hpp"

#include "pipetrain/runtime/sampler.hpp"

namespace pt {

Trainer::Trainer(const Deck& deck, MPI_Comm comm, ComputeSetup setup)
    : Trainer(deck, ProcessGrid::single(comm), std::move(setup)) {}

Trainer::Trainer(const Deck& deck, const ProcessGrid& grid, ComputeSetup setup)
    : Trainer(deck, deck.pipeline.partition, grid, std::move(setup)) {}

namespace {

// The deck read once into this rank's settings, then the run built from them.
std::unique_ptr<RunParts> build_run_of(const Deck& deck, const std::vector<int64_t>& partition,
                                       const ProcessGrid& grid, ComputeSetup setup) {
  RankPlace place = rank_place_of(grid);
  RunSettings settings = run_settings_for(deck, place);
  return build_run(std::move(settings), std::move(place), partition, std::move(setup));
}

}  // namespace

Trainer::Trainer(const Deck& deck, const std::vector<int64_t>& partition, const ProcessGrid& grid,
                 ComputeSetup setup)
    : rebalance_config_(rebalance_config_for(deck)),
      run_(build_run_of(deck, partition, grid, std::move(setup))) {}

Trainer::~Trainer() = default;

StepRecord Trainer::train_step(int64_t step) {
  StepRecord rec = run_training_step(*run_, step);
  if (rebalancer_) rebalancer_->observe(rec.rank_compute_s);
  return rec;
}

double Trainer::evaluate() { return run_evaluation(*run_); }

std::vector<std::vector<TraceEvent>> Trainer::gather_trace() {
  return run_->tracer->gather(run_->place.pipeline, run_->clocks);
}

std::vector<float> Trainer::gather_parameters() {
  return run_->collectives->gather_parameters(run_->stages);
}

std::vector<int32_t> Trainer::sample(const std::vector<int32_t>& prompt, const SampleSettings& settings,
                                     int64_t vocab) {
  SamplePipeline p;
  for (StageModel& st : run_->stages) p.stages.push_back(&st);
  const Schedule& s = run_->schedules.train;
  for (int st = 0; st < s.num_stages; ++st) p.stage_rank.push_back(stage_rank(s, st));
  p.backend = &run_->backend;
  p.transport = run_->transport.get();
  p.comm = run_->place.pipeline;
  p.seq_len = run_->settings.model.gpt.seq_len;
  p.vocab = vocab;
  return generate(p, prompt, settings);
}

}  // namespace pt
