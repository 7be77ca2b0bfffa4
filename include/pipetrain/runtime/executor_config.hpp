// executor_config.hpp: what an executor and its stage runners are built
// with, fixed for their lifetime (no setter changes it afterwards; a
// rebalancing move builds a new executor through the same factory).
#pragma once

#include <cstdint>
#include <functional>

#include "pipetrain/base/deck.hpp"

namespace pt {

// Data-parallel gradient reduction (grad_reducer.hpp): `layer_done` runs when
// a layer's weight gradients of a micro-batch are complete (end of its B, or
// of its W with a split backward), `progress` after every action. Empty
// functions: no reduction.
struct ReductionHooks {
  std::function<void(int stage, int mb, size_t layer)> layer_done;
  std::function<void()> progress;
};

// Fault injection ([slowdown]), resolved for one rank: from training
// step `from_step` on, after each F, B and W the rank sleeps (factor - 1) x
// its compute time, so they take factor x as long and nothing computed
// changes. factor 1 = off.
struct ComputeSlowdown {
  int64_t from_step = 0;
  double factor = 1.0;
  double factor_at(int64_t step) const { return step >= from_step ? factor : 1.0; }
};

struct ExecutorConfig {
  int64_t batch_size = 1;     // samples of a global batch (the loss divides by them)
  int64_t micro_batches = 1;  // micro-batches per pipeline and batch
  int64_t rows = 1;           // samples per micro-batch: batch / (micro-batches x replicas)
  int replica = 0;            // data-parallel replica of this pipeline (docs/data-parallel.md)
  double timeout_s = 0.0;     // the longest wait for a peer (pipeline.timeout_s)
  bool loss_scaling = false;  // fp16: an overflowing loss is the loss scaler's, not an error
  // pipeline.check_messages: every message between ranks carries an envelope
  // the receiver verifies, and every stage output is checked for inf/NaN
  // (runtime/message_check.hpp).
  bool check_messages = false;
  ComputeSlowdown slowdown;
  ReductionHooks reduction;

  // Global index of this pipeline's micro-batch `mb`: replica r reads the
  // r-th contiguous slice of each batch.
  int64_t global_micro_batch(int mb) const { return replica * micro_batches + mb; }
  // First sample of micro-batch `mb` of batch `step` (micro_batch_first_sample).
  int64_t first_sample(int64_t step, int mb) const {
    return step * batch_size + global_micro_batch(mb) * rows;
  }
};

// How a step's batch is split: the global batch, micro-batches per pipeline
// and data-parallel replicas D; a micro-batch has batch / (micro-batches x D)
// rows. The deck's (batch_split_of), or another a profile measures at.
struct BatchSplit {
  int64_t batch_size = 1;
  int64_t micro_batches = 1;
  int64_t replicas = 1;
  int64_t rows() const { return batch_size / (micro_batches * replicas); }
};
BatchSplit batch_split_of(const Deck& deck);

// The configuration of a split and a wait limit: batch, micro-batches, rows
// and the timeout; replica 0, no loss scaling, no slowdown, no reduction.
// The run's settings (run_settings_for) add this rank's replica and slowdown,
// and its engine factory (build_engine, run_builder.hpp) the rest.
ExecutorConfig executor_config_for(const BatchSplit& split, double timeout_s);
// The same for the deck's split and pipeline.timeout_s.
ExecutorConfig executor_config_for(const Deck& deck);

}  // namespace pt
