// image_data.cpp: data.type = "images", the CNN's synthetic image task.
//
// Sample i is an image (C, H, W) of N(0, 1) pixels drawn from (data.seed,
// stream, element), so any rank makes any sample alone, and a class label
// drawn from the softmax of a fixed random teacher network's logits: one
// 3 x 3 convolution (padding 1) to kTeacherFilters maps, ReLU, global average
// pooling, each feature standardised, then a linear map to the classes. The
// teacher runs in double, one sample at a time, so a label never depends on
// which samples were made with it. A model that knew the teacher would
// predict its softmax, whose expected loss is the mean entropy of those
// softmaxes: the split's loss floor, computed over the split's samples.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/model/data.hpp"

namespace pt {

namespace {

constexpr uint64_t kPixelStream = 11;
constexpr uint64_t kTeacherConvStream = 12;
constexpr uint64_t kTeacherHeadStream = 13;
constexpr uint64_t kLabelStream = 14;
constexpr int64_t kTeacherFilters = 8;
// Logits of standard deviation ~kTemperature: labels that the image decides
// mostly, but not always (a floor well above 0 and well below log(classes)).
constexpr double kTemperature = 3.0;

class ImageTeacherData final : public Dataset {
 public:
  ImageTeacherData(const DataSetConfig& config, Split split)
      : first_(split == Split::Train ? 0 : config.data.samples), samples_(config.data.samples),
        seed_(config.data.seed), C_(config.cnn.in_channels), S_(config.cnn.image_size),
        classes_(config.cnn.classes) {
    PT_CHECK(samples_ >= 1, "data.samples");
    const int64_t taps = kTeacherFilters * C_ * 9;
    conv_.resize(static_cast<size_t>(taps));
    for (int64_t i = 0; i < taps; ++i)
      conv_[static_cast<size_t>(i)] = normal01(seed_, kTeacherConvStream, static_cast<uint64_t>(i)) /
                                      std::sqrt(9.0 * static_cast<double>(C_));
    head_.resize(static_cast<size_t>(classes_ * kTeacherFilters));
    for (int64_t i = 0; i < classes_ * kTeacherFilters; ++i)
      head_[static_cast<size_t>(i)] = normal01(seed_, kTeacherHeadStream, static_cast<uint64_t>(i)) *
                                      kTemperature / std::sqrt(static_cast<double>(kTeacherFilters));
  }

  // (count, C, H, W) f32.
  Tensor inputs(int64_t first, int64_t count) const override {
    Tensor x = Tensor::empty({count, C_, S_, S_}, DType::F32, MemCategory::Workspace, Device::CPU);
    for (int64_t i = 0; i < count; ++i) {
      const std::vector<float> img = image(first + i);
      std::copy(img.begin(), img.end(), x.f32() + i * pixels());
    }
    return x;
  }

  // (count) i32 labels.
  Tensor targets(int64_t first, int64_t count) const override {
    Tensor y = Tensor::empty({count}, DType::I32, MemCategory::Workspace, Device::CPU);
    for (int64_t i = 0; i < count; ++i) y.i32()[i] = label(first + i);
    return y;
  }

  std::optional<LossFloor> loss_floor() const override {
    double sum = 0.0;
    for (int64_t i = 0; i < samples_; ++i) {
      const std::vector<double> p = probabilities(i);
      for (double q : p) sum -= q > 0.0 ? q * std::log(q) : 0.0;
    }
    LossFloor floor;
    floor.entropy_rate = floor.window = sum / static_cast<double>(samples_);
    floor.summary = "data: teacher network's mean label entropy over the split's " +
                    std::to_string(samples_) + " images (the loss floor)";
    return floor;
  }

 private:
  int64_t pixels() const { return C_ * S_ * S_; }

  // Sample i of the split (global index first_ + i modulo the split's size).
  uint64_t global(int64_t i) const { return static_cast<uint64_t>(first_ + i % samples_); }

  std::vector<float> image(int64_t i) const {
    std::vector<float> img(static_cast<size_t>(pixels()));  // (C, H, W)
    const uint64_t base = global(i) * static_cast<uint64_t>(pixels());
    for (int64_t j = 0; j < pixels(); ++j)
      img[static_cast<size_t>(j)] = normal01(seed_, kPixelStream, base + static_cast<uint64_t>(j));
    return img;
  }

  // The teacher's softmax over the classes for sample i.
  std::vector<double> probabilities(int64_t i) const {
    const std::vector<float> img = image(i);
    std::vector<double> feature(kTeacherFilters);
    // E[relu(z)] and sd(relu(z)) for z ~ N(0, 1): each feature ~ N(0, 1)-ish.
    const double relu_mean = 1.0 / std::sqrt(2.0 * M_PI);
    const double relu_sd = std::sqrt(0.5 - 1.0 / (2.0 * M_PI));
    for (int64_t f = 0; f < kTeacherFilters; ++f) {
      double sum = 0.0;
      for (int64_t h = 0; h < S_; ++h)
        for (int64_t w = 0; w < S_; ++w) sum += std::max(0.0, conv_at(img, f, h, w));
      const double mean = sum / static_cast<double>(S_ * S_);
      feature[static_cast<size_t>(f)] = (mean - relu_mean) * static_cast<double>(S_) / relu_sd;
    }
    std::vector<double> logits(static_cast<size_t>(classes_));
    double top = -INFINITY;
    for (int64_t k = 0; k < classes_; ++k) {
      double z = 0.0;
      for (int64_t f = 0; f < kTeacherFilters; ++f)
        z += head_[static_cast<size_t>(k * kTeacherFilters + f)] * feature[static_cast<size_t>(f)];
      logits[static_cast<size_t>(k)] = z;
      top = std::max(top, z);
    }
    double total = 0.0;
    for (double& z : logits) total += (z = std::exp(z - top));
    for (double& z : logits) z /= total;
    return logits;
  }

  // Filter f of the teacher's convolution at pixel (h, w), zero padding.
  double conv_at(const std::vector<float>& img, int64_t f, int64_t h, int64_t w) const {
    double sum = 0.0;
    for (int64_t c = 0; c < C_; ++c)
      for (int64_t dh = -1; dh <= 1; ++dh)
        for (int64_t dw = -1; dw <= 1; ++dw) {
          const int64_t ih = h + dh, iw = w + dw;
          if (ih < 0 || ih >= S_ || iw < 0 || iw >= S_) continue;
          sum += conv_[static_cast<size_t>(((f * C_ + c) * 3 + dh + 1) * 3 + dw + 1)] *
                 img[static_cast<size_t>((c * S_ + ih) * S_ + iw)];
        }
    return sum;
  }

  // A class drawn from the teacher's softmax with a seeded uniform.
  int32_t label(int64_t i) const {
    const std::vector<double> p = probabilities(i);
    const double u = uniform01(seed_, kLabelStream, global(i));
    double cumulative = 0.0;
    for (size_t k = 0; k + 1 < p.size(); ++k) {
      cumulative += p[k];
      if (u < cumulative) return static_cast<int32_t>(k);
    }
    return static_cast<int32_t>(p.size() - 1);
  }

  int64_t first_, samples_;
  uint64_t seed_;
  int64_t C_, S_, classes_;
  std::vector<double> conv_;  // (kTeacherFilters, C, 3, 3)
  std::vector<double> head_;  // (classes, kTeacherFilters)
};

}  // namespace

std::unique_ptr<Dataset> make_image_dataset(const DataSetConfig& config, Split split) {
  return std::make_unique<ImageTeacherData>(config, split);
}

}  // namespace pt
