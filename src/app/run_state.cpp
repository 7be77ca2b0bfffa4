// run_state.cpp: a training run's state beyond its steps (run_state.hpp):
// where it starts from, its checkpoints, its trace and its early stop on a
// signal. Failures after the start end the job through MPI_Abort (driver.cpp).
#include "pipetrain/app/run_state.hpp"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/app/command_line.hpp"
#include "pipetrain/app/grid_setup.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/stop_signal.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/io/trace_io.hpp"

namespace pt {

// Collective when output.trace is on: rank 0 writes every rank's events.
void write_trace(const World& w, const Deck& deck, Trainer& trainer) {
  if (!deck.output.trace) return;
  set_wait_phase("in the trace gather at the end of the run");
  fault_point("trace");
  const auto events = trainer.gather_trace();
  if (w.rank != 0) return;
  const std::string path = deck.output.dir + "/trace.h5";
  write_trace_file(path, deck_to_toml(deck), trainer.schedule(), events, trainer.clock_alignment(),
                   trainer.schedule_first_step());
  double worst = 0.0;
  for (double e : trainer.clock_alignment().error_us) worst = std::max(worst, e);
  std::printf("trace: %s (clock offsets estimated to within %.1f us)\n", path.c_str(), worst);
}

// The state training starts from: --resume (weights, optimizer state, step)
// or training.init_from (weights only). Returns the first step, or -1 after a
// bad checkpoint (every rank has the same error; rank 0 printed it).
int64_t restore(const World& w, const ProcessGrid& grid, const CommandLine& cli, const Deck& deck,
                const std::string& resolved, Trainer& trainer, CheckpointRead* loaded) {
  bool resume = !cli.resume.empty();
  std::string spec = resume ? cli.resume : deck.training.init_from;
  if (resume && spec == "auto") {  // latest if there is any checkpoint, else a fresh start
    const std::string root = checkpoint_root(deck);
    int any = w.rank == 0 && any_checkpoint_in(root) ? 1 : 0;
    timed_bcast(&any, 1, MPI_INT, 0, w.comm, "the --resume auto decision from rank 0");
    if (any) {
      spec = "latest";
    } else {  // as if --resume were not given: step 0, from training.init_from when set
      if (w.rank == 0)
        std::printf("--resume auto: no checkpoint in %s yet; starting at step 0%s\n", root.c_str(),
                    deck.training.init_from.empty() ? "" : " from training.init_from");
      resume = false;
      spec = deck.training.init_from;
    }
  }
  if (spec.empty()) return 0;
  set_wait_phase(std::string("while loading the checkpoint ") + spec);
  fault_point("resume");
  if (resume && !deck.training.init_from.empty() && w.rank == 0)
    std::printf("--resume: training.init_from = \"%s\" is not used\n", deck.training.init_from.c_str());
  try {
    // Every pipeline of the grid loads the same (layout-free) checkpoint;
    // the replicas then agree that all of them did.
    const CheckpointRead r = load_checkpoint(spec, resume ? LoadMode::Resume : LoadMode::WeightsOnly,
                                             deck, resolved, trainer, grid.pipeline());
    agree_across_replicas(grid, true);
    if (w.rank == 0)
      std::printf("%s %s (step %lld): %.1f MB read in %.2f s (%.0f MB/s)\n",
                  resume ? "resuming from" : "weights initialised from", r.path.c_str(),
                  static_cast<long long>(r.step), r.bytes / 1e6, r.seconds,
                  r.bytes / 1e6 / std::max(r.seconds, 1e-9));
    if (loaded && resume) *loaded = r;
    return resume ? r.step : 0;
  } catch (const InputError& e) {
    if (w.rank == 0) std::fprintf(stderr, "pipetrain: error: %s\n", e.what());
    agree_across_replicas(grid, false);
    return -1;
  }
}

// A resumed run continues metrics.h5: rows of the steps before the resume
// step stay, later ones (redone now) go; a gap in the history is a warning.
void continue_metrics(int64_t first_step, MetricsFile& metrics) {
  const MetricsResume r = metrics.continue_at(first_step);
  if (r.complete()) std::printf("%s\n", r.message().c_str());
  else warn(r.message());
  std::fflush(stdout);
}

bool checkpoint_due(const Deck& deck, int64_t step) {
  const int64_t every = deck.output.checkpoint_every;
  return every > 0 && ((step + 1) % every == 0 || step + 1 == deck.training.steps);
}

namespace {

// "at the checkpoint of step 4": where the checkpoint kill hooks fire.
std::string at_checkpoint(int64_t steps_done) {
  return "at the checkpoint of step " + std::to_string(steps_done);
}

void print_checkpoint(int64_t steps_done, const CheckpointWrite& c, const std::string& extra) {
  std::printf("checkpoint step %lld: %s, %.1f MB in %.2f s (%.0f MB/s), digest %08x%s\n",
              static_cast<long long>(steps_done), c.path.c_str(), c.bytes / 1e6, c.seconds,
              c.bytes / 1e6 / std::max(c.seconds, 1e-9), c.digest, extra.c_str());
  std::fflush(stdout);
}

// An asynchronous checkpoint was published: the same line as a synchronous
// one, with how long training was blocked, and the after-publish kill hook.
void report_published(const World& w, const std::optional<AsyncCheckpointDone>& done) {
  if (!done) return;
  kill_if_due(FaultHook::KillAfterPublish, w.rank, done->step, at_checkpoint(done->step));
  if (w.rank != 0) return;
  char extra[200];
  std::snprintf(extra, sizeof extra,
                "; asynchronous: training blocked %.3f s (host copy %.3f s, waiting for the write %.3f s, "
                "publishing %.3f s)",
                done->stage_s + done->wait_s + done->publish_s, done->stage_s, done->wait_s, done->publish_s);
  print_checkpoint(done->step, done->write, extra);
}

}  // namespace

std::unique_ptr<AsyncCheckpointer> make_async_checkpointer(const ProcessGrid& grid, const Deck& deck,
                                                           const std::string& resolved) {
  if (!deck.output.checkpoint_async || grid.replica() != 0)
    return nullptr;
  return std::make_unique<AsyncCheckpointer>(deck, resolved, grid.pipeline());
}

// Collective: training waits for the whole write (see docs/checkpoint-format.md),
// or, with `async`, for the host copy (docs/reliability.md).
// metrics.h5 is flushed first, so it holds every step of each published
// checkpoint and a resume from it finds the whole history.
// Data parallelism: the replicas hold the same state, so replica 0's
// pipeline alone writes (one file per rank of it, layout-free); the others
// wait for it (for an asynchronous save: at the end of the run).
void checkpoint(const World& w, const ProcessGrid& grid, const Deck& deck,
                const std::string& resolved, Trainer& trainer, int64_t steps_done,
                MetricsFile& metrics, AsyncCheckpointer* async, bool final) {
  if (w.rank == 0) metrics.flush();
  kill_if_due(FaultHook::KillBeforePublish, w.rank, steps_done, at_checkpoint(steps_done));
  if (deck.output.checkpoint_async) {
    if (async) report_published(w, async->start(trainer, steps_done));
    if (final) finish_checkpoints(w, grid, async, trainer, steps_done - 1);
    return;
  }
  CheckpointWrite c;
  if (grid.replica() == 0) c = save_checkpoint(deck, resolved, trainer, steps_done, grid.pipeline());
  if (grid.data_parallel() > 1)
    timed_barrier(grid.world(), "the end of replica 0's checkpoint write");
  kill_if_due(FaultHook::KillAfterPublish, w.rank, steps_done, at_checkpoint(steps_done));
  if (w.rank == 0) print_checkpoint(steps_done, c, "");
}

void poll_checkpoint(const World& w, AsyncCheckpointer* async) {
  if (async) report_published(w, async->poll());
}

void finish_checkpoints(const World& w, const ProcessGrid& grid, AsyncCheckpointer* async,
                        Trainer& trainer, int64_t step) {
  if (async) report_published(w, async->complete(trainer, step));
  if (grid.data_parallel() > 1)
    timed_barrier(grid.world(), "the end of replica 0's asynchronous checkpoint write");
}

// Fault hook PIPETRAIN_TEST_SIGNAL=<rank>:<step>[:<signal number>]: that rank
// raises the signal (default SIGUSR1) just before the step, as a batch
// system's warning would arrive mid-run, and takes the real handler's path.
void test_signal_point(int rank, int64_t step) {
  if (!fault_due(FaultHook::Signal, rank, step)) return;
  std::raise(fault_request(FaultHook::Signal)->signo);
}

// Every rank agreed to stop after `step` (a signal, stop_signal.hpp): the
// step's checkpoint is written unless it just was, metrics.h5 records why
// the run stopped, the trace is written, and the caller exits with
// kStopExitStatus so that a job script can requeue the job.
void stop_after_step(const World& w, const ProcessGrid& grid, const Deck& deck,
                     const std::string& resolved, Trainer& trainer, int64_t step, int signo,
                     MetricsFile& metrics, AsyncCheckpointer* async) {
  const std::string why = signal_name(signo) + " received; every rank stopped after step " +
                          std::to_string(step + 1) + " of " + std::to_string(deck.training.steps);
  if (w.rank == 0) metrics.set_attribute("stop_reason", why);
  if (!checkpoint_due(deck, step)) {
    set_wait_phase("in the checkpoint save on " + signal_name(signo) + " after step " + std::to_string(step));
    checkpoint(w, grid, deck, resolved, trainer, step + 1, metrics, async);
  }
  if (deck.output.checkpoint_async) finish_checkpoints(w, grid, async, trainer, step);  // before the exit
  write_trace(w, deck, trainer);
  if (w.rank != 0) return;
  metrics.flush();
  std::printf("stopped: %s; checkpoint of step %lld in %s; exit status %d: resume with --resume "
              "(a Slurm job script requeues itself)\n",
              why.c_str(), static_cast<long long>(step + 1), checkpoint_root(deck).c_str(),
              kStopExitStatus);
  std::fflush(stdout);
}

}  // namespace pt
