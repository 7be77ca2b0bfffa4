// data_files.hpp: data sets read from files, their checks before step 0, and make_dataset for every data.type.
//   hdf5 (GPT): windows of T+1 tokens of a 1-D integer dataset (token_files.cpp).
//   image_files (CNN, MLP): labelled images of an HDF5 file (N, C, H, W) (image_files.cpp).
// The formats are in docs/data.md. The generated data sets (synthetic,
// markov, images) are the model layer's (model/data.hpp).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/model/data.hpp"

namespace pt {

// A data set of any data.type: the files' readers below, or the model
// layer's make_generated_dataset. The application gives it to the runtime
// as its DatasetOpener (ComputeSetup::open_dataset, ProfileOptions::open_dataset).
std::unique_ptr<Dataset> make_dataset(const DataSetConfig& config, Split split);

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

}  // namespace pt
