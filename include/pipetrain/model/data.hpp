// data.hpp: training and evaluation data, addressed by global sample index.
//
// Step t uses samples t * batch + j, j = 0..batch-1; micro-batch m of that
// step holds j = m * rows .. (m + 1) * rows - 1 (m global over the replicas). The first stage asks for
// inputs and the last stage for targets; neither needs the other, and no rank
// holds the whole data set.
//   synthetic (MLP): x ~ N(0, 1), targets from a fixed random teacher.
//   markov (GPT): windows of a seeded random Markov chain of order k.
//   hdf5 (GPT): windows of T+1 tokens of a 1-D integer dataset.
//   images (CNN): N(0, 1) images labelled by a fixed teacher network.
//   image_files (CNN, MLP): labelled images of an HDF5 file (N, C, H, W).
#pragma once

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

std::unique_ptr<Dataset> make_dataset(const DataSetConfig& config, Split split);

// Data that caches itself on first use (synthetic data) does so now, for a
// stage that reads inputs (`first_stage`) and/or targets (`last_stage`), so
// that its one-time transient precedes the memory peaks of the steps.
void fill_data_cache(const Dataset& data, int64_t rows, bool first_stage, bool last_stage);

// Teacher-labelled images (image_data.cpp).
std::unique_ptr<Dataset> make_image_dataset(const DataSetConfig& config, Split split);

// ---- image files (data.type = "image_files", image_files.cpp, docs/data.md) ----
// One HDF5 file per split (data.path, data.eval_path): dataset `images`
// (N, C, H, W) float or uint8 (uint8 read as value / 255) and dataset
// `labels` (N) integer class indices. The whole file is read into host
// memory; samples are served by global index, wrapping, in the file's order
// or (data.shuffle) a seeded permutation of it.
std::unique_ptr<Dataset> make_image_file_dataset(const DataSetConfig& config, Split split);
// Reads and checks the files before step 0: each exists, is HDF5, has both
// datasets with the layout above, images of the shape the model takes, and
// labels within its classes. Throws one InputError naming the key, the file
// and the problem.
void check_image_files(const DataSetConfig& config);

// Markov chain data (token_data.cpp).
std::unique_ptr<Dataset> make_markov_dataset(const DataSetConfig& config, Split split);

// ---- token files (data.type = "hdf5", token_files.cpp, docs/data.md) ------
//
// A split's token files (data.path for training, data.eval_path for
// evaluation) are read as ONE token sequence: the files' datasets
// concatenated in the order below. Windows of T + 1 tokens are cut from that
// sequence exactly as from a single file, so a window may begin in one file
// and end in the next, and the same tokens give the same samples however
// they are split into files.

// One file of a split, and the text naming it in messages, e.g.
// `deck.toml:7: data.path entry 2 = "a.h5"` or
// `deck.toml:7: data.path = "runs/train_*.h5" (match "runs/train_00001.h5")`.
struct TokenFileRef {
  std::string path;
  std::string at;
};

// The split's files in reading order. The deck's value is a string or a list
// of strings (DataConfig::path / path_list); each string in turn names an
// existing file (taken as written), or, when it holds *, ? or [, is a glob
// pattern whose matches are taken in byte order of their paths (as
// `LC_ALL=C ls`); a string naming neither is kept, for the file check to
// report as missing. Throws InputError for a pattern that matches nothing
// and for an empty value.
std::vector<TokenFileRef> token_files(const DataSetConfig& config, Split split);

// The split's files as one sequence (hyperslab reads of only the windows
// asked for; at most a few files open at once).
std::unique_ptr<Dataset> make_hdf5_dataset(const DataSetConfig& config, Split split);

// Checks the run's token data completely, before step 0, reading every file
// in chunks: each file of data.path (and data.eval_path, when given) exists,
// is HDF5 and has the dataset data.dataset, a 1-D integer array; the files of
// a split share one integer type; every file of both splits carries the same
// tokenizer (data.tokenizer's, when set) and a tokenizer vocabulary (its
// vocab_size attribute) of at most model.vocab_size; every id is in
// 0..model.vocab_size-1; and each split has windows for one batch. Throws one
// InputError naming the key, the file and the problem.
void check_token_data(const DataSetConfig& config);

// check_token_data for one file `path` standing for a whole split, named
// `deck_key` in messages (as `deck_key = "path": ...`).
void check_token_file(const DataSetConfig& config, const std::string& path, const std::string& deck_key);

// The tokenizer the first training file records (sampling decodes with it,
// docs/sampling.md): its tokenizer attribute ("bytes", "bpe"; "" when none),
// its stored tokenizer_json ("" when none), and the text naming that file.
struct StoredTokenizer {
  std::string kind;
  std::string json;
  std::string at;
};
StoredTokenizer stored_tokenizer(const DataSetConfig& config);
// First global sample of micro-batch `mb` of step `step`. With D replicas
// (data_parallel.replicas) `mb` is the global micro-batch index: replica d's
// local micro-batch m is d * micro_batches + m, so replica d reads the d-th
// contiguous slice of the batch (docs/data-parallel.md).
inline int64_t micro_batch_first_sample(const DataSetConfig& config, int64_t step, int64_t mb) {
  const int64_t rows = config.batch_size / (config.micro_batches * config.replicas);
  return step * config.batch_size + mb * rows;
}

}  // namespace pt
