// checkpoint_async.cpp: AsyncCheckpointer (io/checkpoint_async.hpp), the
// asynchronous save: a host copy on the training thread, the stage file
// written on a background thread, publication on the training thread once
// every rank's file is durable.
//
// Threads: the background writer touches only its Save and the host copy,
// which the training thread neither changes nor frees until the writer is
// joined (the next copy into it waits for the save in flight),
// the file system and HDF5 under Hdf5Lock; it reports through `done` and a
// condition variable. MPI calls and allocations stay on the training thread.
#include "pipetrain/io/checkpoint_async.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "checkpoint_save.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/fault_injection.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

// The host copy, kept from one save to the next: a copy into buffers already
// mapped costs a memcpy, a fresh one also the page faults of a new mapping.
struct AsyncCheckpointer::HostCopy {
  std::vector<ckpt::StagedParam> params;
};

struct AsyncCheckpointer::Save {
  ckpt::SaveTarget target;
  int64_t step = 0;
  TrainingCounters counters;
  std::vector<int64_t> partition;
  const std::vector<ckpt::StagedParam>* staged = nullptr;  // the host copy (AsyncCheckpointer::copy_)
  double stage_s = 0.0;
  std::thread writer;
  // Set by the writer before `done`.
  ckpt::StageFile file;
  ckpt::Problem problem;
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;  // under mutex

  std::string file_path() const { return ckpt::join_path(target.tmp_dir, ckpt::stage_file_name(target.rank)); }
  bool is_done() {
    std::lock_guard<std::mutex> lock(mutex);
    return done;
  }
};

namespace {

// The hook's kill points of this save; "write_error" is handled by the writer.
ckpt::PhaseHook phase_hook(int64_t step, const std::string& where) {
  return [step, where](const char* phase) { async_save_fault(world_rank(), step, phase, where); };
}

// The background thread's whole work: the stage file, closed and fsynced.
void write_in_background(AsyncCheckpointer::Save* s);

}  // namespace

AsyncCheckpointer::AsyncCheckpointer(const Deck& deck, std::string resolved_deck, MPI_Comm comm)
    : deck_(deck), resolved_(std::move(resolved_deck)), comm_(comm) {}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (!save_ || !save_->writer.joinable()) return;
  // Reached on an error path too (complete() timed out): the join is bounded
  // like every other wait, and the watchdog names the writer it waits for.
  DeadlineScope scope("the background write of " + save_->file_path() + " (the checkpoint of step " +
                      std::to_string(save_->step) + ") to finish");
  save_->writer.join();
}

bool AsyncCheckpointer::in_flight() const { return save_ != nullptr; }

std::optional<AsyncCheckpointDone> AsyncCheckpointer::start(Trainer& trainer, int64_t step) {
  std::optional<AsyncCheckpointDone> previous = complete(trainer, step - 1);
  const auto begin = Clock::now();
  const double begin_us = trainer.tracer().now_us();
  auto s = std::make_unique<Save>();
  s->step = step;
  s->target = ckpt::begin_save(deck_, step, comm_);
  const std::vector<Param*> params = trainer.params();
  if (!copy_ || !ckpt::stage_into(copy_->params, params)) {  // the first save, or after a move
    copy_.reset();  // the old buffers go before the new ones come
    copy_ = std::make_unique<HostCopy>();
    copy_->params = ckpt::stage_params(params, true);
  }
  s->staged = &copy_->params;
  s->counters = ckpt::counters_of(trainer);
  s->partition = trainer.partition();
  s->stage_s = seconds_since(begin);
  trainer.tracer().record(EventKind::CheckpointStage, step - 1, trainer.stage().stage, -1, begin_us,
                          trainer.tracer().now_us());
  async_save_fault(world_rank(), step, "staged", "after copying the checkpoint of step " +
                                                     std::to_string(step) + " into host memory");
  Save* raw = s.get();
  s->writer = std::thread([raw] { write_in_background(raw); });
  save_ = std::move(s);
  return previous;
}

std::optional<AsyncCheckpointDone> AsyncCheckpointer::poll() {
  if (!save_) return std::nullopt;
  int mine = save_->is_done() ? 1 : 0, all = 0;
  timed_allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm_,
                  "the poll of the background checkpoint writes (step " + std::to_string(save_->step) + ")");
  if (all == 0) return std::nullopt;
  return publish(0.0);
}

std::optional<AsyncCheckpointDone> AsyncCheckpointer::complete(Trainer& trainer, int64_t after_step) {
  if (!save_) return std::nullopt;
  const auto begin = Clock::now();
  const double begin_us = trainer.tracer().now_us();
  {
    // A condition variable, not poll_until: the writer needs the core.
    std::unique_lock<std::mutex> lock(save_->mutex);
    const double limit = wait_limit();
    const bool done = save_->finished.wait_for(lock, std::chrono::duration<double>(limit),
                                               [this] { return save_->done; });
    if (!done)
      throw TimeoutError("timed out after " + std::to_string(static_cast<long long>(limit)) +
                         " s waiting for this rank's background write of " + save_->file_path() +
                         " (the checkpoint of step " + std::to_string(save_->step) +
                         "); see pipeline.timeout_s");
  }
  std::optional<AsyncCheckpointDone> done = publish(seconds_since(begin));
  trainer.tracer().record(EventKind::CheckpointWait, after_step, trainer.stage().stage, -1, begin_us,
                          trainer.tracer().now_us());
  return done;
}

std::optional<AsyncCheckpointDone> AsyncCheckpointer::publish(double wait_s) {
  Save& s = *save_;
  s.writer.join();
  const auto begin = Clock::now();
  const CheckpointWrite w =
      ckpt::finish_save(s.target, deck_, resolved_, s.step, s.counters, s.partition, s.problem, s.file,
                        phase_hook(s.step, "while publishing the checkpoint of step " + std::to_string(s.step)));
  async_save_fault(world_rank(), s.step, "published",
                   "after `latest` named the checkpoint of step " + std::to_string(s.step));
  AsyncCheckpointDone done{s.step, w, s.stage_s, wait_s, seconds_since(begin)};
  save_.reset();
  return done;
}

namespace {

void write_in_background(AsyncCheckpointer::Save* s) {
  try {
    if (async_save_fault(world_rank(), s->step, "write_error"))
      throw Error("cannot write " + s->file_path() +
                  ": write failed (injected by PIPETRAIN_TEST_ASYNC_SAVE_FAULT, as a full disk would)");
    s->file = ckpt::write_stage_file(s->target, *s->staged, s->step,
                                     phase_hook(s->step, "in the background write of " + s->file_path()));
  } catch (const std::exception& e) {
    s->problem = ckpt::Problem{1, e.what()};
  }
  {
    std::lock_guard<std::mutex> lock(s->mutex);
    s->done = true;
  }
  s->finished.notify_all();
}

}  // namespace

}  // namespace pt
