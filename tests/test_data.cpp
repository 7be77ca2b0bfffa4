// test_data.cpp: the token data sets (Markov chain and HDF5 token files).
//
// Markov: the reported entropy rate and window floor are checked against
// empirical conditional entropies of generated windows (plug-in estimate with
// the Miller-Madow bias correction), plus shape, range, shift, determinism and
// split properties. HDF5: small token files written here with the HDF5 C API
// are read back window by window (exact values), with and without the seeded
// shuffle, and every kind of bad file is checked for its specific message.
// Shards (several files, a list or a glob pattern) read as one sequence:
// every window equals the same window of one file holding all their tokens.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "pipetrain/io/data_files.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/sha256.hpp"

namespace pt {
namespace {

// The data set of a deck, through the configuration a run builds from it.
std::unique_ptr<Dataset> dataset_of(const Deck& deck, Split split) {
  return make_dataset(data_set_config_for(deck), split);
}

// ---- Markov chain ------------------------------------------------------------

Deck markov_deck(int64_t vocab, int64_t order, int64_t seq_len, double concentration,
                 uint64_t seed = 42) {
  Deck deck;
  deck.model.type = "gpt";
  deck.model.gpt.vocab_size = vocab;
  deck.model.gpt.seq_len = seq_len;
  deck.data.type = DataKind::Markov;
  deck.data.markov_order = order;
  deck.data.concentration = concentration;
  deck.data.seed = seed;
  deck.training.batch_size = 8;
  deck.pipeline.micro_batches = 2;
  return deck;
}

// Full windows x_0..x_T of samples first..first+count-1: the inputs plus the
// last target. Checks on the way that targets are the inputs shifted by one.
std::vector<std::vector<int32_t>> full_windows(const Dataset& data, int64_t first, int64_t count,
                                               int64_t seq_len) {
  Tensor x = data.inputs(first, count), y = data.targets(first, count);
  EXPECT_EQ(x.shape(), (Shape{count, seq_len}));
  EXPECT_EQ(y.shape(), (Shape{count, seq_len}));
  EXPECT_EQ(x.dtype(), DType::I32);
  EXPECT_EQ(y.dtype(), DType::I32);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(count));
  for (int64_t r = 0; r < count; ++r) {
    const int32_t* xr = x.i32() + r * seq_len;
    const int32_t* yr = y.i32() + r * seq_len;
    for (int64_t t = 0; t + 1 < seq_len; ++t) EXPECT_EQ(yr[t], xr[t + 1]) << "sample " << first + r;
    out[r].assign(xr, xr + seq_len);
    out[r].push_back(yr[seq_len - 1]);
  }
  return out;
}

// Empirical H(next | context) in nats from (context, next) counts: plug-in
// estimate plus the Miller-Madow correction sum_c (m_c - 1) / 2N, m_c the
// number of distinct next tokens seen after context c. The plug-in estimate
// alone is biased low by about (#contexts (V - 1)) / 2N.
class ConditionalEntropy {
 public:
  void add(int64_t context, int32_t next) {
    ++counts_[context][next];
    ++total_;
  }
  int64_t total() const { return total_; }
  double estimate() const {
    double h = 0.0, correction = 0.0;
    const double n = static_cast<double>(total_);
    for (const auto& [context, row] : counts_) {
      int64_t nc = 0;
      for (const auto& kv : row) nc += kv.second;
      for (const auto& kv : row) {
        const double p = static_cast<double>(kv.second) / static_cast<double>(nc);
        h -= static_cast<double>(kv.second) / n * std::log(p);
      }
      correction += static_cast<double>(row.size() - 1) / (2.0 * n);
    }
    return h + correction;
  }

 private:
  std::map<int64_t, std::map<int32_t, int64_t>> counts_;
  int64_t total_ = 0;
};

// Estimates the entropy rate from every position t >= k of `windows` windows
// (context x_{t-k}..x_{t-1}, next x_t). Windows start in the stationary
// distribution, so every such pair is a draw from the stationary chain.
double empirical_rate(const Dataset& data, const Deck& deck, int64_t windows, int64_t& pairs) {
  const int64_t k = deck.data.markov_order, T = deck.model.gpt.seq_len, V = deck.model.gpt.vocab_size;
  ConditionalEntropy h;
  constexpr int64_t kBlock = 512;
  for (int64_t first = 0; first < windows; first += kBlock) {
    for (const auto& w : full_windows(data, first, std::min(kBlock, windows - first), T)) {
      for (int64_t t = k; t <= T; ++t) {
        int64_t context = 0;
        for (int64_t j = t - k; j < t; ++j) context = context * V + w[j];
        h.add(context, w[t]);
      }
    }
  }
  pairs = h.total();
  return h.estimate();
}

// Concentration 0.5 gives rows of moderate entropy; 0.1 and 0.2 give peaked
// rows and a stationary distribution far from uniform, so weighting the row
// entropies by anything but pi is off by 0.02..0.3 nats. With ~200k pairs the
// estimate is within ~0.005 here; the remaining plug-in bias after the
// Miller-Madow correction is O(1/N^2).
TEST(Markov, EntropyRateMatchesEmpiricalEstimate) {
  struct Case { int64_t vocab, order, seq_len, windows; double concentration; };
  for (const Case c : {Case{8, 1, 32, 6500, 0.5}, Case{8, 2, 32, 6700, 0.5}, Case{8, 3, 64, 6500, 0.5},
                       Case{8, 1, 32, 6500, 0.1}, Case{8, 2, 32, 6700, 0.2}}) {
    Deck deck = markov_deck(c.vocab, c.order, c.seq_len, c.concentration);
    auto data = dataset_of(deck, Split::Train);
    const LossFloor floor = data->loss_floor().value();
    int64_t pairs = 0;
    const double h = empirical_rate(*data, deck, c.windows, pairs);
    std::printf("  V=%lld order %lld concentration %.2f: %lld pairs, entropy rate %.5f, "
                "empirical %.5f (diff %+.5f)\n",
                static_cast<long long>(c.vocab), static_cast<long long>(c.order), c.concentration,
                static_cast<long long>(pairs), floor.entropy_rate, h, h - floor.entropy_rate);
    EXPECT_GE(pairs, 200000);
    EXPECT_GT(floor.entropy_rate, 0.1);
    EXPECT_LT(floor.entropy_rate, std::log(static_cast<double>(c.vocab)));
    EXPECT_NEAR(h, floor.entropy_rate, 0.02) << "V " << c.vocab << " order " << c.order;
  }
}

// The window floor is the mean over positions of H(x_{t+1} | x_0..x_t); for
// order 2 that is (H(x_1 | x_0) + (T - 1) H) / T. Estimate H(x_1 | x_0) from
// the first position of many short windows and compare.
TEST(Markov, WindowFloorMatchesEmpiricalFirstPositionEntropy) {
  const int64_t T = 4;
  Deck deck = markov_deck(8, 2, T, 0.5);
  auto data = dataset_of(deck, Split::Train);
  const LossFloor floor = data->loss_floor().value();
  ConditionalEntropy first_position;
  const int64_t windows = 200000;
  Tensor y = data->targets(0, windows), x = data->inputs(0, windows);
  for (int64_t r = 0; r < windows; ++r) first_position.add(x.i32()[r * T], y.i32()[r * T]);
  const double h1 = first_position.estimate();
  const double implied = floor.window * T - (T - 1) * floor.entropy_rate;  // H(x_1 | x_0)
  std::printf("  H(x1|x0) implied by the window floor %.5f, empirical %.5f\n", implied, h1);
  EXPECT_NEAR(h1, implied, 0.02);
  EXPECT_GT(implied, floor.entropy_rate + 0.01);  // one token of context helps less than two
}

TEST(Markov, WindowFloorIsAtLeastTheRateAndEqualForOrderOne) {
  for (int64_t order : {1, 2, 3}) {
    for (int64_t T : {1, 2, 3, 8, 64}) {
      Deck deck = markov_deck(6, order, T, 0.3);
      const LossFloor floor = dataset_of(deck, Split::Train)->loss_floor().value();
      if (order == 1) {
        EXPECT_NEAR(floor.window, floor.entropy_rate, 1e-9) << "T " << T;
      } else if (T + 1 > order) {
        EXPECT_GT(floor.window, floor.entropy_rate) << "order " << order << " T " << T;
      } else {
        EXPECT_GE(floor.window, floor.entropy_rate) << "order " << order << " T " << T;
      }
    }
  }
  // Longer windows dilute the short-context start: the floor falls towards the rate.
  const double f8 = dataset_of(markov_deck(6, 2, 8, 0.3), Split::Train)->loss_floor()->window;
  const double f64 = dataset_of(markov_deck(6, 2, 64, 0.3), Split::Train)->loss_floor()->window;
  const double rate = dataset_of(markov_deck(6, 2, 64, 0.3), Split::Train)->loss_floor()->entropy_rate;
  EXPECT_GT(f8, f64);
  EXPECT_GT(f64, rate);
}

TEST(Markov, TargetsAreInputsShiftedByOneAndIdsInRange) {
  for (int64_t order : {1, 2, 4}) {
    const int64_t V = 5, T = 16;
    Deck deck = markov_deck(V, order, T, 0.5);
    for (Split split : {Split::Train, Split::Eval}) {
      auto data = dataset_of(deck, split);
      std::set<int32_t> seen;
      for (const auto& w : full_windows(*data, 1000, 300, T)) {
        for (int32_t tok : w) {
          ASSERT_GE(tok, 0);
          ASSERT_LT(tok, V);
          seen.insert(tok);
        }
      }
      EXPECT_EQ(seen.size(), static_cast<size_t>(V)) << "order " << order;
    }
  }
}

TEST(Markov, SameSampleSameWindowWhoeverAsks) {
  const int64_t T = 12;
  Deck deck = markov_deck(8, 2, T, 0.5);
  auto a = dataset_of(deck, Split::Train);
  auto b = make_markov_dataset(data_set_config_for(deck), Split::Train);  // a second, independent object
  const int64_t first = 12345, count = 40;
  Tensor xa = a->inputs(first, count), ya = a->targets(first, count);
  Tensor xb = b->inputs(first, count), yb = b->targets(first, count);
  // Repeated call on the same object.
  Tensor xa2 = a->inputs(first, count);
  for (int64_t i = 0; i < count * T; ++i) {
    ASSERT_EQ(xa.i32()[i], xb.i32()[i]);
    ASSERT_EQ(ya.i32()[i], yb.i32()[i]);
    ASSERT_EQ(xa.i32()[i], xa2.i32()[i]);
  }
  // Asked one at a time, in reverse order, or as part of a different slice
  // (as another stage or micro-batch split would): the same rows.
  for (int64_t r = count - 1; r >= 0; --r) {
    Tensor x1 = b->inputs(first + r, 1), y1 = b->targets(first + r, 1);
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(x1.i32()[t], xa.i32()[r * T + t]) << "row " << r;
      ASSERT_EQ(y1.i32()[t], ya.i32()[r * T + t]) << "row " << r;
    }
  }
  Tensor wide = a->inputs(first - 7, count + 14);
  for (int64_t i = 0; i < count * T; ++i) ASSERT_EQ(wide.i32()[7 * T + i], xa.i32()[i]);
  // Distinct samples are distinct windows (8^12 possible).
  int same = 0;
  for (int64_t r = 1; r < count; ++r)
    same += std::equal(xa.i32() + r * T, xa.i32() + (r + 1) * T, xa.i32() + (r - 1) * T);
  EXPECT_EQ(same, 0);
}

int differing_rows(const Tensor& a, const Tensor& b) {
  const int64_t T = a.cols();
  int n = 0;
  for (int64_t r = 0; r < a.rows(); ++r)
    n += !std::equal(a.i32() + r * T, a.i32() + (r + 1) * T, b.i32() + r * T);
  return n;
}

TEST(Markov, TrainAndEvalSplitsDifferButShareTheChain) {
  Deck deck = markov_deck(8, 2, 16, 0.5);
  auto train = dataset_of(deck, Split::Train), eval = dataset_of(deck, Split::Eval);
  Tensor xt = train->inputs(0, 64), xe = eval->inputs(0, 64);
  EXPECT_EQ(differing_rows(xt, xe), 64);
  EXPECT_EQ(train->loss_floor()->entropy_rate, eval->loss_floor()->entropy_rate);
  EXPECT_EQ(train->loss_floor()->window, eval->loss_floor()->window);
  // Eval windows come from the same chain: same empirical entropy rate.
  int64_t pairs = 0;
  const double h = empirical_rate(*eval, deck, 14000, pairs);
  EXPECT_NEAR(h, eval->loss_floor()->entropy_rate, 0.02);
}

TEST(Markov, DataSeedChangesChainAndWindows) {
  Deck a = markov_deck(8, 2, 16, 0.5, 42), b = markov_deck(8, 2, 16, 0.5, 43);
  auto da = dataset_of(a, Split::Train), db = dataset_of(b, Split::Train);
  EXPECT_NE(da->loss_floor()->entropy_rate, db->loss_floor()->entropy_rate);
  EXPECT_EQ(differing_rows(da->inputs(0, 64), db->inputs(0, 64)), 64);
  // Small concentration: peaked rows, low entropy; large: near uniform.
  const double low = dataset_of(markov_deck(8, 2, 16, 0.05), Split::Train)->loss_floor()->entropy_rate;
  const double high = dataset_of(markov_deck(8, 2, 16, 50.0), Split::Train)->loss_floor()->entropy_rate;
  EXPECT_LT(low, 1.0);
  EXPECT_GT(high, std::log(8.0) - 0.05);
}

// ---- HDF5 token files --------------------------------------------------------

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "pt_test_data_XXXXXX").string();
    path_ = mkdtemp(tmpl.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Writes `values` (converted by HDF5 from `mem_type`) as dataset `name` of
// file type `file_type` and shape `dims`.
template <typename T>
void write_h5(const std::string& path, const std::string& name, hid_t file_type, hid_t mem_type,
              const std::vector<T>& values, std::vector<hsize_t> dims = {}) {
  if (dims.empty()) dims = {static_cast<hsize_t>(values.size())};
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0) << path;
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dset = H5Dcreate2(file, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(dset, 0);
  if (!values.empty()) {
    ASSERT_GE(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
  }
  H5Dclose(dset);
  H5Sclose(space);
  H5Fclose(file);
}

void write_i32(const std::string& path, const std::vector<int32_t>& v, const std::string& name = "tokens") {
  write_h5(path, name, H5T_STD_I32LE, H5T_NATIVE_INT32, v);
}

std::vector<int32_t> iota_tokens(int64_t n, int64_t vocab, int32_t start = 0) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>((start + i) % vocab);
  return v;
}

Deck hdf5_deck(const std::string& path, int64_t vocab, int64_t seq_len, int64_t batch = 4) {
  Deck deck;
  deck.model.type = "gpt";
  deck.model.gpt.vocab_size = vocab;
  deck.model.gpt.seq_len = seq_len;
  deck.data.type = DataKind::Hdf5;
  deck.data.path = path;
  deck.training.batch_size = batch;
  deck.pipeline.micro_batches = 2;
  return deck;
}

// Window w of a token file is tokens w*T .. w*T + T: inputs are the first T,
// targets the last T. Checks samples first..first+count-1 against `expected`
// windows and returns the window index of each sample (found by value).
void expect_windows(const Dataset& data, const std::vector<int32_t>& tokens, int64_t T,
                    int64_t first, int64_t count, const std::function<int64_t(int64_t)>& window_of) {
  Tensor x = data.inputs(first, count), y = data.targets(first, count);
  ASSERT_EQ(x.shape(), (Shape{count, T}));
  ASSERT_EQ(y.shape(), (Shape{count, T}));
  for (int64_t r = 0; r < count; ++r) {
    const int64_t w = window_of(first + r);
    for (int64_t t = 0; t < T; ++t) {
      ASSERT_EQ(x.i32()[r * T + t], tokens[w * T + t]) << "sample " << first + r << " t " << t;
      ASSERT_EQ(y.i32()[r * T + t], tokens[w * T + t + 1]) << "sample " << first + r << " t " << t;
    }
  }
}

TEST(Hdf5Data, UnshuffledSampleIsWindowIModW) {
  TempDir dir;
  const int64_t T = 4, N = 43, W = (N - 1) / T;  // 10 windows, 2 tokens left over
  const std::string path = dir.file("train.h5");
  const auto tokens = iota_tokens(N, 256);
  write_i32(path, tokens);
  Deck deck = hdf5_deck(path, 256, T);
  ASSERT_NO_THROW(check_token_file(data_set_config_for(deck), path, "data.path"));
  auto data = dataset_of(deck, Split::Train);
  EXPECT_FALSE(data->loss_floor().has_value());
  expect_windows(*data, tokens, T, 0, 3 * W + 3, [&](int64_t i) { return i % W; });
  // Explicit values: sample 0 is 0 1 2 3 -> 1 2 3 4, sample 9 (the last window) 36..39 -> 37..40,
  // sample 10 wraps to window 0.
  Tensor x = data->inputs(9, 2), y = data->targets(9, 2);
  EXPECT_EQ(std::vector<int32_t>(x.i32(), x.i32() + 8), (std::vector<int32_t>{36, 37, 38, 39, 0, 1, 2, 3}));
  EXPECT_EQ(std::vector<int32_t>(y.i32(), y.i32() + 8), (std::vector<int32_t>{37, 38, 39, 40, 1, 2, 3, 4}));
}

TEST(Hdf5Data, NarrowIntegerTypesAreConverted) {
  TempDir dir;
  const int64_t T = 4, N = 401, W = (N - 1) / T;  // 100 windows; values wrap at 256
  const std::string path = dir.file("u8.h5");
  std::vector<uint8_t> bytes(static_cast<size_t>(N));
  for (int64_t i = 0; i < N; ++i) bytes[i] = static_cast<uint8_t>(i % 256);
  write_h5(path, "tokens", H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes);
  Deck deck = hdf5_deck(path, 256, T);
  ASSERT_NO_THROW(check_token_file(data_set_config_for(deck), path, "data.path"));
  auto data = dataset_of(deck, Split::Train);
  expect_windows(*data, iota_tokens(N, 256), T, 0, W + 5, [&](int64_t i) { return i % W; });
  Tensor x = data->inputs(63, 2);  // window 63: tokens 252..255, window 64: 256.. = 0..3
  EXPECT_EQ(std::vector<int32_t>(x.i32(), x.i32() + 8), (std::vector<int32_t>{252, 253, 254, 255, 0, 1, 2, 3}));

  // Big-endian int16 and int64 files read the same.
  std::vector<int16_t> shorts(bytes.begin(), bytes.end());
  std::vector<int64_t> longs(bytes.begin(), bytes.end());
  write_h5(dir.file("i16be.h5"), "tokens", H5T_STD_I16BE, H5T_NATIVE_INT16, shorts);
  write_h5(dir.file("i64.h5"), "tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, longs);
  for (const char* name : {"i16be.h5", "i64.h5"}) {
    Deck d = hdf5_deck(dir.file(name), 256, T);
    ASSERT_NO_THROW(check_token_file(data_set_config_for(d), d.data.path, "data.path")) << name;
    expect_windows(*dataset_of(d, Split::Train), iota_tokens(N, 256), T, 0, W,
                   [&](int64_t i) { return i % W; });
  }
}

// Reads the window index of each sample of `epoch` (tokens are 0..N-1, so a
// window's first input token / T is its index) and checks the values.
std::vector<int64_t> epoch_order(const Dataset& data, const std::vector<int32_t>& tokens,
                                 int64_t T, int64_t W, int64_t epoch) {
  Tensor x = data.inputs(epoch * W, W);
  std::vector<int64_t> order(static_cast<size_t>(W));
  for (int64_t r = 0; r < W; ++r) order[r] = x.i32()[r * T] / T;
  expect_windows(data, tokens, T, epoch * W, W, [&](int64_t i) { return order[i - epoch * W]; });
  return order;
}

TEST(Hdf5Data, ShuffleIsASeededPermutationPerEpoch) {
  TempDir dir;
  const int64_t T = 4, W = 24, N = W * T + 1;
  const std::string path = dir.file("train.h5");
  const auto tokens = iota_tokens(N, 1 << 20);
  write_i32(path, tokens);
  Deck deck = hdf5_deck(path, 1 << 20, T);
  deck.data.shuffle = true;
  deck.data.seed = 7;
  auto data = dataset_of(deck, Split::Train);

  std::vector<int64_t> identity(W);
  for (int64_t w = 0; w < W; ++w) identity[w] = w;
  std::vector<std::vector<int64_t>> orders;
  for (int64_t epoch = 0; epoch < 4; ++epoch) {
    auto order = epoch_order(*data, tokens, T, W, epoch);
    auto sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, identity) << "epoch " << epoch << " is not a permutation of the windows";
    EXPECT_NE(order, identity) << "epoch " << epoch << " not shuffled";
    for (const auto& earlier : orders) EXPECT_NE(order, earlier) << "epoch " << epoch << " repeats";
    orders.push_back(order);
  }
  // Same seed, another object, epochs visited out of order (and a batch that
  // straddles an epoch boundary): the same permutations.
  Deck again = deck;
  auto data2 = dataset_of(again, Split::Train);
  for (int64_t epoch : {3, 0, 2, 0, 1}) EXPECT_EQ(epoch_order(*data2, tokens, T, W, epoch), orders[epoch]);
  Tensor straddle = data2->inputs(2 * W - 3, 6);
  for (int64_t r = 0; r < 6; ++r) {
    const int64_t i = 2 * W - 3 + r;
    EXPECT_EQ(straddle.i32()[r * T] / T, orders[i / W][i % W]) << "sample " << i;
  }
  // Another seed: other permutations.
  Deck other = deck;
  other.data.seed = 8;
  auto data3 = dataset_of(other, Split::Train);
  for (int64_t epoch = 0; epoch < 2; ++epoch) EXPECT_NE(epoch_order(*data3, tokens, T, W, epoch), orders[epoch]);
}

TEST(Hdf5Data, EvalSplitReadsEvalPathUnshuffled) {
  TempDir dir;
  const int64_t T = 4, W = 12, N = W * T + 1;
  const auto train_tokens = iota_tokens(N, 1000), eval_tokens = iota_tokens(N, 1000, 500);
  write_i32(dir.file("train.h5"), train_tokens);
  write_i32(dir.file("eval.h5"), eval_tokens);
  Deck deck = hdf5_deck(dir.file("train.h5"), 1000, T);
  deck.data.eval_path = dir.file("eval.h5");
  deck.data.shuffle = true;  // applies to training only
  auto eval = dataset_of(deck, Split::Eval);
  expect_windows(*eval, eval_tokens, T, 0, 2 * W, [&](int64_t i) { return i % W; });
  auto train = dataset_of(deck, Split::Train);
  EXPECT_LT(train->inputs(0, 1).i32()[0], 500);
}

TEST(Hdf5Data, DatasetNameIsConfigurable) {
  TempDir dir;
  const auto tokens = iota_tokens(41, 256);
  write_i32(dir.file("t.h5"), tokens, "ids");
  Deck deck = hdf5_deck(dir.file("t.h5"), 256, 4);
  deck.data.dataset = "ids";
  ASSERT_NO_THROW(check_token_file(data_set_config_for(deck), deck.data.path, "data.path"));
  expect_windows(*dataset_of(deck, Split::Train), tokens, 4, 0, 10, [](int64_t i) { return i; });
}

// ---- bad token files ---------------------------------------------------------

// Runs fn, expects an InputError and returns its message.
std::string input_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const InputError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected InputError, got another error: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected InputError, nothing thrown";
  return "";
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

std::string check_message(const Deck& deck, const std::string& path) {
  std::string msg = input_error([&] { check_token_file(data_set_config_for(deck), path, "data.path"); });
  std::printf("  %s\n", msg.c_str());
  EXPECT_HAS(msg, "data.path = \"" + path + "\": ");
  return msg;
}

TEST(Hdf5BadData, MissingFile) {
  TempDir dir;
  const std::string path = dir.file("nope.h5");
  Deck deck = hdf5_deck(path, 256, 4);
  EXPECT_HAS(check_message(deck, path), "\": '" + path + "': no such file; expected an HDF5 token file");
  // The data set itself says the same (and names the eval key for the eval split).
  EXPECT_HAS(input_error([&] { dataset_of(deck, Split::Train); }), "data.path = \"" + path + "\"");
  deck.data.eval_path = dir.file("eval_nope.h5");
  EXPECT_HAS(input_error([&] { dataset_of(deck, Split::Eval); }),
             "data.eval_path = \"" + deck.data.eval_path + "\"");
}

TEST(Hdf5BadData, DirectoryIsNotATokenFile) {
  TempDir dir;
  const std::string path = dir.file("tokens.h5");
  std::filesystem::create_directory(path);
  Deck deck = hdf5_deck(path, 256, 4);
  EXPECT_HAS(check_message(deck, path), "\": '" + path + "': a directory, not a regular file; expected an HDF5 token file");
  EXPECT_HAS(input_error([&] { dataset_of(deck, Split::Train); }), "': a directory, not a regular file");
}

// The runtime opens its data through the DatasetOpener the application gives
// it (io's make_dataset). Given none, a file type is an internal error naming
// the missing opener, not a crash, and generated data still opens.
TEST(DatasetOpener, FileTypeWithoutOpenerIsAnInternalError) {
  TempDir dir;
  const DataSetConfig files = data_set_config_for(hdf5_deck(dir.file("t.h5"), 256, 4));
  std::string msg;
  try {
    open_dataset(nullptr, files, Split::Train);
  } catch (const InputError& e) {
    ADD_FAILURE() << "an input error: " << e.what();
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_HAS(msg, "data.type = \"hdf5\" reads files, and no DatasetOpener was given");
  EXPECT_NE(open_dataset(nullptr, data_set_config_for(markov_deck(16, 1, 4, 0.5)), Split::Train), nullptr);
  const DatasetOpener opener = make_dataset;  // what the application gives
  EXPECT_HAS(input_error([&] { open_dataset(opener, files, Split::Train); }), "': no such file");
}

TEST(Hdf5BadData, NotAnHdf5File) {
  TempDir dir;
  const std::string path = dir.file("tokens.txt");
  std::ofstream(path) << "these are not tokens\n";
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path), "cannot open as an HDF5 file");
}

TEST(Hdf5BadData, MissingDataset) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  write_i32(path, iota_tokens(41, 256), "other");
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path), "has no dataset 'tokens'");
}

TEST(Hdf5BadData, TwoDimensionalDataset) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  write_h5(path, "tokens", H5T_STD_I32LE, H5T_NATIVE_INT32, iota_tokens(80, 256), {40, 2});
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path),
             "dataset 'tokens' must be a 1-D integer array of token ids");
}

TEST(Hdf5BadData, FloatDataset) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  std::vector<float> v(41);
  for (int i = 0; i < 41; ++i) v[i] = static_cast<float>(i);
  write_h5(path, "tokens", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, v);
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path),
             "dataset 'tokens' must be a 1-D integer array of token ids");
}

TEST(Hdf5BadData, TokenOutOfRange) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  auto tokens = iota_tokens(41, 200);
  tokens[17] = 200;
  write_i32(path, tokens);
  EXPECT_HAS(check_message(hdf5_deck(path, 200, 4), path),
             "token 17 is 200, outside 0..model.vocab_size-1 = 0..199");
  tokens[17] = 3;
  tokens[30] = -1;
  write_i32(path, tokens);
  EXPECT_HAS(check_message(hdf5_deck(path, 200, 4), path), "token 30 is -1");
}

// 64-bit ids beyond the int32 range are rejected too (HDF5 clips them to
// INT32_MAX / INT32_MIN when converting, so the message shows the clipped value).
TEST(Hdf5BadData, Int64TokenBeyondInt32Range) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  std::vector<int64_t> v(41, 1);
  v[3] = (int64_t{1} << 32) + 3;
  write_h5(path, "tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, v);
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path), "token 3 is ");
  v[3] = 1;
  v[7] = -(int64_t{1} << 40);
  write_h5(path, "tokens", H5T_STD_I64LE, H5T_NATIVE_INT64, v);
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path), "token 7 is -");
}

// Unsigned 64-bit ids above INT64_MAX are reported as stored, not clipped.
TEST(Hdf5BadData, Uint64TokenAboveInt64MaxShowsItsValue) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  std::vector<uint64_t> v(41, 2);
  v[9] = 18446744073709551615ull;
  write_h5(path, "tokens", H5T_STD_U64LE, H5T_NATIVE_UINT64, v);
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path),
             "token 9 is 18446744073709551615, outside 0..model.vocab_size-1 = 0..255");
  v[9] = 2;
  v[12] = 9223372036854775808ull;
  write_h5(path, "tokens", H5T_STD_U64LE, H5T_NATIVE_UINT64, v);
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4), path), "token 12 is 9223372036854775808,");
  v[12] = 2;
  write_h5(path, "tokens", H5T_STD_U64LE, H5T_NATIVE_UINT64, v);
  EXPECT_NO_THROW(check_token_file(data_set_config_for(hdf5_deck(path, 256, 4)), path, "data.path"));
}

TEST(Hdf5BadData, TokenOutOfRangeBeyondTheFirstChunk) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  const int64_t n = (int64_t{1} << 20) + 1000, bad = (int64_t{1} << 20) + 123;
  std::vector<uint8_t> bytes(static_cast<size_t>(n), 5);
  bytes[bad] = 99;
  write_h5(path, "tokens", H5T_STD_U8LE, H5T_NATIVE_UINT8, bytes);
  EXPECT_HAS(check_message(hdf5_deck(path, 64, 16), path),
             "token " + std::to_string(bad) + " is 99, outside 0..model.vocab_size-1 = 0..63");
}

TEST(Hdf5BadData, TooShortForOneBatch) {
  TempDir dir;
  const std::string path = dir.file("t.h5");
  write_i32(path, iota_tokens(20, 256));  // 19 / 4 = 4 windows
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4, 8), path),
             "too short: 20 tokens make 4 windows of model.seq_len + 1 = 5 tokens, "
             "but one batch needs training.batch_size = 8");
  write_i32(path, {});
  EXPECT_HAS(check_message(hdf5_deck(path, 256, 4, 8), path), "too short: 0 tokens make 0 windows");
  // Exactly one batch of windows is enough.
  write_i32(path, iota_tokens(33, 256));
  EXPECT_NO_THROW(check_token_file(data_set_config_for(hdf5_deck(path, 256, 4, 8)), path, "data.path"));
}


// ---- shards: several files read as one sequence ----------------------------

TEST(Sha256, KnownAnswers) {  // FIPS 180-4 examples
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  Sha256 pieces;  // fed in uneven pieces: the same digest
  const std::string text(1000, 'q');
  for (size_t at = 0, n = 1; at < text.size(); at += n, n = n * 3 % 97 + 1)
    pieces.update(text.data() + at, std::min(n, text.size() - at));
  EXPECT_EQ(pieces.hex_digest(), sha256_hex(text));
}

// Writes tokens[begin..end) as a uint16 file.
void write_u16(const std::string& path, const std::vector<int32_t>& tokens, size_t begin, size_t end) {
  std::vector<uint16_t> v(tokens.begin() + begin, tokens.begin() + end);
  write_h5(path, "tokens", H5T_STD_U16LE, H5T_NATIVE_UINT16, v);
}

// Splits `tokens` into files of the given sizes (an empty one included) named
// by `names`; returns their paths in order.
std::vector<std::string> write_shards(const TempDir& dir, const std::vector<int32_t>& tokens,
                                      const std::vector<size_t>& sizes, const std::vector<std::string>& names) {
  std::vector<std::string> paths;
  size_t at = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    paths.push_back(dir.file(names[i]));
    write_u16(paths.back(), tokens, at, at + sizes[i]);
    at += sizes[i];
  }
  EXPECT_EQ(at, tokens.size());
  return paths;
}

void expect_same_samples(const Dataset& a, const Dataset& b, int64_t samples, const std::string& label) {
  for (int64_t first = 0; first < samples; first += 7) {
    Tensor xa = a.inputs(first, 7), xb = b.inputs(first, 7), ya = a.targets(first, 7), yb = b.targets(first, 7);
    ASSERT_EQ(xa.numel(), xb.numel());
    for (int64_t i = 0; i < xa.numel(); ++i) {
      ASSERT_EQ(xa.i32()[i], xb.i32()[i]) << label << ": inputs of sample " << first + i / a.inputs(0, 1).numel();
      ASSERT_EQ(ya.i32()[i], yb.i32()[i]) << label << ": targets of sample " << first + i / a.inputs(0, 1).numel();
    }
  }
}

// Windows cross file boundaries: the shards give exactly the samples of one
// file with all their tokens, in order and shuffled, listed or by pattern.
TEST(Hdf5Shards, ReadAsOneSequence) {
  TempDir dir;
  const int64_t T = 5, N = 123;  // (123 - 1) / 5 = 24 windows, 2 tokens left over
  const auto tokens = iota_tokens(N, 1000, 17);
  write_u16(dir.file("all.h5"), tokens, 0, tokens.size());
  // Sizes that cut windows anywhere: mid-window, at a window's shared last
  // token, an empty file, a file shorter than one window.
  const auto shards = write_shards(dir, tokens, {7, 0, 3, 40, 1, 72},
                                   {"s_0.h5", "s_1.h5", "s_2.h5", "s_3.h5", "s_4.h5", "s_5.h5"});
  for (bool shuffle : {false, true}) {
    Deck one = hdf5_deck(dir.file("all.h5"), 1000, T);
    one.data.shuffle = shuffle;
    Deck listed = one;
    listed.data.path = "";
    listed.data.path_list = shards;
    Deck pattern = one;
    pattern.data.path = dir.file("s_?.h5");
    auto whole = dataset_of(one, Split::Train);
    const std::string label = shuffle ? "shuffled" : "in order";
    expect_same_samples(*dataset_of(listed, Split::Train), *whole, 3 * 24 + 5, "list, " + label);
    expect_same_samples(*dataset_of(pattern, Split::Train), *whole, 3 * 24 + 5, "pattern, " + label);
    ASSERT_NO_THROW(check_token_data(data_set_config_for(listed)));
    ASSERT_NO_THROW(check_token_data(data_set_config_for(pattern)));
  }
  // Explicit values: window 1 (tokens 5..10) spans s_0 (0..6) and s_2 (7..9) and s_3.
  Deck listed = hdf5_deck("", 1000, T);
  listed.data.path_list = shards;
  Tensor x = dataset_of(listed, Split::Train)->inputs(1, 1), y = dataset_of(listed, Split::Train)->targets(1, 1);
  EXPECT_EQ(std::vector<int32_t>(x.i32(), x.i32() + T), (std::vector<int32_t>{22, 23, 24, 25, 26}));
  EXPECT_EQ(std::vector<int32_t>(y.i32(), y.i32() + T), (std::vector<int32_t>{23, 24, 25, 26, 27}));
}

// A pattern's matches are read in byte order of their paths; list entries in
// list order, each pattern expanded in place.
TEST(Hdf5Shards, PatternOrderIsByteOrderAndListsKeepTheirOrder) {
  TempDir dir;
  const int64_t T = 4;
  const auto tokens = iota_tokens(4 * 10 + 1, 1000);
  // Byte order: "B.h5" < "a10.h5" < "a9.h5" (not numeric, not case-folded).
  const auto paths = write_shards(dir, tokens, {10, 10, 21}, {"B.h5", "a10.h5", "a9.h5"});
  Deck whole = hdf5_deck(dir.file("whole.h5"), 1000, T);
  write_u16(dir.file("whole.h5"), tokens, 0, tokens.size());
  Deck pattern = hdf5_deck(dir.file("[aB]*.h5"), 1000, T);
  const auto files = token_files(data_set_config_for(pattern), Split::Train);
  ASSERT_EQ(files.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(files[i].path, paths[i]);
  EXPECT_EQ(files[1].at, "deck: data.path = \"" + dir.file("[aB]*.h5") + "\" (match \"" + paths[1] + "\")");
  expect_same_samples(*dataset_of(pattern, Split::Train), *dataset_of(whole, Split::Train), 10, "pattern");
  // A list: its own order, patterns expanded where they stand.
  Deck listed = hdf5_deck("", 1000, T);
  listed.data.path_list = {paths[2], dir.file("a1*.h5"), paths[0]};
  const auto order = token_files(data_set_config_for(listed), Split::Train);
  ASSERT_EQ(order.size(), 3u);
  EXPECT_EQ(order[0].path, paths[2]);
  EXPECT_EQ(order[1].path, paths[1]);
  EXPECT_EQ(order[2].path, paths[0]);
  EXPECT_EQ(order[2].at, "deck: data.path entry 2 = \"" + paths[0] + "\"");
}

// Writes the attributes a tokenizer run leaves on a token file.
void tag_tokenizer(const std::string& path, const std::string& kind, const std::string& json, int64_t vocab,
                   const std::string& sha = "") {
  hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  hid_t dset = H5Dopen2(file, "tokens", H5P_DEFAULT);
  for (const char* name : {"tokenizer", "tokenizer_sha256", "vocab_size"})
    if (H5Aexists(dset, name) > 0) H5Adelete(dset, name);
  if (H5Lexists(file, "tokenizer_json", H5P_DEFAULT) > 0) H5Ldelete(file, "tokenizer_json", H5P_DEFAULT);
  hid_t scalar = H5Screate(H5S_SCALAR);
  auto put_string = [&](const char* name, const std::string& value) {
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    hid_t attr = H5Acreate2(dset, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const char* text = value.c_str();
    H5Awrite(attr, type, &text);
    H5Aclose(attr);
    H5Tclose(type);
  };
  put_string("tokenizer", kind);
  if (!json.empty()) put_string("tokenizer_sha256", sha.empty() ? sha256_hex(json) : sha);
  hid_t attr = H5Acreate2(dset, "vocab_size", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT64, &vocab);
  H5Aclose(attr);
  if (!json.empty()) {
    hsize_t n = json.size();
    hid_t space = H5Screate_simple(1, &n, nullptr);
    hid_t j = H5Dcreate2(file, "tokenizer_json", H5T_STD_U8LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(j, H5T_NATIVE_UINT8, H5S_ALL, H5S_ALL, H5P_DEFAULT, json.data());
    H5Dclose(j);
    H5Sclose(space);
  }
  H5Sclose(scalar);
  H5Dclose(dset);
  H5Fclose(file);
}

std::string data_error(const Deck& deck) {
  std::string msg = input_error([&] { check_token_data(data_set_config_for(deck)); });
  std::printf("  %s\n", msg.c_str());
  return msg;
}

class Hdf5BadShards : public ::testing::Test {
 protected:
  void SetUp() override {
    tokens = iota_tokens(4 * 20 + 1, 300);
    paths = write_shards(dir, tokens, {30, 30, 21}, {"t_0.h5", "t_1.h5", "t_2.h5"});
    for (const auto& p : paths) tag_tokenizer(p, "bpe", json, 300);
    deck = hdf5_deck("", 300, 4);
    deck.data.path_list = paths;
  }
  TempDir dir;
  std::vector<int32_t> tokens;
  std::vector<std::string> paths;
  const std::string json = "{\"model\": {\"type\": \"BPE\"}}";
  Deck deck;
};

TEST_F(Hdf5BadShards, GoodShardsPassWithAndWithoutTheDeckTokenizer) {
  EXPECT_NO_THROW(check_token_data(data_set_config_for(deck)));
  std::ofstream(dir.file("tokenizer.json"), std::ios::binary) << json;
  deck.data.tokenizer = dir.file("tokenizer.json");
  EXPECT_NO_THROW(check_token_data(data_set_config_for(deck)));
  deck.data.eval_path = paths[2];  // eval files carry the same tokenizer
  EXPECT_NO_THROW(check_token_data(data_set_config_for(deck)));
}

TEST_F(Hdf5BadShards, MissingShard) {
  std::filesystem::remove(paths[1]);
  const std::string missing = "data.path entry 1 = \"" + paths[1] + "\": '" + paths[1] + "': no such file; expected an HDF5 token file";
  EXPECT_EQ(data_error(deck), "deck: " + missing);
  EXPECT_HAS(input_error([&] { dataset_of(deck, Split::Train); }), missing);
}

TEST_F(Hdf5BadShards, PatternMatchingNothingAndEmptyList) {
  deck.data.path_list = {paths[0], dir.file("nope_*.h5")};
  EXPECT_EQ(data_error(deck), "deck: data.path entry 1 = \"" + dir.file("nope_*.h5") + "\": matches no file");
  deck.data.path_list.clear();
  deck.data.path = dir.file("nope_*.h5");
  EXPECT_EQ(data_error(deck), "deck: data.path = \"" + dir.file("nope_*.h5") + "\": matches no file");
  deck.data.path = "";
  EXPECT_HAS(data_error(deck), "deck: data.path: names no token file");
}

TEST_F(Hdf5BadShards, MixedIntegerTypes) {
  std::vector<int32_t> part(tokens.begin() + 30, tokens.begin() + 60);
  write_i32(paths[1], part);
  EXPECT_HAS(data_error(deck), "data.path entry 1 = \"" + paths[1] + "\": holds int32 token ids, but deck: "
                               "data.path entry 0 = \"" + paths[0] + "\" holds uint16");
}

TEST_F(Hdf5BadShards, MixedTokenizers) {
  tag_tokenizer(paths[2], "bpe", json + " ", 300);  // another tokenizer.json
  const std::string msg = data_error(deck);
  EXPECT_HAS(msg, "data.path entry 2 = \"" + paths[2] + "\": was tokenized with the tokenizer of SHA-256 " +
                      sha256_hex(json + " ").substr(0, 16) + "..., but deck: data.path entry 0 = \"" + paths[0] +
                      "\" with the tokenizer of SHA-256 " + sha256_hex(json).substr(0, 16));
  EXPECT_HAS(msg, "all token files of a run must come from one tokenizer");
  // Byte files and files with no tokenizer recorded differ from it too.
  write_u16(paths[2], tokens, 60, 81);
  EXPECT_HAS(data_error(deck), "was tokenized with no tokenizer recorded (no tokenizer attribute)");
  tag_tokenizer(paths[2], "bytes", "", 256);
  EXPECT_HAS(data_error(deck), "was tokenized with the byte tokenizer (tokenizer = \"bytes\")");
}

TEST_F(Hdf5BadShards, EvalFilesOfAnotherTokenizer) {
  write_u16(dir.file("eval.h5"), tokens, 0, 41);
  tag_tokenizer(dir.file("eval.h5"), "bytes", "", 256);
  deck.data.eval_path = dir.file("eval.h5");
  EXPECT_HAS(data_error(deck), "deck: data.eval_path = \"" + dir.file("eval.h5") +
                                   "\": was tokenized with the byte tokenizer");
}

TEST_F(Hdf5BadShards, TokenizerDiffersFromTheDecks) {
  std::ofstream(dir.file("other.json"), std::ios::binary) << "{}";
  deck.data.tokenizer = dir.file("other.json");
  deck.key_origin["data.tokenizer"] = "d.toml:9";
  EXPECT_HAS(data_error(deck), "deck: data.path entry 0 = \"" + paths[0] + "\": was tokenized with the tokenizer of SHA-256 " +
                                   sha256_hex(json).substr(0, 16) + "..., but d.toml:9: data.tokenizer = \"" +
                                   dir.file("other.json") + "\" is the tokenizer of SHA-256 " +
                                   sha256_hex("{}").substr(0, 16));
  deck.data.tokenizer = "bytes";
  EXPECT_HAS(data_error(deck), "but d.toml:9: data.tokenizer = \"bytes\" is the byte tokenizer");
  deck.data.tokenizer = dir.file("missing.json");
  EXPECT_HAS(data_error(deck), "d.toml:9: data.tokenizer = \"" + dir.file("missing.json") + "\": '" +
                                   dir.file("missing.json") + "': no such file; expected a tokenizer.json file");
}

TEST_F(Hdf5BadShards, VocabularyLargerThanTheModel) {
  for (const auto& p : paths) tag_tokenizer(p, "bpe", json, 4096);
  EXPECT_EQ(data_error(deck), "deck: data.path entry 0 = \"" + paths[0] +
                                  "\": its tokenizer has 4096 tokens (its vocab_size attribute), more than "
                                  "model.vocab_size = 300: set model.vocab_size to at least 4096");
  // An id beyond the model's vocabulary says so, with the tokenizer's size.
  deck.model.gpt.vocab_size = 20;
  EXPECT_EQ(data_error(deck), "deck: data.path entry 0 = \"" + paths[0] +
                                  "\": token 20 is 20, outside 0..model.vocab_size-1 = 0..19; the file's tokenizer "
                                  "has 4096 tokens (its vocab_size attribute): set model.vocab_size to at least that");
}

TEST_F(Hdf5BadShards, DamagedStoredTokenizer) {
  tag_tokenizer(paths[1], "bpe", json, 300, sha256_hex("something else"));
  EXPECT_HAS(data_error(deck), "data.path entry 1 = \"" + paths[1] + "\": its stored tokenizer_json has SHA-256 " +
                                   sha256_hex(json).substr(0, 16) + "..., not that of its tokenizer_sha256 attribute");
}

TEST_F(Hdf5BadShards, NewerFormatVersion) {
  auto set_format = [](const std::string& path, int64_t version) {
    hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t scalar = H5Screate(H5S_SCALAR);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, 16);
    hid_t attr = H5Acreate2(file, "format", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    const std::string text = "pipetrain-tokens";  // 16 characters: fixed length, no terminator
    H5Awrite(attr, type, text.data());
    H5Aclose(attr);
    attr = H5Acreate2(file, "format_version", H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, &version);
    H5Aclose(attr);
    H5Tclose(type);
    H5Sclose(scalar);
    H5Fclose(file);
  };
  set_format(paths[0], 2);
  EXPECT_NO_THROW(check_token_data(data_set_config_for(deck)));
  set_format(paths[2], 3);
  EXPECT_EQ(data_error(deck), "deck: data.path entry 2 = \"" + paths[2] +
                                  "\": is a token file of format_version 3, newer than this pipetrain reads (up "
                                  "to 2); update pipetrain or remake the file");
}

TEST_F(Hdf5BadShards, TooShortCountsEveryFile) {
  deck.training.batch_size = 32;
  deck.pipeline.micro_batches = 2;
  EXPECT_EQ(data_error(deck), "deck: data.path (3 files): too short: 81 tokens in 3 files make 20 windows of "
                              "model.seq_len + 1 = 5 tokens, but one batch needs training.batch_size = 32");
}

}  // namespace
}  // namespace pt
