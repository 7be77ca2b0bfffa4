// checkpoint_h5.cpp: pieces shared by the checkpoint writer and reader: names
// on disk, CRC-32, HDF5 attribute and dataset helpers, durable file-system
// steps, and the MPI agreement on a problem found by some ranks.
#include "checkpoint_h5.hpp"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt::ckpt {

namespace fs = std::filesystem;

std::string step_dir_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

bool parse_step_dir_name(const std::string& name, int64_t& step) {
  const std::string prefix = "step_";
  if (name.size() < prefix.size() + 8 || name.compare(0, prefix.size(), prefix) != 0) return false;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return false;
  step = std::stoll(digits);
  return true;
}

std::string stage_file_name(int stage) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "stage_%03d.h5", stage);
  return buf;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string list_names(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 5; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 5) text += " and " + std::to_string(names.size() - 5) + " more";
  return text;
}

// zlib takes at most 4 GiB - 1 per call (uInt); larger buffers go in pieces.
uint32_t crc32_of(const void* data, size_t bytes, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (bytes > 0) {
    const size_t piece = std::min<size_t>(bytes, 1u << 30);
    c = crc32(c, p, static_cast<uInt>(piece));
    p += piece;
    bytes -= piece;
  }
  return static_cast<uint32_t>(c);
}

// ---- HDF5 ------------------------------------------------------------------

namespace {

void write_attr_raw(hid_t obj, const std::string& name, hid_t file_type, hid_t mem_type,
                    hid_t space, const void* value) {
  H5Id attr(H5Acreate2(obj, name.c_str(), file_type, space, H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
  H5_CHECK(attr.get());
  H5_CHECK(H5Awrite(attr.get(), mem_type, value));
}

H5Id variable_string_type() {
  H5Id type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5_CHECK(type.get());
  H5_CHECK(H5Tset_size(type.get(), H5T_VARIABLE));
  H5_CHECK(H5Tset_cset(type.get(), H5T_CSET_UTF8));
  return type;
}

// The attribute `name` of obj when it holds exactly one value.
H5Id open_scalar_attr(hid_t obj, const std::string& name) {
  if (H5Aexists(obj, name.c_str()) <= 0) return {};
  H5Id attr(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  if (!attr.valid()) return {};
  H5Id space(H5Aget_space(attr.get()), H5Sclose);
  if (!space.valid() || H5Sget_simple_extent_npoints(space.get()) != 1) return {};
  return attr;
}

}  // namespace

// Variable-length UTF-8, so that h5py gives back a str.
void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  H5Id type = variable_string_type();
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  const char* text = value.c_str();
  write_attr_raw(obj, name, type.get(), type.get(), space.get(), &text);
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  write_attr_raw(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, space.get(), &value);
}

void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values) {
  hsize_t dims[1] = {values.size()};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  write_attr_raw(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, space.get(), values.data());
}

void write_attr(hid_t obj, const std::string& name, double value) {
  H5Id space(H5Screate(H5S_SCALAR), H5Sclose);
  write_attr_raw(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, space.get(), &value);
}

bool read_attr(hid_t obj, const std::string& name, std::string& value) {
  H5Id attr = open_scalar_attr(obj, name);
  if (!attr.valid()) return false;
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_STRING) return false;
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Id mem = variable_string_type();
    char* text = nullptr;
    if (H5Aread(attr.get(), mem.get(), &text) < 0 || text == nullptr) return false;
    value = text;
    H5free_memory(text);
    return true;
  }
  std::string buf(H5Tget_size(type.get()), '\0');
  if (H5Aread(attr.get(), type.get(), buf.data()) < 0) return false;
  value = buf.substr(0, buf.find('\0'));
  return true;
}

bool read_attr(hid_t obj, const std::string& name, int64_t& value) {
  H5Id attr = open_scalar_attr(obj, name);
  if (!attr.valid()) return false;
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_INTEGER) return false;
  return H5Aread(attr.get(), H5T_NATIVE_INT64, &value) >= 0;
}

bool read_attr(hid_t obj, const std::string& name, double& value) {
  H5Id attr = open_scalar_attr(obj, name);
  if (!attr.valid()) return false;
  H5Id type(H5Aget_type(attr.get()), H5Tclose);
  if (H5Tget_class(type.get()) != H5T_FLOAT) return false;
  return H5Aread(attr.get(), H5T_NATIVE_DOUBLE, &value) >= 0;
}

H5Id untimed_group_plist() {
  H5Id plist(H5Pcreate(H5P_GROUP_CREATE), H5Pclose);
  H5_CHECK(plist.get());
  H5_CHECK(H5Pset_obj_track_times(plist.get(), 0));
  return plist;
}

H5Id untimed_dataset_plist() {
  H5Id plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5_CHECK(plist.get());
  H5_CHECK(H5Pset_obj_track_times(plist.get(), 0));
  return plist;
}

H5Id create_group(hid_t parent, const std::string& name) {
  H5Id plist = untimed_group_plist();
  H5Id group(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, plist.get(), H5P_DEFAULT), H5Gclose);
  H5_CHECK(group.get());
  return group;
}

std::vector<std::string> group_members(hid_t group) {
  std::vector<std::string> names;
  H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr,
             [](hid_t, const char* name, const H5L_info_t*, void* out) -> herr_t {
               static_cast<std::vector<std::string>*>(out)->push_back(name);
               return 0;
             },
             &names);
  return names;
}

bool has_link(hid_t loc, const std::string& path) {
  return H5Lexists(loc, path.c_str(), H5P_DEFAULT) > 0;
}

namespace {

H5Id create_list(hid_t group, const std::string& name, hid_t type, size_t n) {
  hsize_t dims[1] = {n};
  H5Id space(H5Screate_simple(1, dims, nullptr), H5Sclose);
  H5Id plist = untimed_dataset_plist();
  H5Id dset(H5Dcreate2(group, name.c_str(), type, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT),
            H5Dclose);
  H5_CHECK(dset.get());
  return dset;
}

// The one-dimensional dataset `name` of `cls` and its length.
H5Id open_list(hid_t group, const std::string& name, H5T_class_t cls, size_t& n) {
  if (!has_link(group, name)) return {};
  H5Id dset(H5Dopen2(group, name.c_str(), H5P_DEFAULT), H5Dclose);
  if (!dset.valid()) return {};
  H5Id type(H5Dget_type(dset.get()), H5Tclose);
  H5Id space(H5Dget_space(dset.get()), H5Sclose);
  if (!type.valid() || H5Tget_class(type.get()) != cls || !space.valid() ||
      H5Sget_simple_extent_ndims(space.get()) != 1)
    return {};
  n = static_cast<size_t>(H5Sget_simple_extent_npoints(space.get()));
  return dset;
}

}  // namespace

void write_list(hid_t group, const std::string& name, const std::vector<std::string>& values) {
  H5Id type = variable_string_type();
  H5Id dset = create_list(group, name, type.get(), values.size());
  std::vector<const char*> texts;
  for (const std::string& v : values) texts.push_back(v.c_str());
  if (!texts.empty())
    H5_CHECK(H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, texts.data()));
}

void write_list(hid_t group, const std::string& name, const std::vector<int64_t>& values) {
  H5Id dset = create_list(group, name, H5T_STD_I64LE, values.size());
  if (!values.empty())
    H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
}

void write_list(hid_t group, const std::string& name, const std::vector<double>& values) {
  H5Id dset = create_list(group, name, H5T_IEEE_F64LE, values.size());
  if (!values.empty())
    H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()));
}

bool read_list(hid_t group, const std::string& name, std::vector<std::string>& values) {
  size_t n = 0;
  H5Id dset = open_list(group, name, H5T_STRING, n);
  if (!dset.valid()) return false;
  values.assign(n, "");
  if (n == 0) return true;
  H5Id type(H5Dget_type(dset.get()), H5Tclose);
  if (H5Tis_variable_str(type.get()) > 0) {
    H5Id mem = variable_string_type();
    std::vector<char*> texts(n, nullptr);
    if (H5Dread(dset.get(), mem.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, texts.data()) < 0) return false;
    for (size_t i = 0; i < n; ++i) {
      values[i] = texts[i] ? texts[i] : "";
      H5free_memory(texts[i]);
    }
    return true;
  }
  const size_t width = H5Tget_size(type.get());
  std::string buf(n * width, '\0');
  if (H5Dread(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buf.data()) < 0) return false;
  for (size_t i = 0; i < n; ++i) {
    const std::string one = buf.substr(i * width, width);
    values[i] = one.substr(0, one.find('\0'));
  }
  return true;
}

bool read_list(hid_t group, const std::string& name, std::vector<int64_t>& values) {
  size_t n = 0;
  H5Id dset = open_list(group, name, H5T_INTEGER, n);
  if (!dset.valid()) return false;
  values.assign(n, 0);
  return n == 0 ||
         H5Dread(dset.get(), H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) >= 0;
}

namespace {

// Runs io(file space with the slab selected, memory space, first element) for
// slabs of whole rows of about 4 MiB, in order.
void for_each_slab(hid_t space, const Shape& shape,
                   const std::function<void(hid_t, hid_t, size_t, size_t)>& io) {
  const std::vector<hsize_t> dims(shape.begin(), shape.end());
  const size_t row = static_cast<size_t>(shape_numel(shape) / shape[0]);  // floats per row
  const hsize_t slab_rows = std::max<hsize_t>(1, (4u << 20) / (row * sizeof(float)));
  std::vector<hsize_t> start(dims.size(), 0), count = dims;
  for (hsize_t r = 0; r < dims[0]; r += slab_rows) {
    start[0] = r;
    count[0] = std::min(slab_rows, dims[0] - r);
    H5Id mem(H5Screate_simple(static_cast<int>(count.size()), count.data(), nullptr), H5Sclose);
    H5_CHECK(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr));
    io(space, mem.get(), r * row, count[0] * row);
  }
}

}  // namespace

// Slab by slab, each checksummed right before it is written, so the data
// crosses memory once (the CRC leaves the slab in cache for the copy into the
// page cache).
uint32_t write_f32(hid_t group, const std::string& name, const float* data, const Shape& shape) {
  PT_CHECK(!shape.empty() && shape_numel(shape) > 0, "checkpoint dataset " + name + " is empty");
  std::vector<hsize_t> dims(shape.begin(), shape.end());
  H5Id space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), H5Sclose);
  H5Id plist = untimed_dataset_plist();
  H5Id dset(H5Dcreate2(group, name.c_str(), H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, plist.get(),
                       H5P_DEFAULT),
            H5Dclose);
  H5_CHECK(dset.get());
  uint32_t crc = 0;
  for_each_slab(space.get(), shape, [&](hid_t file_space, hid_t mem, size_t first, size_t n) {
    crc = crc32_of(data + first, n * sizeof(float), crc);
    H5_CHECK(H5Dwrite(dset.get(), H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT, data + first));
  });
  write_attr(dset.get(), "crc32", static_cast<int64_t>(crc));
  return crc;
}

// Slab by slab, each checksummed while still in cache.
bool read_f32(hid_t dset, float* out, const Shape& shape, uint32_t& crc) {
  H5Id space(H5Dget_space(dset), H5Sclose);
  if (!space.valid()) return false;
  bool ok = true;
  crc = 0;
  for_each_slab(space.get(), shape, [&](hid_t file_space, hid_t mem, size_t first, size_t n) {
    if (!ok || H5Dread(dset, H5T_NATIVE_FLOAT, mem, file_space, H5P_DEFAULT, out + first) < 0) {
      ok = false;
      return;
    }
    crc = crc32_of(out + first, n * sizeof(float), crc);
  });
  return ok;
}

// ---- file system -----------------------------------------------------------

void fsync_path(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open " + path + " to fsync it: " + std::strerror(errno));
  const int rc = fsync(fd);
  const int err = errno;
  close(fd);
  if (rc != 0) throw Error("fsync of " + path + " failed: " + std::strerror(err));
}

void rename_path(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0)
    throw Error("cannot rename " + from + " to " + to + ": " + std::strerror(errno));
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  if (ec) throw Error("cannot remove " + path + ": " + ec.message());
}

bool is_directory(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

bool is_regular_file(const std::string& path) {
  std::error_code ec;
  return fs::is_regular_file(path, ec);
}

int64_t file_bytes(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? -1 : static_cast<int64_t>(size);
}

std::vector<std::string> directory_entries(const std::string& path) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// ---- agreement -------------------------------------------------------------

std::string broadcast_text(MPI_Comm comm, const std::string& text, int root) {
  long long size = static_cast<long long>(text.size());
  timed_bcast(&size, 1, MPI_LONG_LONG, root, comm, "a checkpoint text broadcast");
  std::string out = text;
  out.resize(static_cast<size_t>(size));
  if (size > 0)
    timed_bcast(out.data(), static_cast<int>(size), MPI_CHAR, root, comm,
                "a checkpoint text broadcast");
  return out;
}

Problem agree(MPI_Comm comm, const Problem& mine) {
  int worst = 0;
  timed_allreduce(&mine.kind, &worst, 1, MPI_INT, MPI_MAX, comm, "the checkpoint agreement");
  if (worst == 0) return {};
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  int candidate = mine.kind == worst ? rank : INT_MAX, first = 0;
  timed_allreduce(&candidate, &first, 1, MPI_INT, MPI_MIN, comm, "the checkpoint agreement");
  Problem out;
  out.kind = worst;
  out.message = broadcast_text(comm, mine.message, first);
  return out;
}

}  // namespace pt::ckpt
