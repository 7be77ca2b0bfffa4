// h5_id.cpp: H5Id's move and close (include/pipetrain/base/h5_id.hpp).
#include "pipetrain/base/h5_id.hpp"

namespace pt {

H5Id& H5Id::operator=(H5Id&& other) noexcept {
  if (this != &other) {
    reset();
    id_ = other.id_;
    close_ = other.close_;
    other.id_ = -1;
  }
  return *this;
}

herr_t H5Id::reset() {
  herr_t rc = 0;
  if (id_ >= 0 && close_ != nullptr) rc = close_(id_);
  id_ = -1;
  return rc;
}

}  // namespace pt
