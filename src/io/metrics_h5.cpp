// metrics_h5.cpp: metrics.h5 (per-step series + run attributes) and the
// atomic file helpers used for every output.
#include "pipetrain/io/metrics.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "pipetrain/base/error.hpp"

namespace pt {

void ensure_directory(const std::string& path, const std::string& deck_key) {
  std::string partial;
  for (size_t i = 0; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    partial = path.substr(0, i);
    if (partial.empty()) continue;
    if (mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      throw InputError(deck_key + " = \"" + path + "\": cannot create directory '" + partial +
                       "': " + std::strerror(errno));
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw InputError(deck_key + " = \"" + path + "\": not a directory");
}

namespace {

void fsync_path(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path + " for fsync: " + std::strerror(errno));
  int rc = fsync(fd);
  close(fd);
  if (rc != 0) throw Error("fsync of " + path + " failed: " + std::strerror(errno));
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error("cannot rename " + from + " to " + to + ": " + std::strerror(errno));
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw Error("cannot write " + tmp + ": " + std::strerror(errno));
  size_t written = std::fwrite(text.data(), 1, text.size(), f);
  bool ok = written == text.size() && std::fflush(f) == 0 && fsync(fileno(f)) == 0;
  std::fclose(f);
  if (!ok) throw Error("writing " + tmp + " failed: " + std::strerror(errno));
  rename_or_throw(tmp, path);
}

MetricsFile::MetricsFile(std::string path, std::string resolved_deck)
    : path_(std::move(path)), deck_(std::move(resolved_deck)) {
  for (const char* name : {"loss", "lr", "grad_norm", "step_time_s", "samples_per_s", "eval_loss", "bubble"})
    series_[name] = {};
}

void MetricsFile::set_attribute(const std::string& name, const std::string& value) {
  text_attrs_[name] = value;
}

void MetricsFile::set_attribute(const std::string& name, const std::vector<int64_t>& values) {
  int_attrs_[name] = values;
}

void MetricsFile::set_attribute(const std::string& name, double value) {
  float_attrs_[name] = value;
}

void MetricsFile::add_step(const StepRecord& rec, double samples_per_s) {
  step_.push_back(rec.step);
  series_["loss"].push_back(rec.loss);
  series_["lr"].push_back(rec.lr);
  series_["grad_norm"].push_back(rec.grad_norm);
  series_["step_time_s"].push_back(rec.step_time_s);
  series_["samples_per_s"].push_back(samples_per_s);
  series_["eval_loss"].push_back(rec.eval_loss);
  series_["bubble"].push_back(rec.bubble);
  const int cats = static_cast<int>(MemCategory::Count);
  for (size_t stage = 0; stage < rec.stage_peak_bytes.size(); ++stage)
    for (int c = 0; c <= cats; ++c) {
      const std::string name = c < cats ? category_name(static_cast<MemCategory>(c)) : "total";
      stage_series_["peak_bytes_" + name].resize(rec.stage_peak_bytes.size());
      stage_series_["peak_bytes_" + name][stage].push_back(rec.stage_peak_bytes[stage][c]);
    }
}

namespace {

void write_string_attr(hid_t obj, const std::string& name, const std::string& value) {
  hid_t type = H5Tcopy(H5T_C_S1);
  H5_CHECK(type);
  H5_CHECK(H5Tset_size(type, value.empty() ? 1 : value.size()));
  H5_CHECK(H5Tset_cset(type, H5T_CSET_UTF8));
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  H5_CHECK(H5Awrite(attr, type, value.empty() ? "" : value.c_str()));
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void write_int_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values) {
  hsize_t dims[1] = {values.size()};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t attr = H5Acreate2(obj, name.c_str(), H5T_NATIVE_INT64, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  H5_CHECK(H5Awrite(attr, H5T_NATIVE_INT64, values.data()));
  H5Aclose(attr);
  H5Sclose(space);
}

void write_double_attr(hid_t obj, const std::string& name, double value) {
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t attr = H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  H5_CHECK(H5Awrite(attr, H5T_NATIVE_DOUBLE, &value));
  H5Aclose(attr);
  H5Sclose(space);
}

void write_dataset(hid_t file, const std::string& name, hid_t mem_type, const void* data,
                   size_t count) {
  hsize_t dims[1] = {count};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t file_type = mem_type == H5T_NATIVE_DOUBLE ? H5T_IEEE_F64LE : H5T_STD_I64LE;
  hid_t dset = H5Dcreate2(file, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT);
  H5_CHECK(dset);
  if (count > 0) H5_CHECK(H5Dwrite(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data));
  H5Dclose(dset);
  H5Sclose(space);
}

// (steps, stages) float64 from per-stage series of equal length.
void write_matrix(hid_t file, const std::string& name, const std::vector<std::vector<double>>& per_stage) {
  const size_t stages = per_stage.size(), steps = stages ? per_stage[0].size() : 0;
  std::vector<double> data(steps * stages);
  for (size_t s = 0; s < stages; ++s)
    for (size_t t = 0; t < steps; ++t) data[t * stages + s] = per_stage[s][t];
  hsize_t dims[2] = {steps, stages};
  hid_t space = H5Screate_simple(2, dims, nullptr);
  hid_t dset = H5Dcreate2(file, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                          H5P_DEFAULT);
  H5_CHECK(dset);
  if (!data.empty()) H5_CHECK(H5Dwrite(dset, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data.data()));
  H5Dclose(dset);
  H5Sclose(space);
}

}  // namespace

void MetricsFile::write() const {
  const std::string tmp = path_ + ".tmp";
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw Error("cannot create " + tmp);
  write_string_attr(file, "deck", deck_);
  for (const auto& [name, value] : text_attrs_) write_string_attr(file, name, value);
  for (const auto& [name, values] : int_attrs_) write_int_attr(file, name, values);
  for (const auto& [name, value] : float_attrs_) write_double_attr(file, name, value);
  write_dataset(file, "step", H5T_NATIVE_INT64, step_.data(), step_.size());
  for (const auto& [name, values] : series_)
    write_dataset(file, name, H5T_NATIVE_DOUBLE, values.data(), values.size());
  for (const auto& [name, per_stage] : stage_series_) write_matrix(file, name, per_stage);
  H5_CHECK(H5Fclose(file));
  fsync_path(tmp);
  rename_or_throw(tmp, path_);
}

}  // namespace pt
