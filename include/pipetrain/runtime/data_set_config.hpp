// data_set_config.hpp: the one place a deck becomes the data sets'
// configuration (model/data.hpp, DataSetConfig).
#pragma once

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/data.hpp"

namespace pt {

// The deck's [data] section, the model widths the data sets read, the batch
// split (training.batch_size, pipeline.micro_batches, D replicas) and the
// deck locations their messages name.
DataSetConfig data_set_config_for(const Deck& deck);

}  // namespace pt
