// cudnn_check.hpp: CUDNN_CHECK, the one error check of every cuDNN call
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
