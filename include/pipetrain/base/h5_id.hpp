// h5_id.hpp: H5Id, the owner of one HDF5 identifier (file, dataset, space,
// type, attribute), closed with its matching H5?close when it goes. Every
// layer that reads or writes HDF5 (the data readers of the model layer, the
// file formats of io) holds its identifiers in it, so that an error thrown
// half-way never leaks one.
#pragma once

#include <hdf5.h>

namespace pt {

class H5Id {
 public:
  using Closer = herr_t (*)(hid_t);
  H5Id() = default;
  H5Id(hid_t id, Closer close) : id_(id), close_(close) {}
  H5Id(H5Id&& other) noexcept : id_(other.id_), close_(other.close_) { other.id_ = -1; }
  H5Id& operator=(H5Id&& other) noexcept;
  H5Id(const H5Id&) = delete;
  H5Id& operator=(const H5Id&) = delete;
  ~H5Id() { reset(); }
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  herr_t reset();  // closes now; returns the close status (0 when nothing open)

 private:
  hid_t id_ = -1;
  Closer close_ = nullptr;
};

}  // namespace pt
