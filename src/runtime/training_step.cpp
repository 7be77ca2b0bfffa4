// training_step.cpp: one training step and one evaluation of a built run
// (runtime/training_step.hpp).
#include "pipetrain/runtime/training_step.hpp"

#include <chrono>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/replica_check.hpp"

namespace pt {

namespace {

// After the schedule ran: the loss, the fp16 overflow check (unscale, or
// skip the whole step on every stage), the global gradient norm and the
// measured bubble, across ranks.
void combine_across_ranks(RunParts& run, const StepOutcome& outcome, int64_t step, StepRecord& rec) {
  Tracer& tracer = *run.tracer;
  const double reduce_start = tracer.now_us();
  fault_point("loss", step);
  rec.loss = run.collectives->mean_loss(outcome, run.stages, run.settings.training.batch_size);
  rec.skipped = run.scaler && !run.scaler->finish_backward(run.backend, run.params(), run.place.pipeline);
  fault_point("grad_norm", step);
  rec.grad_norm =
      rec.skipped ? std::nan("") : run.collectives->global_grad_norm(run.stages, run.backend, step);
  fault_point("bubble", step);
  rec.bubble = run.collectives->measured_bubble(outcome, rec.rank_compute_s);
  rec.partition = run.partition;
  tracer.record(EventKind::Reduction, step, run.stages.front().stage, -1, reduce_start, tracer.now_us());
}

// Data parallelism with statistics committed once per step (deferred batch
// normalisation, Layer::pack_step_statistics): every replica's, gathered in
// replica order, replace each replica's own, so that every replica commits
// those of the global batch, in global micro-batch order, as one pipeline
// running all D x N micro-batches would. The replicas hold the same model,
// so all of them have statistics or none does.
void share_step_statistics(RunParts& run) {
  if (run.place.replica_count <= 1) return;
  std::vector<double> mine;  // this replica's, layer by layer
  for (StageModel& stage : run.stages)
    for (auto& layer : stage.layers) layer->pack_step_statistics(mine);
  if (mine.empty()) return;
  std::vector<double> all(mine.size() * static_cast<size_t>(run.place.replica_count));
  timed_allgather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(),
                  run.place.replicas, "the replicas' batch-normalisation statistics of the step");
  const GatheredStatistics gathered{all.data(), run.place.replica_count, mine.size(),
                                    run.settings.schedule.micro_batches};
  size_t offset = 0;
  for (StageModel& stage : run.stages)
    for (auto& layer : stage.layers) layer->unpack_step_statistics(gathered, offset);
  PT_CHECK(offset == mine.size(), "step statistics: " + std::to_string(offset) + " of " +
                                      std::to_string(mine.size()) + " values read back");
}

// The learning rate of the step, and the optimizer step with the clipping
// the norm implies (none when fp16 skipped the step).
void apply_update(RunParts& run, int64_t step, StepRecord& rec) {
  const TrainingConfig& t = run.settings.training;
  Tracer& tracer = *run.tracer;
  rec.lr = learning_rate(t, step);
  const float clip_scale = StepCollectives::clip_scale(rec.grad_norm, t.grad_clip);
  const double optimizer_start = tracer.now_us();
  if (!rec.skipped) run.optimizer->step(run.backend, static_cast<float>(rec.lr), clip_scale);
  // The step's end for layers that commit statistics once per step (deferred
  // batch normalisation), whether or not fp16 skipped the update.
  share_step_statistics(run);
  for (StageModel& stage : run.stages)
    for (auto& layer : stage.layers) layer->end_step(run.backend);
  run.backend.synchronize();
  tracer.record(EventKind::Optimizer, step, run.stages.front().stage, -1, optimizer_start, tracer.now_us());
  run.backend.trim_cached_memory();  // a step boundary: cached blocks this step did not reuse go back
}

// Data parallelism: the replicas' parameters, compared by digest when the
// check is due (replica_check.hpp), after the fault injection's corruption.
void check_replicas(RunParts& run, int64_t step) {
  if (replica_corruption_due(step)) corrupt_one_parameter(run.stages, run.backend);
  const RunSettings& s = run.settings;
  if (!replica_check_due(step, s.replica_check_every, s.checkpoint_every, s.training.steps,
                         run.place.replica_count))
    return;
  fault_point("replica_check", step);
  check_replicas_agree(run.stages, run.backend, run.place.replicas, step);
}

// Collective: the schedule placed again at the times every rank agreed on;
// from step + 1 on the run uses it.
void place_schedule(RunParts& run, int64_t step, StepRecord& rec) {
  RunSchedules& s = run.schedules;
  s.placed_at = run.placement->agreed_times(run.place.pipeline, run.place.replicas);
  run.placement.reset();
  PlacedSchedules placed = place_at_times(s.train, s.placed_at, run.settings.semantics);
  rec.schedule_placed = true;
  rec.placed_bubble_before = placed.unit_bubble;  // s.train is the unit-time placement
  rec.placed_bubble_after = placed.bubble;
  rec.placed_bubble_timed = placed.timed_bubble;
  s.train = std::move(placed.train);
  s.eval = std::move(placed.eval);
  s.report = std::move(placed.report);
  s.first_step = step + 1;
}

}  // namespace

StepRecord run_training_step(RunParts& run, int64_t step) {
  reset_memory_peaks();
  if (run.setup.reset_device_memory_peaks) run.setup.reset_device_memory_peaks();
  const auto start = std::chrono::steady_clock::now();
  run.optimizer->zero_grad(run.backend);
  StepRecord rec;
  rec.step = step;
  rec.loss_scale = run.scaler ? run.scaler->scale() : 1.0;
  Engine& engine = run.engine;
  engine.reducer->begin_step(step);
  StepOutcome outcome = engine.executor->run(run.schedules.train, *run.data, step, Pass::Train,
                                             run.scaler ? run.scaler->scale() : 1.f);
  // Data parallelism: the buckets still running complete; every replica
  // then holds the same gradients (the global batch's).
  engine.reducer->finish();
  combine_across_ranks(run, outcome, step, rec);
  apply_update(run, step, rec);
  rec.step_time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fault_point("memory", step);
  rec.rank_peak_bytes = run.collectives->gather_memory_peaks(stage_memory_stats(run.setup));
  // Placed only with a step left to run it (the same decision on every rank).
  if (run.placement && run.placement->observe(engine.executor->action_times()) &&
      step + 1 < run.settings.training.steps)
    place_schedule(run, step, rec);
  // Last: the step's collectives are all done, so replicas that disagree
  // end the run with no other stage left inside one of them; the
  // checkpoint, if one follows, is written after the step returns.
  check_replicas(run, step);
  return rec;
}

double run_evaluation(RunParts& run) {
  PT_CHECK(run.eval_data != nullptr, "evaluation needs training.eval_every > 0");
  const TrainingConfig& t = run.settings.training;
  double sum = 0.0;
  fault_point("eval");
  for (int64_t b = 0; b < t.eval_batches; ++b)
    sum += run.collectives->mean_loss(
        run.engine.executor->run(run.schedules.eval, *run.eval_data, b, Pass::Evaluate), run.stages,
        t.batch_size);
  return sum / static_cast<double>(t.eval_batches);
}

}  // namespace pt
