// token_data.cpp: token data for the GPT model: a seeded random Markov chain
// with a known entropy floor, and 1-D token datasets in HDF5 files.
#include <hdf5.h>

#include <algorithm>
#include <filesystem>
#include <cmath>
#include <numeric>
#include <type_traits>
#include <vector>

#include "pipetrain/model/data.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/quiet_hdf5.hpp"
#include "pipetrain/base/rng.hpp"

namespace pt {

namespace {

constexpr uint64_t kChainStream = 11;   // transition rows
constexpr uint64_t kTrainStream = 12;   // training windows
constexpr uint64_t kEvalStream = 13;    // held-out windows
constexpr uint64_t kShuffleStream = 14; // HDF5 window permutation

// Sequential draws from the counter-based generator.
class Draws {
 public:
  Draws(uint64_t seed, uint64_t stream) : seed_(seed), stream_(stream) {}
  double uniform() {  // (0, 1)
    return (static_cast<double>(random_bits(seed_, stream_, next_++) >> 11) + 0.5) *
           (1.0 / 9007199254740992.0);
  }
  double normal() { return normal01(seed_, stream_, next_++); }
  // Gamma(shape, 1) by Marsaglia and Tsang; shape < 1 via the U^(1/shape) boost.
  double gamma(double shape) {
    if (shape < 1.0) return gamma(shape + 1.0) * std::pow(uniform(), 1.0 / shape);
    const double d = shape - 1.0 / 3.0, c = 1.0 / std::sqrt(9.0 * d);
    while (true) {
      double x = normal(), v = 1.0 + c * x;
      if (v <= 0.0) continue;
      v = v * v * v;
      double u = uniform();
      if (std::log(u) < 0.5 * x * x + d - d * v + d * std::log(v)) return d * v;
    }
  }

 private:
  uint64_t seed_, stream_, next_ = 0;
};

double entropy(const double* p, int64_t n) {
  double h = 0.0;
  for (int64_t i = 0; i < n; ++i)
    if (p[i] > 0.0) h -= p[i] * std::log(p[i]);
  return h;
}

// Index of the first cumulative value > u.
int64_t sample_cdf(const std::vector<double>& cdf, int64_t begin, int64_t n, double u) {
  auto first = cdf.begin() + begin;
  auto it = std::upper_bound(first, first + n, u * cdf[begin + n - 1]);
  return std::min<int64_t>(it - first, n - 1);
}

// An order-k chain over V tokens: a state is the last k tokens, state
// s = x_{t-k+1} V^{k-1} + ... + x_t; each state's next-token distribution is
// drawn from a symmetric Dirichlet(concentration).
class MarkovData final : public Dataset {
 public:
  MarkovData(const DataSetConfig& config, Split split)
      : vocab_(config.gpt.vocab_size), order_(config.data.markov_order),
        seq_len_(config.gpt.seq_len), seed_(config.data.seed),
        stream_(split == Split::Train ? kTrainStream : kEvalStream) {
    states_ = 1;
    for (int64_t i = 0; i < order_; ++i) states_ *= vocab_;
    build_rows(config.data.concentration);
    build_stationary(config);
    compute_floor();
  }

  Tensor inputs(int64_t first, int64_t count) const override { return windows(first, count, 0); }
  Tensor targets(int64_t first, int64_t count) const override { return windows(first, count, 1); }
  std::optional<LossFloor> loss_floor() const override { return floor_; }

 private:
  void build_rows(double concentration) {
    Draws draws(seed_, kChainStream);
    rows_.assign(static_cast<size_t>(states_ * vocab_), 0.0);
    for (int64_t s = 0; s < states_; ++s) {
      double* row = &rows_[s * vocab_];
      double total = 0.0;
      for (int64_t x = 0; x < vocab_; ++x) total += row[x] = draws.gamma(concentration);
      for (int64_t x = 0; x < vocab_; ++x) row[x] /= total;
    }
    row_cdf_.resize(rows_.size());
    for (int64_t s = 0; s < states_; ++s)
      std::partial_sum(&rows_[s * vocab_], &rows_[s * vocab_] + vocab_, &row_cdf_[s * vocab_]);
  }

  int64_t next_state(int64_t s, int64_t x) const { return (s % (states_ / vocab_)) * vocab_ + x; }

  // Power iteration for the stationary distribution over states, on the lazy
  // chain (I + P) / 2: same fixed point, but it cannot oscillate on a nearly
  // periodic chain. A chain that does not settle is reported, not used.
  void build_stationary(const DataSetConfig& config) {
    std::vector<double> pi(states_, 1.0 / static_cast<double>(states_)), next(states_);
    bool settled = false;
    for (int iter = 0; iter < 200000 && !settled; ++iter) {
      for (int64_t s = 0; s < states_; ++s) next[s] = 0.5 * pi[s];
      for (int64_t s = 0; s < states_; ++s)
        for (int64_t x = 0; x < vocab_; ++x)
          next[next_state(s, x)] += 0.5 * pi[s] * rows_[s * vocab_ + x];
      double change = 0.0;
      for (int64_t s = 0; s < states_; ++s) change += std::fabs(next[s] - pi[s]);
      pi.swap(next);
      settled = change < 1e-14;
    }
    if (!settled)
      throw InputError(config.concentration_at + " = " + std::to_string(config.data.concentration) +
                       ": this Markov chain (model.vocab_size = " + std::to_string(vocab_) +
                       ", data.markov_order = " + std::to_string(order_) +
                       ") mixes too slowly to compute its stationary distribution; use a larger "
                       "concentration or vocabulary, or another data.seed");
    stationary_ = pi;
    stationary_cdf_.resize(states_);
    std::partial_sum(pi.begin(), pi.end(), stationary_cdf_.begin());
  }

  // Entropy rate H = sum_s pi(s) H(row s). A window predicts x_1..x_T from
  // x_0..x_{T-1}; its total conditional entropy is H(x_0..x_T) - H(x_0)
  // = H(pi) + (T + 1 - k) H - H(unigram), valid for T + 1 >= k.
  void compute_floor() {
    double rate = 0.0;
    for (int64_t s = 0; s < states_; ++s) rate += stationary_[s] * entropy(&rows_[s * vocab_], vocab_);
    std::vector<double> unigram(vocab_, 0.0);
    const int64_t lead = states_ / vocab_;  // first token of the state: s / V^{k-1}
    for (int64_t s = 0; s < states_; ++s) unigram[s / lead] += stationary_[s];
    const double h_state = entropy(stationary_.data(), states_);
    const double h_first = entropy(unigram.data(), vocab_);
    floor_.entropy_rate = rate;
    if (seq_len_ + 1 >= order_) {
      floor_.window = (h_state - h_first + static_cast<double>(seq_len_ + 1 - order_) * rate) /
                      static_cast<double>(seq_len_);
    } else {
      floor_.window = rate;  // windows shorter than the order: report the rate
    }
  }

  // Window of sample i: k tokens from the stationary distribution, then the
  // chain; offset 0 gives inputs x_0..x_{T-1}, offset 1 targets x_1..x_T.
  Tensor windows(int64_t first, int64_t count, int64_t offset) const {
    Tensor out = Tensor::empty({count, seq_len_}, DType::I32, MemCategory::Workspace, Device::CPU);
    std::vector<int32_t> tokens(static_cast<size_t>(seq_len_ + 1 + order_));
    for (int64_t r = 0; r < count; ++r) {
      generate(first + r, tokens);
      std::copy(tokens.begin() + offset, tokens.begin() + offset + seq_len_, out.i32() + r * seq_len_);
    }
    return out;
  }

  void generate(int64_t sample, std::vector<int32_t>& tokens) const {
    Draws draws(seed_ ^ mix64(static_cast<uint64_t>(sample)), stream_);
    int64_t state = sample_cdf(stationary_cdf_, 0, states_, draws.uniform());
    for (int64_t i = order_ - 1, s = state; i >= 0; --i, s /= vocab_)
      tokens[i] = static_cast<int32_t>(s % vocab_);
    for (size_t t = order_; t < tokens.size(); ++t) {
      int64_t x = sample_cdf(row_cdf_, state * vocab_, vocab_, draws.uniform());
      tokens[t] = static_cast<int32_t>(x);
      state = next_state(state, x);
    }
  }

  int64_t vocab_, order_, seq_len_;
  uint64_t seed_, stream_;
  int64_t states_ = 1;
  std::vector<double> rows_;            // (states, V) transition probabilities
  std::vector<double> row_cdf_;         // (states, V) cumulative, per row
  std::vector<double> stationary_;      // (states)
  std::vector<double> stationary_cdf_;  // (states)
  LossFloor floor_;
};

// ---- HDF5 token files ------------------------------------------------------


// A 1-D integer dataset read in slices.
class TokenFile {
 public:
  TokenFile(const std::string& path, const std::string& dataset, const std::string& key)
      : path_(path) {
    QuietHdf5 quiet;
    const std::string at = key + " = \"" + path + "\": ";
    check_is_file(path, at);
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) throw InputError(at + "cannot open as an HDF5 file (missing or not HDF5)");
    dset_ = H5Dopen2(file_, dataset.c_str(), H5P_DEFAULT);
    if (dset_ < 0) {
      H5Fclose(file_);
      throw InputError(at + "has no dataset '" + dataset + "' (see data.dataset)");
    }
    hid_t space = H5Dget_space(dset_), type = H5Dget_type(dset_);
    const int rank = H5Sget_simple_extent_ndims(space);
    const bool integer = H5Tget_class(type) == H5T_INTEGER;
    unsigned_ = integer && H5Tget_sign(type) == H5T_SGN_NONE;
    hsize_t dims[1] = {0};
    if (rank == 1) H5Sget_simple_extent_dims(space, dims, nullptr);
    H5Sclose(space);
    H5Tclose(type);
    if (rank != 1 || !integer) {
      close();
      throw InputError(at + "dataset '" + dataset + "' must be a 1-D integer array of token ids");
    }
    length_ = static_cast<int64_t>(dims[0]);
  }
  ~TokenFile() { close(); }
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t length() const { return length_; }
  const std::string& path() const { return path_; }
  bool is_unsigned() const { return unsigned_; }  // uint64 ids may exceed INT64_MAX

  void read(int64_t start, int64_t count, int32_t* out) const {
    read_as(start, count, H5T_NATIVE_INT32, out);
  }
  void read(int64_t start, int64_t count, int64_t* out) const {
    read_as(start, count, H5T_NATIVE_INT64, out);
  }
  void read(int64_t start, int64_t count, uint64_t* out) const {
    read_as(start, count, H5T_NATIVE_UINT64, out);
  }

 private:
  static void check_is_file(const std::string& path, const std::string& at) {
    std::error_code ec;
    const auto status = std::filesystem::status(path, ec);
    if (std::filesystem::is_directory(status)) throw InputError(at + "is a directory, not an HDF5 token file");
    if (!std::filesystem::exists(status)) throw InputError(at + "no such file");
    if (!std::filesystem::is_regular_file(status)) throw InputError(at + "not a regular file");
  }

  void read_as(int64_t start, int64_t count, hid_t mem_type, void* out) const {
    hsize_t offset[1] = {static_cast<hsize_t>(start)}, size[1] = {static_cast<hsize_t>(count)};
    hid_t file_space = H5Dget_space(dset_);
    H5_CHECK(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, offset, nullptr, size, nullptr));
    hid_t mem_space = H5Screate_simple(1, size, nullptr);
    herr_t rc = H5Dread(dset_, mem_type, mem_space, file_space, H5P_DEFAULT, out);
    H5Sclose(mem_space);
    H5Sclose(file_space);
    if (rc < 0) throw Error(path_ + ": reading tokens " + std::to_string(start) + ".." +
                            std::to_string(start + count - 1) + " failed");
  }

  void close() {
    if (dset_ >= 0) H5Dclose(dset_);
    if (file_ >= 0) H5Fclose(file_);
    dset_ = file_ = -1;
  }
  std::string path_;
  hid_t file_ = -1, dset_ = -1;
  int64_t length_ = 0;
  bool unsigned_ = false;
};

// Window w holds tokens w*T .. w*T + T (T + 1 tokens; consecutive windows
// share one token). Sample i uses window i mod W, or, with shuffle on, entry
// i mod W of a seeded permutation drawn anew for every epoch i / W.
class Hdf5Data final : public Dataset {
 public:
  Hdf5Data(const DataSetConfig& config, Split split)
      : file_(split == Split::Train ? config.data.path : config.data.eval_path, config.data.dataset,
              split == Split::Train ? "data.path" : "data.eval_path"),
        seq_len_(config.gpt.seq_len), seed_(config.data.seed),
        shuffle_(config.data.shuffle && split == Split::Train) {
    windows_ = (file_.length() - 1) / seq_len_;
    if (windows_ < 1) throw InputError(file_.path() + ": too short for one window of model.seq_len + 1 tokens");
  }

  Tensor inputs(int64_t first, int64_t count) const override { return read(first, count, 0); }
  Tensor targets(int64_t first, int64_t count) const override { return read(first, count, 1); }

 private:
  int64_t window_of(int64_t sample) const {
    const int64_t epoch = sample / windows_, pos = sample % windows_;
    if (!shuffle_) return pos;
    if (epoch != cached_epoch_) build_permutation(epoch);
    return permutation_[pos];
  }

  // Fisher-Yates with the counter-based generator keyed by (seed, epoch).
  void build_permutation(int64_t epoch) const {
    permutation_.resize(windows_);
    std::iota(permutation_.begin(), permutation_.end(), int64_t{0});
    for (int64_t i = windows_ - 1; i > 0; --i) {
      uint64_t bits = random_bits(seed_ ^ mix64(static_cast<uint64_t>(epoch)), kShuffleStream, i);
      std::swap(permutation_[i], permutation_[bits % static_cast<uint64_t>(i + 1)]);
    }
    cached_epoch_ = epoch;
  }

  Tensor read(int64_t first, int64_t count, int64_t offset) const {
    Tensor out = Tensor::empty({count, seq_len_}, DType::I32, MemCategory::Workspace, Device::CPU);
    for (int64_t r = 0; r < count; ++r)
      file_.read(window_of(first + r) * seq_len_ + offset, seq_len_, out.i32() + r * seq_len_);
    return out;
  }

  TokenFile file_;
  int64_t seq_len_;
  uint64_t seed_;
  bool shuffle_;
  int64_t windows_ = 0;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;  // (windows) for cached_epoch_
};

}  // namespace

std::unique_ptr<Dataset> make_markov_dataset(const DataSetConfig& config, Split split) {
  return std::make_unique<MarkovData>(config, split);
}

std::unique_ptr<Dataset> make_hdf5_dataset(const DataSetConfig& config, Split split) {
  return std::make_unique<Hdf5Data>(config, split);
}

namespace {

template <typename T>
bool outside_vocabulary(T id, int64_t vocab) {
  if constexpr (std::is_signed_v<T>) {
    if (id < 0) return true;
  }
  return id >= static_cast<T>(vocab);
}

// Every id of `file` in 0..vocab-1, read in chunks as T (uint64 for unsigned
// files, so ids above INT64_MAX are reported as stored, not clipped).
template <typename T>
void check_token_ids(const TokenFile& file, int64_t vocab, const std::string& at) {
  constexpr int64_t kChunk = 1 << 20;
  std::vector<T> buffer(kChunk);
  for (int64_t start = 0; start < file.length(); start += kChunk) {
    const int64_t n = std::min(kChunk, file.length() - start);
    file.read(start, n, buffer.data());
    for (int64_t i = 0; i < n; ++i)
      if (outside_vocabulary(buffer[i], vocab))
        throw InputError(at + "token " + std::to_string(start + i) + " is " +
                         std::to_string(buffer[i]) + ", outside 0..model.vocab_size-1 = 0.." +
                         std::to_string(vocab - 1));
  }
}

}  // namespace

void check_token_file(const DataSetConfig& config, const std::string& path, const std::string& key) {
  TokenFile file(path, config.data.dataset, key);
  const std::string at = key + " = \"" + path + "\": ";
  const int64_t t = config.gpt.seq_len, batch = config.batch_size;
  const int64_t windows = file.length() > 0 ? (file.length() - 1) / t : 0;
  if (windows < batch)
    throw InputError(at + "too short: " + std::to_string(file.length()) + " tokens make " +
                     std::to_string(windows) + " windows of model.seq_len + 1 = " +
                     std::to_string(t + 1) + " tokens, but one batch needs training.batch_size = " +
                     std::to_string(batch));
  if (file.is_unsigned())
    check_token_ids<uint64_t>(file, config.gpt.vocab_size, at);
  else
    check_token_ids<int64_t>(file, config.gpt.vocab_size, at);
}

}  // namespace pt
