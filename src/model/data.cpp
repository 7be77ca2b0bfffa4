// data.cpp: the synthetic teacher data set.
#include "pipetrain/data.hpp"

#include <cmath>

#include "pipetrain/error.hpp"
#include "pipetrain/rng.hpp"

namespace pt {

namespace {

constexpr uint64_t kInputStream = 1;
constexpr uint64_t kTeacherStream = 2;

class TeacherData final : public Dataset {
 public:
  explicit TeacherData(const Deck& deck)
      : samples_(deck.data.samples), seed_(deck.data.seed), in_(deck.model.input_dim),
        out_(deck.model.output_dim), classify_(deck.model.loss == "cross_entropy") {
    PT_CHECK(samples_ >= 1, "data.samples");
    teacher_.resize(static_cast<size_t>(out_ * in_));
    const float scale = 1.f / std::sqrt(static_cast<float>(in_));
    for (size_t i = 0; i < teacher_.size(); ++i)
      teacher_[i] = normal01(seed_, kTeacherStream, i) * scale;
  }

  int64_t size() const override { return samples_; }

  Tensor inputs(int64_t first, int64_t count) const override {
    Tensor x = Tensor::empty({count, in_}, DType::F32, MemCategory::Activations);
    for (int64_t r = 0; r < count; ++r) sample_input(index(first + r), x.f32() + r * in_);
    return x;
  }

  Tensor targets(int64_t first, int64_t count) const override {
    Tensor y = classify_ ? Tensor::empty({count}, DType::I32, MemCategory::Workspace)
                         : Tensor::empty({count, out_}, DType::F32, MemCategory::Workspace);
    std::vector<float> x(static_cast<size_t>(in_)), z(static_cast<size_t>(out_));
    for (int64_t r = 0; r < count; ++r) {
      sample_input(index(first + r), x.data());
      teacher(x.data(), z.data());
      if (classify_) y.i32()[r] = argmax(z);
      else
        for (int64_t j = 0; j < out_; ++j) y.f32()[r * out_ + j] = std::tanh(z[j]);
    }
    return y;
  }

 private:
  int64_t index(int64_t global) const { return global % samples_; }

  void sample_input(int64_t sample, float* x) const {
    for (int64_t j = 0; j < in_; ++j)
      x[j] = normal01(seed_, kInputStream, static_cast<uint64_t>(sample * in_ + j));
  }

  void teacher(const float* x, float* z) const {
    for (int64_t i = 0; i < out_; ++i) {
      float acc = 0.f;
      for (int64_t j = 0; j < in_; ++j) acc += teacher_[i * in_ + j] * x[j];
      z[i] = acc;
    }
  }

  static int32_t argmax(const std::vector<float>& z) {
    int32_t best = 0;
    for (size_t i = 1; i < z.size(); ++i)
      if (z[i] > z[best]) best = static_cast<int32_t>(i);
    return best;
  }

  int64_t samples_;
  uint64_t seed_;
  int64_t in_, out_;
  bool classify_;
  std::vector<float> teacher_;  // (out, in)
};

}  // namespace

std::unique_ptr<Dataset> make_dataset(const Deck& deck) {
  PT_CHECK(deck.data.type == "synthetic", "unknown data type '" + deck.data.type + "'");
  return std::make_unique<TeacherData>(deck);
}

}  // namespace pt
