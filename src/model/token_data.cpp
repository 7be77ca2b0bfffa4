// token_data.cpp: token data for the GPT model: a seeded random Markov chain
// with a known entropy floor. Token files are read by the io layer
// (io/token_files.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "pipetrain/model/data.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/rng.hpp"

namespace pt {

namespace {

constexpr uint64_t kChainStream = 11;   // transition rows
constexpr uint64_t kTrainStream = 12;   // training windows
constexpr uint64_t kEvalStream = 13;    // held-out windows

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

}  // namespace

std::unique_ptr<Dataset> make_markov_dataset(const DataSetConfig& config, Split split) {
  return std::make_unique<MarkovData>(config, split);
}

}  // namespace pt
