// checkpoint_async.hpp: checkpoints that do not stop training
// (output.checkpoint_async = true; docs/reliability.md, checkpoint-format.md).
//
// At a checkpoint step each rank copies its parameters and optimizer state
// into host memory (MemCategory::CheckpointStaging; the buffers are kept
// for the next save, so the copy is a memcpy into mapped pages) and returns
// to training;
// a background thread writes, checksums and fsyncs the rank's stage file from
// that copy. Publishing needs every rank's file durable, so it happens on the
// training thread at a later step boundary: poll() asks every rank (a timed
// all-reduce) whether its write has finished and, once all have, runs the
// synchronous save's last phase (manifest.h5, rename, `latest`) collectively.
// Crash safety is therefore the synchronous save's: `latest` moves only after
// every rank's file is durable and bound to the manifest. At most one save is
// in flight: start() first completes the previous one, waiting for it. The
// background thread calls neither MPI (the run initialises MPI without thread
// support) nor the allocator; its HDF5 calls hold Hdf5Lock.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "pipetrain/io/checkpoint.hpp"

namespace pt {

// A save published: the step it holds, what save_checkpoint would return
// (seconds: from staging to publication), how long training was blocked.
struct AsyncCheckpointDone {
  int64_t step = 0;
  CheckpointWrite write;
  double stage_s = 0.0;  // the host copy, at the checkpoint step
  double wait_s = 0.0;   // waiting for the background write to finish
  double publish_s = 0.0;  // the publication (manifest.h5, renames, `latest`, their fsyncs)
};

class AsyncCheckpointer {
 public:
  // `comm`: the ranks that write (one pipeline), as save_checkpoint's.
  AsyncCheckpointer(const Deck& deck, std::string resolved_deck, MPI_Comm comm);
  // Joins a writer still running; its save is left unpublished (a .tmp
  // directory the next save removes), as after a kill.
  ~AsyncCheckpointer();
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  bool in_flight() const;
  // Collective: completes a save still in flight (returned; the wait is a
  // CKPT_WAIT trace event), then stages the trainer's state after `step`
  // completed steps (a CKPT_STAGE event) and starts its background write.
  std::optional<AsyncCheckpointDone> start(Trainer& trainer, int64_t step);
  // Collective, at a step boundary: publishes the save in flight when every
  // rank's write has finished; nothing otherwise (or with none in flight).
  std::optional<AsyncCheckpointDone> poll();
  // Collective: waits for this rank's write (bounded by pipeline.timeout_s),
  // then publishes it; nothing when none is in flight.
  // `after_step`: the 0-based step after which it waits (for the trace).
  std::optional<AsyncCheckpointDone> complete(Trainer& trainer, int64_t after_step);

  struct Save;      // one save in flight (checkpoint_async.cpp)
  struct HostCopy;  // the host copy, reused by every save

 private:
  // Collective: the synchronous save's last phase for the save in flight,
  // whose writer has finished on every rank.
  std::optional<AsyncCheckpointDone> publish(double wait_s);

  const Deck& deck_;
  const std::string resolved_;
  MPI_Comm comm_;
  std::unique_ptr<HostCopy> copy_;  // from the first save on, or null
  std::unique_ptr<Save> save_;      // the save in flight, or null
};

}  // namespace pt
