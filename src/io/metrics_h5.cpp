// metrics_h5.cpp: metrics.h5 (per-step series + run attributes) and the
// atomic file helpers used for every output. The output directories'
// checks are in output_dirs.cpp.
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/base/hdf5_lock.hpp"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <type_traits>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/h5_id.hpp"
#include "pipetrain/base/quiet_hdf5.hpp"
#include "pipetrain/io/checkpoint.hpp"

namespace pt {

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

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// peak_bytes_<category> for every MemCategory, then peak_bytes_total: the
// order of a StepRecord's per-stage values.
std::vector<std::string> stage_series_names() {
  std::vector<std::string> names;
  for (int c = 0; c < static_cast<int>(MemCategory::Count); ++c)
    names.push_back(std::string("peak_bytes_") + category_name(static_cast<MemCategory>(c)));
  names.push_back("peak_bytes_total");
  return names;
}

}  // namespace

MetricsFile::MetricsFile(std::string path, std::string resolved_deck)
    : path_(std::move(path)), deck_(std::move(resolved_deck)) {
  for (const char* name : {"loss", "lr", "grad_norm", "step_time_s", "samples_per_s", "eval_loss",
                           "bubble", "loss_scale", "skipped", "rebalance_ratio",
                           "rebalance_predicted_ratio", "micro_batches", "replan_deviation",
                           "replan_gain", "replan_switched"})
    series_[name] = {};
  for (const std::string& name : stage_series_names()) stage_series_[name] = {};
  stage_series_["partition"] = {};
  stage_series_["stage_compute_s"] = {};
}

void MetricsFile::set_attribute(const std::string& name, const std::string& value) {
  text_attrs_[name] = value;
  dirty_ = true;
}

void MetricsFile::set_attribute(const std::string& name, const std::vector<int64_t>& values) {
  int_attrs_[name] = values;
  dirty_ = true;
}

void MetricsFile::set_attribute(const std::string& name, const std::vector<double>& values) {
  float_list_attrs_[name] = values;
  dirty_ = true;
}

void MetricsFile::set_attribute(const std::string& name, double value) {
  float_attrs_[name] = value;
  dirty_ = true;
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
  series_["loss_scale"].push_back(rec.loss_scale);
  series_["skipped"].push_back(rec.skipped ? 1.0 : 0.0);
  series_["rebalance_ratio"].push_back(rec.rebalance_ratio);
  series_["rebalance_predicted_ratio"].push_back(rec.rebalance_predicted_ratio);
  series_["micro_batches"].push_back(static_cast<double>(rec.micro_batches));
  series_["replan_deviation"].push_back(rec.replan_deviation);
  series_["replan_gain"].push_back(rec.replan_gain);
  series_["replan_switched"].push_back(rec.replan_switched ? 1.0 : 0.0);
  stage_series_["partition"].emplace_back(rec.partition.begin(), rec.partition.end());
  stage_series_["stage_compute_s"].push_back(rec.rank_compute_s);
  const std::vector<std::string> names = stage_series_names();
  for (size_t c = 0; c < names.size(); ++c) {
    std::vector<double> per_stage;
    for (const auto& stage : rec.rank_peak_bytes) per_stage.push_back(stage[c]);
    stage_series_[names[c]].push_back(per_stage);
  }
  dirty_ = true;
}

namespace {

// ---- writing ---------------------------------------------------------------

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

void write_double_list_attr(hid_t obj, const std::string& name, const std::vector<double>& values) {
  hsize_t dims[1] = {values.size()};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  hid_t attr = H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5_CHECK(attr);
  if (!values.empty()) H5_CHECK(H5Awrite(attr, H5T_NATIVE_DOUBLE, values.data()));
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

// (steps, stages) float64 from one row per step; a shorter row (a run
// segment with fewer stages) is padded with NaN.
void write_matrix(hid_t file, const std::string& name, const std::vector<std::vector<double>>& rows) {
  size_t stages = 0;
  for (const auto& row : rows) stages = std::max(stages, row.size());
  const size_t steps = rows.size();
  std::vector<double> data(steps * stages, kNaN);
  for (size_t t = 0; t < steps; ++t) std::copy(rows[t].begin(), rows[t].end(), data.begin() + t * stages);
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

void MetricsFile::write() {
  Hdf5Lock lock;  // see hdf5_lock.hpp
  const std::string tmp = path_ + ".tmp";
  hid_t file = H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) throw Error("cannot create " + tmp);
  write_string_attr(file, "deck", deck_);
  for (const auto& [name, value] : text_attrs_) write_string_attr(file, name, value);
  for (const auto& [name, values] : int_attrs_) write_int_attr(file, name, values);
  for (const auto& [name, value] : float_attrs_) write_double_attr(file, name, value);
  for (const auto& [name, values] : float_list_attrs_) write_double_list_attr(file, name, values);
  write_dataset(file, "step", H5T_NATIVE_INT64, step_.data(), step_.size());
  for (const auto& [name, values] : series_)
    write_dataset(file, name, H5T_NATIVE_DOUBLE, values.data(), values.size());
  for (const auto& [name, rows] : stage_series_) write_matrix(file, name, rows);
  H5_CHECK(H5Fclose(file));
  fsync_path(tmp);
  rename_or_throw(tmp, path_);
  dirty_ = false;
}

void MetricsFile::flush() {
  Hdf5Lock lock;  // see hdf5_lock.hpp
  if (dirty_) write();
}

namespace {

// ---- reading an earlier file -----------------------------------------------

// The whole dataset `name` as `mem_type`, with its shape; false when absent
// or unreadable.
template <typename T>
bool read_all(hid_t file, const std::string& name, hid_t mem_type, std::vector<T>& out,
              std::vector<hsize_t>& dims) {
  if (H5Lexists(file, name.c_str(), H5P_DEFAULT) <= 0) return false;
  hid_t dset = H5Dopen2(file, name.c_str(), H5P_DEFAULT);
  if (dset < 0) return false;
  hid_t space = H5Dget_space(dset);
  const int rank = H5Sget_simple_extent_ndims(space);
  dims.assign(static_cast<size_t>(std::max(rank, 0)), 0);
  if (rank > 0) H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  size_t count = rank < 0 ? 0 : 1;
  for (hsize_t d : dims) count *= d;
  out.resize(count);
  const herr_t rc = count ? H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) : 0;
  H5Sclose(space);
  H5Dclose(dset);
  return rank >= 0 && rc >= 0;
}

// A 1-D int64 attribute; empty when absent.
std::vector<int64_t> read_int_attr(hid_t obj, const std::string& name) {
  std::vector<int64_t> values;
  if (H5Aexists(obj, name.c_str()) <= 0) return values;
  hid_t attr = H5Aopen(obj, name.c_str(), H5P_DEFAULT);
  if (attr < 0) return values;
  hid_t space = H5Aget_space(attr);
  const hssize_t n = H5Sget_simple_extent_npoints(space);
  values.resize(static_cast<size_t>(std::max<hssize_t>(n, 0)));
  if (!values.empty() && H5Aread(attr, H5T_NATIVE_INT64, values.data()) < 0) values.clear();
  H5Sclose(space);
  H5Aclose(attr);
  return values;
}

// Inclusive ranges (first, last pairs) of the steps 0..end-1 absent from
// the sorted, distinct `steps`.
std::vector<int64_t> missing_ranges(const std::vector<int64_t>& steps, int64_t end) {
  std::vector<int64_t> gaps;
  int64_t next = 0;
  for (int64_t s : steps) {
    if (s > next) gaps.insert(gaps.end(), {next, s - 1});
    next = s + 1;
  }
  if (next < end) gaps.insert(gaps.end(), {next, end - 1});
  return gaps;
}

std::string ranges_text(const std::vector<int64_t>& pairs) {
  std::string text;
  for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
    text += text.empty() ? "" : ", ";
    text += pairs[i] == pairs[i + 1] ? std::to_string(pairs[i])
                                     : std::to_string(pairs[i]) + ".." + std::to_string(pairs[i + 1]);
  }
  return text;
}

}  // namespace

// Reads every series of an earlier metrics.h5 in place of this one's. A
// series the file lacks (an older file) reads as NaN; one it holds in
// another shape, or that cannot be read, makes the whole file unreadable
// (an Error: the caller moves it aside), never NaN in place of its rows.
// Nothing is replaced unless the whole file reads.
void MetricsFile::load(const std::string& path) {
  Hdf5Lock lock;  // see hdf5_lock.hpp
  QuietHdf5 quiet;
  H5Id file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) throw Error("not an HDF5 file");
  auto present = [&](const std::string& name) { return H5Lexists(file.get(), name.c_str(), H5P_DEFAULT) > 0; };
  std::vector<hsize_t> dims;
  std::vector<int64_t> steps;
  if (!read_all(file.get(), "step", H5T_NATIVE_INT64, steps, dims) || dims.size() != 1)
    throw Error("no 1-D integer dataset 'step'");
  const size_t n = steps.size();
  auto series = series_;
  for (auto& [name, values] : series) {
    if (!present(name)) {
      values.assign(n, kNaN);
      continue;
    }
    if (!read_all(file.get(), name, H5T_NATIVE_DOUBLE, values, dims) || dims.size() != 1 || values.size() != n)
      throw Error("dataset '" + name + "' is not a 1-D number series of the " + std::to_string(n) +
                  " rows of 'step'");
  }
  auto stage_series = stage_series_;
  for (auto& [name, rows] : stage_series) {
    rows.assign(n, {});
    if (!present(name)) continue;  // empty rows: written as NaN
    std::vector<double> flat;
    if (!read_all(file.get(), name, H5T_NATIVE_DOUBLE, flat, dims) || dims.size() != 2 || dims[0] != n)
      throw Error("dataset '" + name + "' is not a (steps, stages) number array of the " + std::to_string(n) +
                  " rows of 'step'");
    for (size_t t = 0; t < n; ++t) rows[t].assign(flat.begin() + t * dims[1], flat.begin() + (t + 1) * dims[1]);
  }
  int_attrs_["resumed_at_steps"] = read_int_attr(file.get(), "resumed_at_steps");
  step_.swap(steps);
  series_.swap(series);
  stage_series_.swap(stage_series);
}

// One row per step in 0..first_step-1, in step order; of two rows of one
// step (possible only in a file written otherwise) the later one is kept.
void MetricsFile::keep_rows_before(int64_t first_step) {
  std::map<int64_t, size_t> row_of;
  for (size_t i = 0; i < step_.size(); ++i)
    if (step_[i] >= 0 && step_[i] < first_step) row_of[step_[i]] = i;
  std::vector<size_t> rows;
  for (const auto& entry : row_of) rows.push_back(entry.second);
  auto pick = [&rows](auto& column) {
    std::remove_reference_t<decltype(column)> kept;
    for (size_t i : rows) kept.push_back(column[i]);
    column.swap(kept);
  };
  pick(step_);
  for (auto& [name, values] : series_) pick(values);
  for (auto& [name, per_stage] : stage_series_) pick(per_stage);
}

MetricsResume MetricsFile::continue_at(int64_t first_step) {
  MetricsResume r;
  r.path = path_;
  r.first_step = first_step;
  struct stat st {};
  if (stat(path_.c_str(), &st) == 0) {
    try {
      load(path_);
      r.found = true;
    } catch (const Error& e) {
      r.unreadable = e.what();
      r.set_aside = path_.substr(0, path_.size() - 3) + ".unreadable_" + std::to_string(first_step) + ".h5";
      rename_or_throw(path_, r.set_aside);
    }
  }
  const size_t rows_read = step_.size();
  keep_rows_before(first_step);
  r.kept = static_cast<int64_t>(step_.size());
  r.dropped = static_cast<int64_t>(rows_read - step_.size());
  r.missing = missing_ranges(step_, first_step);
  std::vector<int64_t>& resumes = int_attrs_["resumed_at_steps"];
  resumes.erase(std::remove_if(resumes.begin(), resumes.end(), [&](int64_t s) { return s >= first_step; }),
                resumes.end());
  resumes.push_back(first_step);
  if (r.complete()) int_attrs_.erase("missing_steps");
  else int_attrs_["missing_steps"] = r.missing;
  dirty_ = true;
  return r;
}

std::string MetricsResume::message() const {
  std::string text;
  if (complete()) {
    text = path + ": resuming at step " + std::to_string(first_step) + "; the rows of steps 0.." +
           std::to_string(first_step - 1) + " are kept";
  } else {
    const std::string why = !unreadable.empty() ? "the earlier file could not be read (" + unreadable +
                                                      ") and was moved to " + set_aside
                            : !found ? "there was no earlier metrics.h5"
                                     : "the earlier file lacks them";
    text = path + " has no rows for steps " + ranges_text(missing) + " (before the resume step " +
           std::to_string(first_step) + "): " + why + "; recorded in its attribute missing_steps";
  }
  if (dropped > 0) text += "; " + std::to_string(dropped) + " later row(s), redone now, dropped";
  return text;
}

}  // namespace pt
