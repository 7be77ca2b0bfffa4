// test_image_files.cpp: data.type = "image_files" (model/data.hpp,
// image_files.cpp): files written here with the HDF5 C API are served as
// (count, C, H, W) images to a CNN and flattened to an MLP, uint8 pixels as
// value / 255, labels as i32, wrapping in file order or a seeded permutation
// (the same on every call); every bad file or deck gets its own message
// naming the key and the problem.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "pipetrain/io/data_files.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/runtime/data_set_config.hpp"

namespace pt {
namespace {

namespace fs = std::filesystem;

std::string temp_path(const std::string& name) {
  return (fs::temp_directory_path() / ("pt_images_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Writes `dims` of `type` from `data` as dataset `name` of an open file.
void write_dataset(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& dims, const void* data) {
  hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  hid_t dset = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(dset);
  H5Sclose(space);
}

struct ImageFileSpec {
  std::vector<hsize_t> image_dims = {5, 1, 2, 3};  // (N, C, H, W)
  bool uint8_pixels = false;
  std::vector<int32_t> labels = {0, 1, 2, 3, 1};
  std::vector<hsize_t> label_dims = {5};
  bool with_images = true, with_labels = true;
  int64_t bad_pixel = -1;  // >= 0: that pixel (flat index) is NaN
};

// Pixel j of image i: (10 i + j) / 100 as float, or 10 i + j as uint8.
std::string write_image_file(const std::string& name, const ImageFileSpec& s) {
  const std::string path = temp_path(name);
  hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  size_t values = 1;
  for (hsize_t d : s.image_dims) values *= d;
  const size_t per_image = s.image_dims.empty() || s.image_dims[0] == 0 ? 0 : values / s.image_dims[0];
  std::vector<float> f(values);
  std::vector<uint8_t> u(values);
  for (size_t k = 0; k < values; ++k) {
    const size_t i = per_image ? k / per_image : 0, j = per_image ? k % per_image : 0;
    u[k] = static_cast<uint8_t>(10 * i + j);
    f[k] = static_cast<float>(10 * i + j) / 100.f;
  }
  if (s.bad_pixel >= 0) f[static_cast<size_t>(s.bad_pixel)] = std::numeric_limits<float>::quiet_NaN();
  if (s.with_images)
    write_dataset(file, "images", s.uint8_pixels ? H5T_NATIVE_UINT8 : H5T_NATIVE_FLOAT, s.image_dims,
                  s.uint8_pixels ? static_cast<const void*>(u.data()) : f.data());
  if (s.with_labels) write_dataset(file, "labels", H5T_NATIVE_INT32, s.label_dims, s.labels.data());
  H5Fclose(file);
  return path;
}

// A CNN taking (1, 2, 3) images of 4 classes, or an MLP of 6 inputs and 4 classes.
DataSetConfig config_for(const std::string& path, bool mlp, bool shuffle = false) {
  DataSetConfig c;
  c.data.type = DataKind::ImageFiles;
  c.data.path = path;
  c.data.shuffle = shuffle;
  c.data.seed = 11;
  c.path_at = "deck.toml:9: data.path = \"" + path + "\"";
  c.image = mlp ? DataSetConfig::ImageInput{0, 0, 0, true, 6, 4} : DataSetConfig::ImageInput{1, 2, 3, false, 6, 4};
  return c;
}

class ImageFiles : public ::testing::Test {
 protected:
  void TearDown() override {
    for (const std::string& p : written_) fs::remove(p);
  }
  std::string file(const std::string& name, const ImageFileSpec& s = {}) {
    written_.push_back(write_image_file(name, s));
    return written_.back();
  }
  std::string error_for(const std::string& path, bool mlp = false) {
    return test::error_of([&] { check_image_files(config_for(path, mlp)); });
  }

 private:
  std::vector<std::string> written_;
};

TEST_F(ImageFiles, ServesImagesAndLabelsInFileOrderWrapping) {
  const auto data = make_dataset(config_for(file("order.h5"), false), Split::Train);
  const Tensor x = data->inputs(3, 4);  // samples 3, 4, 0, 1
  ASSERT_EQ(x.shape(), (Shape{4, 1, 2, 3}));
  const int expect_image[] = {3, 4, 0, 1};
  for (int r = 0; r < 4; ++r)
    for (int j = 0; j < 6; ++j)
      EXPECT_EQ(x.f32()[r * 6 + j], static_cast<float>(10 * expect_image[r] + j) / 100.f);
  const Tensor y = data->targets(3, 4);
  ASSERT_EQ(y.shape(), (Shape{4}));
  EXPECT_EQ(std::vector<int32_t>(y.i32(), y.i32() + 4), (std::vector<int32_t>{3, 1, 0, 1}));
}

TEST_F(ImageFiles, AnMlpGetsThemFlattenedAndUint8IsScaled) {
  ImageFileSpec s;
  s.uint8_pixels = true;
  const auto data = make_dataset(config_for(file("u8.h5", s), true), Split::Train);
  const Tensor x = data->inputs(2, 1);
  ASSERT_EQ(x.shape(), (Shape{1, 6}));
  for (int j = 0; j < 6; ++j) EXPECT_EQ(x.f32()[j], static_cast<float>(20 + j) * (1.f / 255.f));
}

TEST_F(ImageFiles, ShuffleIsASeededPermutationTheSameEveryTime) {
  const std::string path = file("shuffle.h5");
  const auto a = make_dataset(config_for(path, false, true), Split::Train);
  const auto b = make_dataset(config_for(path, false, true), Split::Train);
  const Tensor la = a->targets(0, 10), lb = b->targets(0, 10);
  EXPECT_EQ(std::vector<int32_t>(la.i32(), la.i32() + 10), std::vector<int32_t>(lb.i32(), lb.i32() + 10));
  // Which images it serves: each of the 5 once per pass, read back from the first pixel.
  const Tensor x = a->inputs(0, 5);
  std::vector<int> images;
  for (int r = 0; r < 5; ++r) images.push_back(static_cast<int>(x.f32()[r * 6] * 10.f + 0.5f));
  std::vector<int> sorted = images;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_NE(images, (std::vector<int>{0, 1, 2, 3, 4})) << "seed 11 permutes these 5";
}

TEST_F(ImageFiles, EveryBadFileHasItsMessage) {
  const std::string at = "deck.toml:9: data.path = \"";
  EXPECT_NE(error_for(temp_path("missing.h5"))
                .find("\": '" + temp_path("missing.h5") + "': no such file; expected an HDF5 file of images and labels"),
            std::string::npos);
  const std::string text = temp_path("text.h5");
  std::FILE* f = std::fopen(text.c_str(), "w");
  std::fputs("not hdf5\n", f);
  std::fclose(f);
  EXPECT_NE(error_for(text).find(at + text + "\": cannot open as an HDF5 file"), std::string::npos);
  fs::remove(text);
  ImageFileSpec no_labels;
  no_labels.with_labels = false;
  EXPECT_NE(error_for(file("nolabels.h5", no_labels)).find("has no dataset 'labels'"), std::string::npos);
  ImageFileSpec flat;
  flat.image_dims = {5, 6};
  EXPECT_NE(error_for(file("flat.h5", flat)).find("dataset 'images' is (5, 6), expected 4-D (N, C, H, W)"),
            std::string::npos);
  ImageFileSpec short_labels;
  short_labels.label_dims = {4};
  EXPECT_NE(error_for(file("short.h5", short_labels)).find("dataset 'labels' is (4), expected (5): one label per image"),
            std::string::npos);
  ImageFileSpec big_label;
  big_label.labels = {0, 1, 4, 3, 1};
  EXPECT_NE(error_for(file("label.h5", big_label))
                .find("label 4 of image 2 is outside 0..3 (the model's 4 classes)"),
            std::string::npos);
  ImageFileSpec nan_pixel;
  nan_pixel.bad_pixel = 13;  // image 2 (6 values each), value 1
  EXPECT_NE(error_for(file("nan.h5", nan_pixel)).find("value 1 of image 2 is nan; images must hold finite numbers"),
            std::string::npos);
  ImageFileSpec other_shape;
  other_shape.image_dims = {5, 1, 3, 2};
  const std::string wrong = file("shape.h5", other_shape);
  EXPECT_NE(error_for(wrong).find("images are (1, 3, 2) but the model takes (1, 2, 3) (model.in_channels, model.image_size)"),
            std::string::npos);
  EXPECT_EQ(error_for(wrong, true), "") << "an MLP takes any image of input_dim values";
  ImageFileSpec more_values;
  more_values.image_dims = {5, 1, 2, 4};
  EXPECT_NE(error_for(file("values.h5", more_values), true)
                .find("images are (1, 2, 4), 8 values each, but the MLP takes 6 inputs (model.input_dim)"),
            std::string::npos);
}

// The deck's part: one file per split, named; an MLP must classify.
TEST(ImageFileDeck, KeysAreCheckedByName) {
  const std::string cnn = "[model]\ntype = \"cnn\"\n[data]\ntype = \"image_files\"\n";
  EXPECT_NE(test::error_of([&] { parse_deck_text(cnn, "d.toml", {}); })
                .find("data.type = \"image_files\": needs data.path (the HDF5 image file)"),
            std::string::npos);
  EXPECT_NE(test::error_of([&] { parse_deck_text(cnn + "path = [\"a.h5\", \"b.h5\"]\n", "d.toml", {}); })
                .find("data.path: data.type = \"image_files\" reads one file per split"),
            std::string::npos);
  const std::string mlp = "[model]\ninput_dim = 64\noutput_dim = 10\n[data]\ntype = \"image_files\"\npath = \"a.h5\"\n";
  EXPECT_NE(test::error_of([&] { parse_deck_text(mlp, "d.toml", {}); })
                .find("an MLP on data.type = \"image_files\" classifies its labels; set model.loss = \"cross_entropy\""),
            std::string::npos);
  const Deck ok = parse_deck_text(mlp, "d.toml", {"model.loss=\"cross_entropy\""});
  const DataSetConfig c = data_set_config_for(ok);
  EXPECT_TRUE(c.image.flat);
  EXPECT_EQ(c.image.values, 64);
  EXPECT_EQ(c.image.classes, 10);
}

}  // namespace
}  // namespace pt
