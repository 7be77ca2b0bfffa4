// h5_fixture.hpp: reading the PyTorch reference fixtures of tests/reference
// (gpt_tiny.h5, cnn_tiny.h5) with the HDF5 C API: datasets as tensors or
// doubles, attributes of the file or of a group. Shared by
// test_gpt_reference.cpp and test_cnn_reference.cpp.
#pragma once

#include <hdf5.h>

#include <string>
#include <type_traits>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt::test {

// The directory of the fixtures, from this header's path.
inline std::string reference_fixture(const std::string& file) {
  std::string here = __FILE__;
  return here.substr(0, here.find_last_of('/')) + "/reference/" + file;
}

class H5Fixture {
 public:
  explicit H5Fixture(const std::string& path) {
    file_ = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file_ < 0) throw Error("cannot open fixture " + path);
  }
  ~H5Fixture() { H5Fclose(file_); }
  H5Fixture(const H5Fixture&) = delete;
  H5Fixture& operator=(const H5Fixture&) = delete;

  bool has(const std::string& name) const {
    return H5Lexists(file_, name.c_str(), H5P_DEFAULT) > 0;
  }

  // A dataset as a host tensor of `dtype` (F32 or I32; HDF5 converts).
  Tensor read(const std::string& name, DType dtype) const {
    hid_t ds = open(name);
    hid_t space = H5Dget_space(ds);
    int nd = H5Sget_simple_extent_ndims(space);
    hsize_t dims[8] = {};
    H5Sget_simple_extent_dims(space, dims, nullptr);
    Shape shape(dims, dims + nd);
    Tensor t = Tensor::empty(shape, dtype);
    H5_CHECK(H5Dread(ds, dtype == DType::F32 ? H5T_NATIVE_FLOAT : H5T_NATIVE_INT32, H5S_ALL,
                     H5S_ALL, H5P_DEFAULT, t.raw()));
    H5Sclose(space);
    H5Dclose(ds);
    return t;
  }

  // A dataset's values as doubles, in row-major order.
  std::vector<double> read_f64(const std::string& name) const {
    hid_t ds = open(name);
    hid_t space = H5Dget_space(ds);
    std::vector<double> v(static_cast<size_t>(H5Sget_simple_extent_npoints(space)));
    H5_CHECK(H5Dread(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()));
    H5Sclose(space);
    H5Dclose(ds);
    return v;
  }

  // A variable-length string attribute (as h5py writes a Python str) of the
  // file (object ".") or of a group.
  std::string string_attr(const char* name, const std::string& object = ".") const {
    hid_t a = open_attr(name, object);
    hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    H5Tset_cset(type, H5T_CSET_UTF8);
    char* buf = nullptr;
    H5_CHECK(H5Aread(a, type, &buf));
    std::string out = buf ? buf : "";
    H5free_memory(buf);
    H5Tclose(type);
    H5Aclose(a);
    return out;
  }

  template <typename T>
  T attr(const char* name, const std::string& object = ".") const {
    hid_t a = open_attr(name, object);
    T v{};
    H5_CHECK(H5Aread(a, std::is_integral<T>::value ? H5T_NATIVE_INT64 : H5T_NATIVE_DOUBLE, &v));
    H5Aclose(a);
    return v;
  }

 private:
  hid_t open(const std::string& name) const {
    if (!has(name)) throw Error("fixture has no dataset " + name);
    return H5Dopen2(file_, name.c_str(), H5P_DEFAULT);
  }
  hid_t open_attr(const char* name, const std::string& object) const {
    if (H5Aexists_by_name(file_, object.c_str(), name, H5P_DEFAULT) <= 0)
      throw Error("fixture has no attribute " + object + "/" + name);
    return H5Aopen_by_name(file_, object.c_str(), name, H5P_DEFAULT, H5P_DEFAULT);
  }

  hid_t file_ = -1;
};

}  // namespace pt::test
