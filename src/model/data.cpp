// data.cpp: the synthetic teacher data set (MLP), the factory of generated data sets and
// the opener the runtime calls.
#include "pipetrain/model/data.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "pipetrain/tensor/backend.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/rng.hpp"

namespace pt {

namespace {

constexpr uint64_t kInputStream = 1;
constexpr uint64_t kTeacherStream = 2;

class TeacherData final : public Dataset {
 public:
  TeacherData(const DataSetConfig& config, Split split)
      : first_(split == Split::Train ? 0 : config.data.samples), samples_(config.data.samples),
        seed_(config.data.seed), in_(config.mlp.input_dim), out_(config.mlp.output_dim),
        classify_(config.mlp.loss == LossKind::CrossEntropy) {
    PT_CHECK(samples_ >= 1, "data.samples");
    teacher_ = Tensor::empty({out_, in_}, DType::F32, MemCategory::Workspace, Device::CPU);
    const float scale = 1.f / std::sqrt(static_cast<float>(in_));
    for (int64_t i = 0; i < teacher_.numel(); ++i)
      teacher_.f32()[i] = normal01(seed_, kTeacherStream, static_cast<uint64_t>(i)) * scale;
  }

  Tensor inputs(int64_t first, int64_t count) const override {
    if (cacheable()) return gather_rows(cached(cached_inputs_, false), first, count);
    return generate_inputs(first, count);
  }

  Tensor targets(int64_t first, int64_t count) const override {
    if (cacheable()) return gather_rows(cached(cached_targets_, true), first, count);
    return generate_targets(first, count);
  }

 private:
  // The whole split is generated once, on first use, when it is small (at
  // most 2^26 values): the steps then spend no time making data, and a
  // sample's values never depend on which rows were generated with it.
  bool cacheable() const { return samples_ * std::max(in_, out_) <= (int64_t{1} << 26); }

  const Tensor& cached(Tensor& cache, bool targets) const {
    if (cache.defined()) return cache;
    constexpr int64_t kChunk = 1024;
    Tensor all;
    for (int64_t first = 0; first < samples_; first += kChunk) {
      Tensor part = targets ? generate_targets(first, std::min(kChunk, samples_ - first))
                            : generate_inputs(first, std::min(kChunk, samples_ - first));
      if (!all.defined()) {
        Shape shape = part.shape();
        shape[0] = samples_;
        all = Tensor::empty(shape, part.dtype(), MemCategory::Workspace, Device::CPU);
      }
      const size_t row_bytes = part.bytes() / static_cast<size_t>(part.dim(0));
      std::memcpy(static_cast<char*>(all.raw()) + first * row_bytes, part.raw(), part.bytes());
    }
    cache = all;
    return cache;
  }

  // Rows first..first+count-1 of the split, wrapping around.
  Tensor gather_rows(const Tensor& all, int64_t first, int64_t count) const {
    Shape shape = all.shape();
    shape[0] = count;
    Tensor out = Tensor::empty(shape, all.dtype(), MemCategory::Workspace, Device::CPU);
    const size_t row_bytes = all.bytes() / static_cast<size_t>(samples_);
    for (int64_t r = 0; r < count; ++r)
      std::memcpy(static_cast<char*>(out.raw()) + r * row_bytes,
                  static_cast<const char*>(all.raw()) + ((first + r) % samples_) * row_bytes, row_bytes);
    return out;
  }

  Tensor generate_inputs(int64_t first, int64_t count) const {
    Tensor x = Tensor::empty({count, in_}, DType::F32, MemCategory::Workspace, Device::CPU);
    for (int64_t r = 0; r < count; ++r) sample_input(index(first + r), x.f32() + r * in_);
    return x;
  }

  // Z = X A^T through the backend's GEMM, then tanh (MSE) or argmax (labels).
  Tensor generate_targets(int64_t first, int64_t count) const {
    Tensor x = generate_inputs(first, count);
    Tensor z = Tensor::empty({count, out_}, DType::F32, MemCategory::Workspace, Device::CPU);
    cpu_backend().matmul(x, false, teacher_, true, z, 1.f, 0.f);
    if (classify_) {
      Tensor labels = Tensor::empty({count}, DType::I32, MemCategory::Workspace, Device::CPU);
      for (int64_t r = 0; r < count; ++r) labels.i32()[r] = argmax(z.f32() + r * out_, out_);
      return labels;
    }
    for (int64_t i = 0; i < z.numel(); ++i) z.f32()[i] = std::tanh(z.f32()[i]);
    return z;
  }

  // Training samples are 0..samples-1 (repeating); evaluation samples are
  // the next `samples` indices, never seen in training.
  int64_t index(int64_t global) const { return first_ + global % samples_; }

  void sample_input(int64_t sample, float* x) const {
    for (int64_t j = 0; j < in_; ++j)
      x[j] = normal01(seed_, kInputStream, static_cast<uint64_t>(sample * in_ + j));
  }

  static int32_t argmax(const float* z, int64_t n) {
    int32_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (z[i] > z[best]) best = static_cast<int32_t>(i);
    return best;
  }

  int64_t first_;
  int64_t samples_;
  uint64_t seed_;
  int64_t in_, out_;
  bool classify_;
  Tensor teacher_;  // (out, in)
  mutable Tensor cached_inputs_;   // (samples, in) when cacheable()
  mutable Tensor cached_targets_;  // (samples, out) or (samples) labels
};

}  // namespace

void fill_data_cache(const Dataset& data, int64_t rows, bool first_stage, bool last_stage) {
  if (first_stage) data.inputs(0, rows);
  if (last_stage) data.targets(0, rows);
}

bool is_generated_data(DataKind type) {
  return type == DataKind::Synthetic || type == DataKind::Markov || type == DataKind::Images;
}

std::unique_ptr<Dataset> make_generated_dataset(const DataSetConfig& config, Split split) {
  PT_CHECK(is_generated_data(config.data.type),
           "data.type = \"" + std::string(kind_name(config.data.type)) +
               "\" reads files, which the model layer does not: open it with io's make_dataset "
               "(a DatasetOpener given to the runtime)");
  switch (config.data.type) {
    case DataKind::Synthetic: return std::make_unique<TeacherData>(config, split);
    case DataKind::Markov: return make_markov_dataset(config, split);
    case DataKind::Images: return make_image_dataset(config, split);
    default: break;
  }
  PT_FAIL("unknown data type");
}

std::unique_ptr<Dataset> open_dataset(const DatasetOpener& open, const DataSetConfig& config, Split split) {
  if (open) return open(config, split);
  PT_CHECK(is_generated_data(config.data.type),
           "data.type = \"" + std::string(kind_name(config.data.type)) +
               "\" reads files, and no DatasetOpener was given (ComputeSetup::open_dataset, "
               "ProfileOptions::open_dataset: the application passes io's make_dataset)");
  return make_generated_dataset(config, split);
}

}  // namespace pt
