// executor_config.cpp: the executor's configuration read from the deck.
#include "pipetrain/runtime/executor_config.hpp"

#include "pipetrain/base/error.hpp"

namespace pt {

ExecutorConfig executor_config_for(const Deck& deck) {
  ExecutorConfig config;
  config.batch_size = deck.training.batch_size;
  config.micro_batches = deck.pipeline.micro_batches;
  const int64_t pieces = deck.pipeline.micro_batches * data_parallel_size(deck);
  PT_CHECK(pieces > 0, "an executor needs at least one micro-batch");
  config.rows = deck.training.batch_size / pieces;
  config.timeout_s = deck.pipeline.timeout_s;
  return config;
}

}  // namespace pt
