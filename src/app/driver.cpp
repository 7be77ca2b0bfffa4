// driver.cpp: the `train` and `validate` commands and the dispatch of the
// others (`profile` runs in src/app/profile_command.cpp, `sample` in
// src/app/sample_command.cpp, `plan` in src/app/plan_command.cpp).
//
// Every command starts from the deck rank 0 read, checked and broadcast
// (app/deck_load.hpp), so every rank agrees on the outcome before any
// training starts; what a run prints is in app/run_report.hpp. A bad checkpoint (--resume,
// training.init_from) is likewise agreed on before the first step. Failures
// after that point end the job through MPI_Abort, so no rank is ever left
// waiting. Checkpoints are written every output.checkpoint_every steps, and
// once more when a signal (SIGUSR1, SIGTERM) asks the run to stop early.
// With data_parallel.replicas = D the ranks form a P x D grid (runtime/grid.hpp):
// each replica's pipeline trains its share of the batch, replica 0 writes the
// checkpoints, every replica loads them (docs/data-parallel.md).
#include "pipetrain/app/driver.hpp"
#include "pipetrain/app/auto_plan.hpp"
#include "pipetrain/app/memory_check.hpp"
#include "pipetrain/app/blas_report.hpp"
#include "pipetrain/app/deck_load.hpp"
#include "pipetrain/app/run_plan.hpp"
#include "pipetrain/app/run_report.hpp"
#include "pipetrain/app/run_state.hpp"
#include "pipetrain/app/rebalance_log.hpp"
#include "pipetrain/app/replan.hpp"
#include "pipetrain/app/sample_command.hpp"
#include "pipetrain/runtime/speed_probe.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <utility>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/app/command_line.hpp"
#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/app/grid_setup.hpp"
#include "pipetrain/app/profile_command.hpp"
#include "pipetrain/model/data.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/stop_signal.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/io/trace_io.hpp"
#include "pipetrain/plan/simulate.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/executor_config.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

namespace {


// The partition `validate` reports memory for: the deck's counts, else
// uniform (a partition chosen from a profile is known only when a run has one).
std::vector<int64_t> validate_partition(const Deck& deck, int stages) {
  const bool given = deck.pipeline.partition_strategy == PartitionStrategy::Explicit;
  return partition_units(model_units(deck.model), stages, given ? deck.pipeline.partition : std::vector<int64_t>{});
}

int run_validate(const World& w, const CommandLine& cli, const Deck& deck) {
  if (w.rank != 0) return 0;
  const DeckLayout layout = resolve_deck_layout(deck, cli.ranks > 0 ? cli.ranks : w.size);
  const int stages = layout.pipeline_ranks;
  Schedule s = schedule_for_deck(deck, stages);
  check_budget_holds_parameters(deck, s.num_stages);
  ScheduleReport report = validate_schedule(s, comm_semantics_of(deck.pipeline.transport, deck.training.device));
  std::printf("%s\n", deck_to_toml(deck).c_str());
  if (cli.print_schedule) std::printf("%s\n%s\n", format_schedule(s).c_str(), format_grid(s).c_str());
  std::printf("%s\n", schedule_summary(s, report).c_str());
  std::printf("%s\n", persistent_state_summary(deck, validate_partition(deck, s.num_stages)).c_str());
  if (places_at_measured_times(deck))
    std::printf("schedule %s: this is its unit-time placement; with pipeline.schedule_times = "
                "\"%s\" a run places it again at the F, B and W times it measures in its "
                "first steps (docs/schedules.md)\n", s.name.c_str(),
                kind_name(deck.pipeline.schedule_times));
  if (layout.data_parallel > 1)
    std::printf("deck %s is valid for %d ranks: %d pipeline ranks x %d data-parallel replicas\n",
                cli.deck_path.c_str(), stages * layout.data_parallel, stages, layout.data_parallel);
  else
    std::printf("deck %s is valid for %d ranks\n", cli.deck_path.c_str(), stages);
  return 0;
}

// Rank 0's bookkeeping of the steps of this run.
struct Progress {
  int64_t first_step = 0;
  double elapsed = 0.0, last_write = 0.0;
  double predicted_step_s = 0.0;   // the planner's, 0 = none
  // After a re-planning switch: the new plan's prediction at the measured
  // speeds, which the step lines show (the end-of-run error stays the first plan's).
  double switched_prediction_s = 0.0;
  // More ranks than cores on a node: the prediction assumes a core per rank,
  // so the step lines leave it out and the end-of-run line says why.
  bool oversubscribed = false;
  std::vector<double> step_times;  // measured, for the plan's error at the end
  // The steps the prediction is for: step_times[counted_from, counted_end).
  // From the second step (the first warms caches and allocators), or from
  // the first step after a placement at measured times (predicted again);
  // up to a rebalancing move (the prediction is for the partition before it).
  size_t counted_from = 1;
  size_t counted_end = SIZE_MAX;
  std::string window;  // why the window is not all the steps after the first, or ""
};

// The schedule was placed again after the last step in step_times, and
// predicted again: the error counts the steps from the next one on (unless
// units moved before: the prediction is then for a partition no longer run,
// and the window stays the one before the move).
void count_from_placement(Progress& p) {
  if (p.counted_end != SIZE_MAX) return;
  p.counted_from = p.step_times.size();
  p.window = " (from the placement at measured times on)";
}

// Units moved, or the run switched plans, after step `step` (already in
// step_times): the prediction is for the plan before, so the error counts
// the steps up to it. `what`: "the rebalancing move", "the re-planning switch".
void count_until_move(Progress& p, int64_t step, const std::string& what = "the rebalancing move") {
  if (p.counted_end != SIZE_MAX) return;  // an earlier move ended the window
  p.counted_end = p.step_times.size();
  p.window = " (up to " + what + " after step " + std::to_string(step + 1) +
             ": the prediction is for the " +
             (what == "the rebalancing move" ? "partition" : "plan") + " before it)";
}

// The re-planning check after `step` (when one is due), its values in the
// step's record (rank 0's).
ReplanCheck replan_after_step(Replanner* replanner, const Deck& deck, const Trainer& trainer,
                              int64_t step, bool first_of_plan, StepRecord& rec) {
  rec.micro_batches = trainer.schedule().num_micro_batches;
  if (!replanner) return {};
  replanner->observe(rec, first_of_plan);
  if (!replanner->due(step, deck.training.steps)) return {};
  set_wait_phase("in the re-planning check after step " + std::to_string(step));
  ReplanCheck c = replanner->check(step, deck, trainer.partition());
  if (c.checked && !c.decision.reason.empty()) {  // world rank 0 decided
    rec.replan_deviation = c.decision.deviation;
    if (c.decision.ranked) rec.replan_gain = c.decision.gain;
  }
  rec.replan_switched = c.decision.change;
  return c;
}

// The planner's predicted step against the median measured one over the
// steps it is for (Progress::counted_from, counted_end).
void print_plan_error(const Progress& p) {
  const size_t end = std::min(p.counted_end, p.step_times.size());
  if (p.predicted_step_s <= 0.0 || end <= p.counted_from) return;
  std::vector<double> t(p.step_times.begin() + static_cast<std::ptrdiff_t>(p.counted_from),
                        p.step_times.begin() + static_cast<std::ptrdiff_t>(end));
  const double shift = step_time_shift(t);  // in step order, before the sort
  std::sort(t.begin(), t.end());
  const double median = t[t.size() / 2];
  std::printf("plan: predicted step %.2f ms, measured median %.2f ms over %zu steps%s: error %+.1f%%",
              p.predicted_step_s * 1e3, median * 1e3, t.size(), p.window.c_str(),
              100.0 * (p.predicted_step_s - median) / median);
  std::printf("; the steps' second half ran %.1f%% apart from the first", 100.0 * shift);
  if (shift > kSteadyHostSpread)
    std::printf(" (over %.0f%%: the host's speed changed during the steps, so part of the "
                "error is the host's)", 100.0 * kSteadyHostSpread);
  if (p.oversubscribed)
    std::printf("; ranks shared cores, which the prediction does not model");
  std::printf("\n");
}

void log_step(const Deck& deck, const StepRecord& rec, bool last, Progress& p, MetricsFile& metrics) {
  p.elapsed += rec.step_time_s;
  p.step_times.push_back(rec.step_time_s);
  const double rate = static_cast<double>(deck.training.batch_size) / rec.step_time_s;
  metrics.add_step(rec, rate);
  const bool evaluated = !std::isnan(rec.eval_loss);
  if ((rec.step + 1) % deck.output.log_every == 0 || last || evaluated)
    print_step(deck, rec, rate, p.elapsed, p.first_step,
               p.oversubscribed ? 0.0 : p.switched_prediction_s > 0.0 ? p.switched_prediction_s : p.predicted_step_s);
  if (last || p.elapsed - p.last_write > 5.0) {
    metrics.flush();
    p.last_write = p.elapsed;
  }
}

// pipeline.auto's choice, for metrics.h5, and its profiles for the run's plan.
struct AutoRecord {
  std::string choice;            // plan_choice_text, or how a resume kept it
  double predicted_step_s = 0.0;  // 0 on a resume (nothing measured)
  int64_t plans_weighed = 0;
  std::map<int64_t, ModelProfile> profiles;  // auto's brief profiles, by micro-batch rows

  // auto's profile at the run's micro-batch size when it was measured on the
  // run's pipeline ranks (the grid was not split again), else nullptr.
  const ModelProfile* profile_for(const Deck& deck) const {
    if (grid_split) return nullptr;
    const auto it = profiles.find(batch_split_of(deck).rows());
    return it == profiles.end() ? nullptr : &it->second;
  }
  bool grid_split = false;
};

// The deck the run trains: as written, or with pipeline.auto's choice in it
// (app/auto_plan.hpp; a resume keeps the choice the run's deck.resolved.toml holds).
Deck deck_to_run(const World& w, const CommandLine& cli, const Deck& written, const ProcessGrid& grid,
                 const ComputeResources& compute, AutoRecord& record) {
  if (!written.pipeline.auto_plan) return written;
  const std::string earlier = cli.resume.empty() ? "" : written.output.dir + "/deck.resolved.toml";
  AutoChoice choice;
  Deck deck = choose_auto_plan(written, w.comm, grid.pipeline(), compute, earlier, &choice);
  if (choice.chosen >= 0) {
    const PlanRow& row = choice.table.rows[static_cast<size_t>(choice.chosen)];
    record.choice = plan_choice_text(row);
    record.predicted_step_s = row.step_time_s;
    record.plans_weighed = static_cast<int64_t>(choice.table.rows.size());
  } else {  // (the other ranks: their record is not written)
    record.choice = "kept on resume from " + earlier;
  }
  record.profiles = std::move(choice.profiles);  // every rank: each takes the same path
  return deck;
}

// The grid the run trains on: the written deck's, unless pipeline.auto chose
// another number of data-parallel replicas (then split again; collective).
ProcessGrid grid_to_run(const World& w, ProcessGrid written_grid, const Deck& deck) {
  const int replicas = static_cast<int>(data_parallel_size(deck));
  if (written_grid.data_parallel() == replicas) return written_grid;
  return ProcessGrid(w.comm, replicas);
}

int run_train(const World& w, const CommandLine& cli, const Deck& written) {
  // A stop signal is recorded from the start of main (block_stop_signals):
  // one that arrives during the start-up (profile, restore) stops the run
  // after its first step.
  BlasThreadsChoice blas = choose_blas_threads(written.training.blas_threads, w.comm);
  set_cpu_gemm(written.training.cpu_gemm);
  set_blas_threads(blas.threads);
  choose_wait_mode();
  const BlasReport blas_report = gather_blas_report(w.comm, w.blas_note);
  ComputeResources compute = make_compute_resources(written, w.comm);
  const MemoryOnHand memory = memory_on_hand(compute);
  check_model_fits_job(written, data_parallel_size(written), w.comm, memory);  // before the profile builds a unit
  ProcessGrid written_grid(w.comm, static_cast<int>(data_parallel_size(written)));
  AutoRecord auto_record;
  Deck deck = deck_to_run(w, cli, written, written_grid, compute, auto_record);  // a re-planning switch changes it
  auto_record.grid_split = written_grid.data_parallel() != data_parallel_size(deck);
  const ProcessGrid grid = grid_to_run(w, std::move(written_grid), deck);
  RunPlan plan = prepare_run_plan(deck, grid.pipeline(), grid.world(), compute, auto_record.profile_for(deck));
  // A named strategy's counts, the same in every replica (the deck keeps the name).
  const std::vector<int64_t> partition = share_partition(grid, starting_partition(deck, plan));
  check_stages_fit(deck, partition, grid, memory);
  auto trainer = std::make_unique<Trainer>(deck, partition, grid, compute.setup);
  predict_run(plan, deck, *trainer);
  if (deck.rebalance.enabled) trainer->enable_rebalance(plan.profile);
  std::unique_ptr<Replanner> replanner;  // pipeline.auto_replan_every (collective)
  if (written.pipeline.auto_plan && written.pipeline.auto_replan_every > 0)
    replanner = std::make_unique<Replanner>(
        written, grid, compute,
        auto_record.grid_split ? std::map<int64_t, ModelProfile>{} : auto_record.profiles);
  std::string resolved = deck_to_toml(deck);  // what checkpoints store: the plan in force
  MetricsFile metrics(deck.output.dir + "/metrics.h5", resolved);
  if (w.rank == 0) {
    print_start(w, deck, *trainer, blas);
    std::printf("%s", blas_report.lines.c_str());
    if (blas_report.any_fallback)
      std::printf("BLAS: warning: some ranks run fallback kernels (see above); figures from this "
                  "run are not comparable with runs on the CPU's best kernels\n");
    metrics.set_attribute("blas", blas_report.rank0.library);
    metrics.set_attribute("blas_core", blas_report.rank0.core);
    metrics.set_attribute("blas_best_core", blas_report.rank0.best_core);
    metrics.set_attribute("cpu", blas_report.rank0.cpu);
    metrics.set_attribute("gemm", blas_report.rank0.gemm);
    metrics.set_attribute("schedule", format_schedule(trainer->schedule()));
    const auto& peaks = trainer->schedule_report().peak_in_flight;
    metrics.set_attribute("peak_in_flight", std::vector<int64_t>(peaks.begin(), peaks.end()));
    metrics.set_attribute("blas_threads", std::vector<int64_t>{blas.threads});
    std::string policies;
    for (const auto& c : trainer->recompute_choices()) policies += (policies.empty() ? "" : ",") + c.policy;
    metrics.set_attribute("recompute", policies);
    if (written.pipeline.auto_plan) {
      metrics.set_attribute("auto_choice", auto_record.choice);
      metrics.set_attribute("auto_predicted_step_s", auto_record.predicted_step_s);
      metrics.set_attribute("auto_plans_weighed", std::vector<int64_t>{auto_record.plans_weighed});
    }
    print_run_plan(plan, deck);
    record_run_plan(plan, deck, trainer->partition(), metrics);
    if (auto floor = trainer->loss_floor()) {
      metrics.set_attribute("loss_floor", floor->window);
      metrics.set_attribute("entropy_rate", floor->entropy_rate);
    }
  }
  Progress progress;
  if (plan.measured) progress.predicted_step_s = plan.prediction.step_time_s;
  progress.oversubscribed = deck.training.device == DeviceKind::Cpu && blas.ranks_on_node > blas.node_cores;
  if (w.rank == 0 && plan.measured && progress.oversubscribed)
    std::printf("plan: %d ranks share %d core%s on this node; the planner's step prediction "
                "(%.1f ms) assumes a core per rank, so the step lines do not compare with it\n",
                blas.ranks_on_node, blas.node_cores, blas.node_cores == 1 ? "" : "s",
                plan.prediction.step_time_s * 1e3);
  const std::string profiled_deck = resolved;  // the deck the start-up profile measured
  CheckpointRead loaded;
  progress.first_step = restore(w, grid, cli, deck, resolved, *trainer, &loaded);
  if (progress.first_step < 0) return 2;
  if (replanner && progress.first_step > 0) {  // a switch before the checkpoint: its plan
    trainer = resume_in_checkpoint_plan(w, grid, compute.setup, *replanner, std::move(trainer), loaded,
                                        progress.first_step, deck);
    resolved = deck_to_toml(deck);
  }
  TrainingSamples samples;  // output.sample_every: the tokenizer and prompt
  if (!prepare_training_samples(w, deck, samples)) return 2;
  if (progress.first_step >= deck.training.steps) {
    if (w.rank == 0) std::printf("nothing to train: the checkpoint is at step %lld of training.steps = %lld\n",
                                 static_cast<long long>(progress.first_step),
                                 static_cast<long long>(deck.training.steps));
    return 0;
  }
  // Only now, with the checkpoint loaded and steps to run: a refused resume,
  // or one with nothing left to train, leaves the run's files as they were.
  if (w.rank == 0) {
    write_file_atomic(deck.output.dir + "/deck.resolved.toml", resolved);
    save_run_profile(plan, deck, profiled_deck);
  }
  if (progress.first_step > 0 && w.rank == 0) continue_metrics(progress.first_step, metrics);
  std::unique_ptr<AsyncCheckpointer> async = make_async_checkpointer(grid, deck, resolved);
  StepRecord rec;
  const int64_t eval_every = deck.training.eval_every;
  int64_t plan_first_step = progress.first_step;  // the first step of the plan in force
  for (int64_t step = progress.first_step; step < deck.training.steps; ++step) {
    test_signal_point(w.rank, step);
    set_wait_phase("in step " + std::to_string(step));
    rec = trainer->train_step(step);
    const bool last = step + 1 == deck.training.steps;
    if (eval_every > 0 && ((step + 1) % eval_every == 0 || last)) {
      set_wait_phase("in the evaluation after step " + std::to_string(step));
      rec.eval_loss = trainer->evaluate();
    }
    const bool moved = rebalance_after_step(w.rank, deck, *trainer, step, rec);
    const ReplanCheck replan = replan_after_step(replanner.get(), deck, *trainer, step,
                                                 step == plan_first_step, rec);
    if (rec.schedule_placed) report_schedule_placement(w.rank, plan, deck, *trainer, rec, metrics);
    if (w.rank == 0) log_step(deck, rec, last, progress, metrics);  // beside the prediction it ran under
    print_training_sample(w, deck, *trainer, samples, step);
    if (rec.schedule_placed && plan.measured) {
      progress.predicted_step_s = plan.prediction.step_time_s;
      count_from_placement(progress);
    }
    if (moved) count_until_move(progress, step);
    set_wait_phase("in the checkpoint poll after step " + std::to_string(step));
    poll_checkpoint(w, async.get());
    if (replan.decision.change) {  // saves the checkpoint of this step, in the new plan
      if (async) finish_checkpoints(w, grid, async.get(), *trainer, step);
      trainer = switch_plan(w, grid, compute.setup, std::move(trainer), replan.next, step, metrics);
      deck = replan.next;
      resolved = deck_to_toml(deck);
      async = make_async_checkpointer(grid, deck, resolved);
      plan_first_step = step + 1;
      count_until_move(progress, step, "the re-planning switch");
      if (w.rank == 0) progress.switched_prediction_s = replan.decision.best.step_time_s;
    } else if (checkpoint_due(deck, step)) {
      set_wait_phase("in the checkpoint save after step " + std::to_string(step));
      checkpoint(w, grid, deck, resolved, *trainer, step + 1, metrics, async.get(), last);
    }
    if (last) break;
    set_wait_phase("after step " + std::to_string(step));
    const int signo = agree_on_stop(w.comm, "the stop-signal agreement");
    if (signo != 0) {
      stop_after_step(w, grid, deck, resolved, *trainer, step, signo, metrics, async.get());
      return kStopExitStatus;
    }
  }
  write_trace(w, deck, *trainer);
  probe_after_steps(plan, grid.pipeline(), compute);
  if (w.rank == 0) {
    metrics.set_attribute("stop_reason", "trained to the end: step " + std::to_string(deck.training.steps) +
                                             " of " + std::to_string(deck.training.steps));
    metrics.flush();
    print_plan_error(progress);
    report_speed_probes(plan, metrics);
    print_summary(deck, rec, progress.elapsed, progress.first_step, trainer->loss_floor());
  }
  return 0;
}

// A run with a fault-injection hook set says so first: no job runs with one unnoticed.
void announce_fault_hooks() {
  for (const std::string& line : active_fault_hooks())
    std::printf("fault injection active: %s\n", line.c_str());
  std::fflush(stdout);
}

// Exit statuses (docs/cluster.md): 2 for bad input, 1 for any other failure.
constexpr int kBadInputStatus = 2;
constexpr int kFailureStatus = 1;

[[noreturn]] void abort_job(const World& w, const char* what, int status) {
  // The job is ending: a SIGTERM (mpirun's, after another rank's MPI_Abort)
  // ends this rank now instead of being kept for a clean stop.
  unblock_stop_signals();
  if (w.size == 1) {
    // Nobody else to end: one line and the status, without MPI_Abort's banner.
    std::fprintf(stderr, status == kBadInputStatus ? "pipetrain: error: %s\n" : "pipetrain: rank 0: error: %s\n",
                 what);
    std::fflush(stderr);
    try {
      stop_wait_watch();
    } catch (const std::exception&) {  // the watch's own failure: the message above stands
    }
    MPI_Finalize();
    std::exit(status);
  }
  if (status == kBadInputStatus) {
    // Bad input found after start-up (a data file, a checkpoint, a budget
    // too small) is usually found by every rank alike: rank 0 says it in the
    // start-up errors' form, naming the deck's own file and line, and ends
    // the job; the others speak only if it has not done so within a second
    // (the input was theirs alone).
    if (w.rank == 0) {
      std::fprintf(stderr, "pipetrain: error: %s\n", what);
      std::fflush(stderr);
      MPI_Abort(w.comm, status);
      std::abort();
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::fprintf(stderr, "pipetrain: rank %d: error: %s\n", w.rank, what);
  std::fflush(stderr);
  MPI_Abort(w.comm, status);
  std::abort();
}

int run_command(const World& w, const CommandLine& cli) {
  try {
    Deck deck;
    // Only training stops cleanly on a signal; every other command ends on
    // one at once, also while it reads its deck.
    if (cli.command != "train") unblock_stop_signals();
    check_fault_hooks();
    if (w.rank == 0) announce_fault_hooks();
    fault_point("startup");
    if (!load_deck(w, cli, deck)) return 2;
    set_wait_limit(deck.pipeline.timeout_s);
    if (cli.command == "validate") return run_validate(w, cli, deck);
    if (cli.command == "profile") return run_profile(w.comm, cli, deck, w.blas_note);
    if (cli.command == "plan") return run_plan(w.comm, cli, deck, w.blas_note);
    if (cli.command == "sample") return run_sample(w, cli, deck);
    return run_train(w, cli, deck);
  } catch (const InputError& e) {
    abort_job(w, e.what(), kBadInputStatus);
  } catch (const std::exception& e) {
    abort_job(w, e.what(), kFailureStatus);
  }
}

}  // namespace

int run_main(int argc, char** argv, MPI_Comm comm, const std::string& blas_note) {
  World w;
  w.comm = comm;
  w.blas_note = blas_note;
  MPI_Comm_rank(comm, &w.rank);
  MPI_Comm_size(comm, &w.size);
  CommandLine cli;
  try {
    cli = parse_command_line(argc, argv);  // same arguments on every rank
  } catch (const InputError& e) {
    if (w.rank == 0) std::fprintf(stderr, "pipetrain: error: %s\n", e.what());
    return 2;
  }
  if (cli.command == "help") {
    if (w.rank == 0) std::printf("%s\n", cli.help_text.c_str());
    return 0;
  }
  try {
    set_wait_phase("at start-up");
    start_wait_watch(comm);
  } catch (const std::exception& e) {
    abort_job(w, e.what(), kFailureStatus);
  }
  const int status = run_command(w, cli);
  try {
    set_wait_phase("at the end of the run");
    stop_wait_watch();
  } catch (const std::exception& e) {
    abort_job(w, e.what(), kFailureStatus);
  }
  return status;
}

}  // namespace pt
