// run_state.hpp: what a training run keeps beyond its steps, for the driver
// (src/app/driver.cpp): the state it starts from (--resume, init_from), its
// checkpoints, its trace, and its early stop on a signal. Collective calls
// say so.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/io/checkpoint.hpp"
#include "pipetrain/io/checkpoint_async.hpp"
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

struct CommandLine;

struct World {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  std::string blas_note;  // what select_blas_kernel did before MPI_Init
};

// Collective when output.trace is on: rank 0 writes every rank's events.
void write_trace(const World& w, const Deck& deck, Trainer& trainer);
// Collective: the state training starts from, --resume (weights, optimizer
// state, step; "auto": latest when there is a checkpoint, else step 0) or
// training.init_from (weights only). Returns the first step, or -1 after a
// bad checkpoint (every rank has the same error; rank 0 printed it).
// `loaded`: when given, what a resume loaded (its directory and stored deck).
int64_t restore(const World& w, const ProcessGrid& grid, const CommandLine& cli, const Deck& deck,
                const std::string& resolved, Trainer& trainer, CheckpointRead* loaded = nullptr);
// A resumed run continues metrics.h5 (rank 0).
void continue_metrics(int64_t first_step, MetricsFile& metrics);
// Whether the deck's checkpoint is due after `step` (0-based).
bool checkpoint_due(const Deck& deck, int64_t step);
// The writer of asynchronous checkpoints (output.checkpoint_async) on the
// ranks that write them (replica 0's pipeline); null elsewhere and when off.
std::unique_ptr<AsyncCheckpointer> make_async_checkpointer(const ProcessGrid& grid, const Deck& deck,
                                                           const std::string& resolved);
// Collective: writes the checkpoint of `steps_done` steps; with `async`,
// stages it and returns while it is written in the background (`final`:
// waits for it and publishes it before returning).
void checkpoint(const World& w, const ProcessGrid& grid, const Deck& deck,
                const std::string& resolved, Trainer& trainer, int64_t steps_done,
                MetricsFile& metrics, AsyncCheckpointer* async = nullptr, bool final = false);
// Collective at each step boundary (after 0-based step `step`): publishes an
// asynchronous checkpoint whose background writes have all finished.
void poll_checkpoint(const World& w, AsyncCheckpointer* async);
// Collective: an asynchronous checkpoint still in flight is waited for and
// published (before the run ends, after 0-based step `step`).
void finish_checkpoints(const World& w, const ProcessGrid& grid, AsyncCheckpointer* async,
                        Trainer& trainer, int64_t step);
// Test hook PIPETRAIN_TEST_SIGNAL (see run_state.cpp).
void test_signal_point(int rank, int64_t step);
// Collective: every rank agreed to stop after `step` on signal `signo`.
void stop_after_step(const World& w, const ProcessGrid& grid, const Deck& deck,
                     const std::string& resolved, Trainer& trainer, int64_t step, int signo,
                     MetricsFile& metrics, AsyncCheckpointer* async = nullptr);

}  // namespace pt
