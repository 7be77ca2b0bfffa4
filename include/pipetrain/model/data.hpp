// data.hpp: training and evaluation data, addressed by global sample index.
//
// Step t uses samples t * batch + j, j = 0..batch-1; micro-batch m of that
// step holds j = m * rows .. (m + 1) * rows - 1 (m global over the replicas). The first stage asks for
// inputs and the last stage for targets; neither needs the other, and no rank
// holds the whole data set.
//   synthetic (MLP): x ~ N(0, 1), targets from a fixed random teacher.
//   markov (GPT): windows of a seeded random Markov chain of order k.
//   images (CNN): N(0, 1) images labelled by a fixed teacher network.
// The data types read from files (token files, image files) are the io
// layer's (io/data_files.hpp); this layer only generates data. The runtime
// opens data sets through a DatasetOpener the application gives it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "pipetrain/base/deck.hpp"  // DataConfig
#include "pipetrain/base/model_config.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

enum class Split { Train, Eval };

// What the data sets read of a run's configuration, resolved from the deck
// in one place (data_set_config_for, runtime/data_set_config.hpp).
struct DataSetConfig {
  DataConfig data;             // the deck's [data] section
  MlpConfig mlp;               // synthetic data: input_dim, output_dim, loss
  GptDims gpt;                 // token data: vocab_size, seq_len
  CnnConfig cnn;               // image data: image_size, in_channels, classes
  // image_files: what the model takes. A CNN: (channels, height, width)
  // exactly; an MLP (flat): any image of `values` = input_dim pixels, given
  // to it as (count, values). Labels must be below `classes`.
  struct ImageInput {
    int64_t channels = 0, height = 0, width = 0;
    bool flat = false;
    int64_t values = 0;
    int64_t classes = 0;
  } image;
  int64_t batch_size = 1;      // samples per optimizer step (global batch)
  int64_t micro_batches = 1;   // per pipeline and step
  int64_t replicas = 1;        // data-parallel pipelines D
  std::string concentration_at;  // deck.where("data.concentration"): message prefix
  // deck.where of data.path, data.eval_path and data.tokenizer: the start of
  // every message about a token file ("deck.toml:7: data.path").
  std::string path_at = "data.path";
  std::string eval_path_at = "data.eval_path";
  std::string tokenizer_at = "data.tokenizer";
};

// The best loss any model can reach on this data (nats per target token).
struct LossFloor {
  double entropy_rate = 0.0;  // H of the next token given the full past
  double window = 0.0;        // mean over the T positions of a window (early
                              // positions see less than k tokens of context)
  // The line the run prints about it; "" = the Markov chain's wording.
  std::string summary;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  // MLP: (count, input_dim) f32. GPT: (count, T) i32 token ids. CNN:
  // (count, in_channels, image_size, image_size) f32.
  virtual Tensor inputs(int64_t first, int64_t count) const = 0;
  // MLP: (count, output_dim) f32 for MSE, (count) i32 labels for
  // cross-entropy. GPT: (count, T) i32 next tokens. CNN: (count) i32 labels.
  virtual Tensor targets(int64_t first, int64_t count) const = 0;
  virtual std::optional<LossFloor> loss_floor() const { return std::nullopt; }
};

// The data sets this layer makes (data.type = "synthetic", "markov",
// "images"), generated from the data seed. Any other type reads files: an
// internal error here (PT_CHECK); io/data_files.hpp's make_dataset opens
// every type.
std::unique_ptr<Dataset> make_generated_dataset(const DataSetConfig& config, Split split);
bool is_generated_data(DataKind type);

// How the runtime opens a data set of any type: the application gives it
// io's make_dataset (ComputeSetup::open_dataset, ProfileOptions::open_dataset),
// so the runtime never calls the io layer itself.
using DatasetOpener = std::function<std::unique_ptr<Dataset>(const DataSetConfig&, Split)>;
// `open` when given; without one, make_generated_dataset (a file type is
// then an internal error naming the missing opener).
std::unique_ptr<Dataset> open_dataset(const DatasetOpener& open, const DataSetConfig& config, Split split);

// Data that caches itself on first use (synthetic data) does so now, for a
// stage that reads inputs (`first_stage`) and/or targets (`last_stage`), so
// that its one-time transient precedes the memory peaks of the steps.
void fill_data_cache(const Dataset& data, int64_t rows, bool first_stage, bool last_stage);

// Teacher-labelled images (image_data.cpp).
std::unique_ptr<Dataset> make_image_dataset(const DataSetConfig& config, Split split);

// Markov chain data (token_data.cpp).
std::unique_ptr<Dataset> make_markov_dataset(const DataSetConfig& config, Split split);

// First global sample of micro-batch `mb` of step `step`. With D replicas
// (data_parallel.replicas) `mb` is the global micro-batch index: replica d's
// local micro-batch m is d * micro_batches + m, so replica d reads the d-th
// contiguous slice of the batch (docs/data-parallel.md).
inline int64_t micro_batch_first_sample(const DataSetConfig& config, int64_t step, int64_t mb) {
  const int64_t rows = config.batch_size / (config.micro_batches * config.replicas);
  return step * config.batch_size + mb * rows;
}

}  // namespace pt
