// data_set_config.cpp: a deck's data-set configuration
// (runtime/data_set_config.hpp).
#include "pipetrain/runtime/data_set_config.hpp"

namespace pt {

DataSetConfig data_set_config_for(const Deck& deck) {
  DataSetConfig config;
  config.data = deck.data;
  config.mlp = deck.model.mlp;
  config.gpt = deck.model.gpt;
  config.cnn = deck.model.cnn;
  if (deck.model.type == "mlp") {  // the flattened pixels
    config.image.flat = true;
    config.image.values = deck.model.mlp.input_dim;
    config.image.classes = deck.model.mlp.output_dim;
  } else {
    const CnnConfig& c = deck.model.cnn;
    config.image = {c.in_channels, c.image_size, c.image_size, false, c.in_channels * c.image_size * c.image_size,
                    c.classes};
  }
  config.batch_size = deck.training.batch_size;
  config.micro_batches = deck.pipeline.micro_batches;
  config.replicas = data_parallel_size(deck);
  config.concentration_at = deck.where("data.concentration");
  config.path_at = deck.where("data.path");
  config.eval_path_at = deck.where("data.eval_path");
  config.tokenizer_at = deck.where("data.tokenizer");
  return config;
}

}  // namespace pt
