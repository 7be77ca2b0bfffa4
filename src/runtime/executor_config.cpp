// executor_config.cpp: the executor's configuration from a batch split (the
// deck's, or one a profile measures at).
#include "pipetrain/runtime/executor_config.hpp"

#include "pipetrain/base/error.hpp"

namespace pt {

BatchSplit batch_split_of(const Deck& deck) {
  BatchSplit split;
  split.batch_size = deck.training.batch_size;
  split.micro_batches = deck.pipeline.micro_batches;
  split.replicas = data_parallel_size(deck);
  return split;
}

ExecutorConfig executor_config_for(const BatchSplit& split, double timeout_s) {
  ExecutorConfig config;
  config.batch_size = split.batch_size;
  config.micro_batches = split.micro_batches;
  PT_CHECK(split.micro_batches * split.replicas > 0, "an executor needs at least one micro-batch");
  config.rows = split.rows();
  config.timeout_s = timeout_s;
  return config;
}

ExecutorConfig executor_config_for(const Deck& deck) {
  ExecutorConfig config = executor_config_for(batch_split_of(deck), deck.pipeline.timeout_s);
  config.check_messages = deck.pipeline.check_messages;
  return config;
}

}  // namespace pt
