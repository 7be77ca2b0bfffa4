// cudnn_check.hpp: CUDNN_CHECK, the one error check of every cuDNN call,
// and CudnnHandle, the lazily made handle of the kernel groups that use cuDNN
// (internal to pt_cuda): cuDNN's own functions return a cudnnStatus_t,
// which fails through fail_cudnn (check.hpp) with file:line, the call and
// cuDNN's message, as CUDA_CHECK does for the runtime. Only cudnn.h here;
// the frontend's overload of the same check (its graph calls return a
// cudnn_frontend::error_t) is in cudnn_frontend_check.hpp, so the files that
// use the legacy API alone (cuda_conv.cpp) do not compile the frontend.
#pragma once

#include <cudnn.h>

#include "check.hpp"

namespace pt::cuda {

inline void check_cudnn(cudnnStatus_t status, const char* file, int line, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) fail_cudnn(file, line, call, cudnnGetErrorString(status));
}

}  // namespace pt::cuda

#define CUDNN_CHECK(call) ::pt::cuda::check_cudnn((call), __FILE__, __LINE__, #call)

namespace pt::cuda {

// A cuDNN handle made on first use (a kernel group that never calls cuDNN
// never creates one) and bound to `stream`; destroyed with its owner, its
// status unchecked: that may run at exit, after CUDA shut down.
class CudnnHandle {
 public:
  explicit CudnnHandle(cudaStream_t stream) : stream_(stream) {}
  ~CudnnHandle() {
    if (handle_ != nullptr) cudnnDestroy(handle_);
  }
  CudnnHandle(const CudnnHandle&) = delete;
  CudnnHandle& operator=(const CudnnHandle&) = delete;
  cudnnHandle_t get() {
    if (handle_ == nullptr) {
      CUDNN_CHECK(cudnnCreate(&handle_));
      CUDNN_CHECK(cudnnSetStream(handle_, stream_));
    }
    return handle_;
  }

 private:
  cudaStream_t stream_;
  cudnnHandle_t handle_ = nullptr;
};

}  // namespace pt::cuda
