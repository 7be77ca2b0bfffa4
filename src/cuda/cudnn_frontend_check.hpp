// cudnn_frontend_check.hpp: CUDNN_CHECK (cudnn_check.hpp) for the cuDNN
// frontend's graph calls too, whose cudnn_frontend::error_t fails through
// the same fail_cudnn with the frontend's message (internal to pt_cuda).
// Includes the frontend, so only the files that build graphs include it.
#pragma once

#include <cudnn_frontend.h>

#include "cudnn_check.hpp"

namespace pt::cuda {

// By value: the frontend's get_message() is not const.
inline void check_cudnn(cudnn_frontend::error_t error, const char* file, int line,
                        const char* call) {
  if (error.is_bad()) fail_cudnn(file, line, call, error.get_message());
}

}  // namespace pt::cuda
