// cudnn_check.hpp: CUDNN_CHECK, the one error check of every cuDNN call
// (internal to pt_cuda): the library's own functions return a
// cudnnStatus_t, the frontend's graph calls a cudnn_frontend::error_t; both
// fail through fail_cudnn (check.hpp) with file:line, the call and cuDNN's
// message, as CUDA_CHECK does for the runtime. Includes the frontend, so
// only the files that use cuDNN include it.
#pragma once

#include <cudnn_frontend.h>

#include "check.hpp"

namespace pt::cuda {

inline void check_cudnn(cudnnStatus_t status, const char* file, int line, const char* call) {
  if (status != CUDNN_STATUS_SUCCESS) fail_cudnn(file, line, call, cudnnGetErrorString(status));
}

// By value: the frontend's get_message() is not const.
inline void check_cudnn(cudnn_frontend::error_t error, const char* file, int line,
                        const char* call) {
  if (error.is_bad()) fail_cudnn(file, line, call, error.get_message());
}

}  // namespace pt::cuda

#define CUDNN_CHECK(call) ::pt::cuda::check_cudnn((call), __FILE__, __LINE__, #call)
