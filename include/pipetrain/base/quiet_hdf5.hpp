// quiet_hdf5.hpp: QuietHdf5, which stops the HDF5 library printing its own
// error stack while in scope, for code that reports HDF5 failures itself
// (as one pt::InputError or pt::Error naming the file).
#pragma once

#include <hdf5.h>

namespace pt {

class QuietHdf5 {
 public:
  QuietHdf5() {
    H5Eget_auto2(H5E_DEFAULT, &func_, &data_);
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  }
  ~QuietHdf5() { H5Eset_auto2(H5E_DEFAULT, func_, data_); }
  QuietHdf5(const QuietHdf5&) = delete;
  QuietHdf5& operator=(const QuietHdf5&) = delete;

 private:
  H5E_auto2_t func_ = nullptr;
  void* data_ = nullptr;
};

}  // namespace pt
