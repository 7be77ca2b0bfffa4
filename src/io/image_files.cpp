// image_files.cpp: labelled images from an HDF5 file (data.type = "image_files"):
// the file's layout checked before step 0 with one message per problem, the
// whole split read into host memory once, and samples served by global index
// in a seeded order. The layout is in docs/data.md ("Image files").
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/h5_id.hpp"
#include "pipetrain/base/hdf5_lock.hpp"
#include "pipetrain/base/input_file.hpp"
#include "pipetrain/base/quiet_hdf5.hpp"
#include "pipetrain/base/rng.hpp"
#include "pipetrain/io/data_files.hpp"

namespace pt {

namespace {

constexpr uint64_t kImageOrderStream = 15;  // the order samples are served in (data.shuffle)

std::vector<hsize_t> dims_of(hid_t dset) {
  H5Id space(H5Dget_space(dset), H5Sclose);
  const int rank = space.valid() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  return dims;
}

std::string dims_text(const std::vector<hsize_t>& dims) {
  std::string s = "(";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + ")";
}

using ImageInput = DataSetConfig::ImageInput;

struct ImageShape {
  int64_t channels = 0, height = 0, width = 0;
  int64_t pixels() const { return channels * height * width; }
  std::string text() const {
    return "(" + std::to_string(channels) + ", " + std::to_string(height) + ", " + std::to_string(width) + ")";
  }
};

// The whole file of one split: images (n, C, H, W) as f32 and labels (n).
struct ImageFile {
  ImageShape shape;
  int64_t count = 0;
  std::vector<float> pixels;    // (n, C, H, W); stored integers scaled by 1/255
  std::vector<int32_t> labels;  // (n)
};

// Reads and checks `path`; `at` names it in messages ("deck.toml:7: data.path = \"d.h5\"").
ImageFile read_image_file(const std::string& path, const std::string& at, const ImageInput& want) {
  const int64_t model_classes = want.classes;
  const std::string prefix = at + ": ";
  require_regular_file(path, "an HDF5 file of images and labels", at);
  Hdf5Lock lock;
  QuietHdf5 quiet;
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) throw InputError(prefix + "cannot open as an HDF5 file");
  H5Id images(H5Dopen2(file.get(), "images", H5P_DEFAULT), H5Dclose);
  H5Id labels(H5Dopen2(file.get(), "labels", H5P_DEFAULT), H5Dclose);
  if (!images.valid() || !labels.valid())
    throw InputError(prefix + "has no dataset '" + (images.valid() ? "labels" : "images") +
                     "' (an image file holds images (N, C, H, W) and labels (N), docs/data.md)");
  H5Id image_type(H5Dget_type(images.get()), H5Tclose), label_type(H5Dget_type(labels.get()), H5Tclose);
  const H5T_class_t image_class = H5Tget_class(image_type.get());
  const bool integer_pixels = image_class == H5T_INTEGER;
  if (!(image_class == H5T_FLOAT || (integer_pixels && H5Tget_size(image_type.get()) == 1 &&
                                     H5Tget_sign(image_type.get()) == H5T_SGN_NONE)))
    throw InputError(prefix + "dataset 'images' must hold float or uint8 values");
  if (H5Tget_class(label_type.get()) != H5T_INTEGER)
    throw InputError(prefix + "dataset 'labels' must hold integers (class indices)");
  const std::vector<hsize_t> idims = dims_of(images.get()), ldims = dims_of(labels.get());
  if (idims.size() != 4)
    throw InputError(prefix + "dataset 'images' is " + dims_text(idims) + ", expected 4-D (N, C, H, W)");
  if (ldims.size() != 1 || ldims[0] != idims[0])
    throw InputError(prefix + "dataset 'labels' is " + dims_text(ldims) + ", expected (" +
                     std::to_string(idims[0]) + "): one label per image");
  if (idims[0] == 0) throw InputError(prefix + "holds no images");
  ImageFile f;
  f.count = static_cast<int64_t>(idims[0]);
  f.shape = {static_cast<int64_t>(idims[1]), static_cast<int64_t>(idims[2]), static_cast<int64_t>(idims[3])};
  const ImageShape model_shape{want.channels, want.height, want.width};
  if (want.flat && f.shape.pixels() != want.values)
    throw InputError(prefix + "images are " + f.shape.text() + ", " + std::to_string(f.shape.pixels()) +
                     " values each, but the MLP takes " + std::to_string(want.values) +
                     " inputs (model.input_dim)");
  if (!want.flat && (f.shape.channels != want.channels || f.shape.height != want.height ||
                     f.shape.width != want.width))
    throw InputError(prefix + "images are " + f.shape.text() + " but the model takes " + model_shape.text() +
                     " (model.in_channels, model.image_size)");
  f.pixels.resize(static_cast<size_t>(f.count * f.shape.pixels()));
  f.labels.resize(static_cast<size_t>(f.count));
  if (H5Dread(images.get(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.pixels.data()) < 0 ||
      H5Dread(labels.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, f.labels.data()) < 0)
    throw InputError(prefix + "cannot read its datasets (damaged file?)");
  if (integer_pixels)
    for (float& v : f.pixels) v *= 1.f / 255.f;
  const int64_t per_image = f.shape.pixels();
  for (size_t k = 0; k < f.pixels.size(); ++k)
    if (!std::isfinite(f.pixels[k]))
      throw InputError(prefix + "value " + std::to_string(static_cast<int64_t>(k) % per_image) + " of image " +
                       std::to_string(static_cast<int64_t>(k) / per_image) + " is " +
                       (std::isnan(f.pixels[k]) ? "nan" : "infinite") + "; images must hold finite numbers");
  for (int64_t i = 0; i < f.count; ++i) {
    const int32_t label = f.labels[static_cast<size_t>(i)];
    if (label < 0 || label >= model_classes)
      throw InputError(prefix + "label " + std::to_string(label) + " of image " + std::to_string(i) +
                       " is outside 0.." + std::to_string(model_classes - 1) + " (the model's " +
                       std::to_string(model_classes) + " classes)");
  }
  return f;
}

const std::string& split_path(const DataSetConfig& config, Split split) {
  return split == Split::Train ? config.data.path : config.data.eval_path;
}
const std::string& split_at(const DataSetConfig& config, Split split) {
  return split == Split::Train ? config.path_at : config.eval_path_at;
}

class ImageData final : public Dataset {
 public:
  ImageData(const DataSetConfig& config, Split split)
      : file_(read_image_file(split_path(config, split), split_at(config, split), config.image)),
        flat_(config.image.flat), order_(static_cast<size_t>(file_.count)) {
    std::iota(order_.begin(), order_.end(), int64_t{0});
    if (config.data.shuffle) {  // Fisher-Yates with the data seed: the same order on every rank
      for (int64_t i = file_.count - 1; i > 0; --i) {
        const int64_t j = static_cast<int64_t>(random_bits(config.data.seed, kImageOrderStream,
                                                           static_cast<uint64_t>(i)) %
                                               static_cast<uint64_t>(i + 1));
        std::swap(order_[static_cast<size_t>(i)], order_[static_cast<size_t>(j)]);
      }
    }
  }

  // (count, C, H, W) f32, or (count, C*H*W) for an MLP: the images of
  // global samples first.., in the split's order, wrapping.
  Tensor inputs(int64_t first, int64_t count) const override {
    const ImageShape& s = file_.shape;
    const int64_t n = s.pixels();
    const Shape shape = flat_ ? Shape{count, n} : Shape{count, s.channels, s.height, s.width};
    Tensor x = Tensor::empty(shape, DType::F32, MemCategory::Workspace, Device::CPU);
    for (int64_t r = 0; r < count; ++r) {
      const float* src = file_.pixels.data() + sample(first + r) * n;
      std::copy(src, src + n, x.f32() + r * n);
    }
    return x;
  }

  // (count) i32 class labels.
  Tensor targets(int64_t first, int64_t count) const override {
    Tensor y = Tensor::empty({count}, DType::I32, MemCategory::Workspace, Device::CPU);
    for (int64_t r = 0; r < count; ++r) y.i32()[r] = file_.labels[static_cast<size_t>(sample(first + r))];
    return y;
  }

 private:
  int64_t sample(int64_t global) const { return order_[static_cast<size_t>(global % file_.count)]; }

  ImageFile file_;
  bool flat_;
  std::vector<int64_t> order_;  // (n): file index of the split's k-th sample
};

}  // namespace

std::unique_ptr<Dataset> make_image_file_dataset(const DataSetConfig& config, Split split) {
  return std::make_unique<ImageData>(config, split);
}

void check_image_files(const DataSetConfig& config) {
  for (Split split : {Split::Train, Split::Eval})
    if (!split_path(config, split).empty()) read_image_file(split_path(config, split), split_at(config, split), config.image);
}

}  // namespace pt
