// check.hpp: one error-check macro per GPU library, each carrying file:line
// like PT_CHECK (pt::fail_at): CUDA_CHECK (runtime), CUBLAS_CHECK, NCCL_CHECK
// (and CUDNN_CHECK in cudnn_check.hpp, which needs cuDNN's headers).
// Library headers are not needed here: every status type is an enum whose
// success value is 0, and the text is looked up in check.cpp. Also the one
// precondition the CUDA kernels add to the shape checks: tensors on the GPU.
#pragma once

#include <initializer_list>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt::cuda {

[[noreturn]] void fail_cuda(const char* file, int line, const char* call, int code);
[[noreturn]] void fail_cublas(const char* file, int line, const char* call, int code);
[[noreturn]] void fail_nccl(const char* file, int line, const char* call, int code);
// cuDNN's failures (CUDNN_CHECK, cudnn_check.hpp), with cuDNN's message.
[[noreturn]] void fail_cudnn(const char* file, int line, const char* call, const std::string& message);

// Error naming `what` and its shape unless t is Device::CUDA.
void check_on_gpu(const Tensor& t, const char* what);
// The same for each of `tensors`.
void check_on_gpu(std::initializer_list<const Tensor*> tensors, const char* what);

}  // namespace pt::cuda

#define CUDA_CHECK(call)                                                        \
  do {                                                                          \
    const int pt_cuda_rc_ = static_cast<int>(call);                             \
    if (pt_cuda_rc_ != 0) ::pt::cuda::fail_cuda(__FILE__, __LINE__, #call, pt_cuda_rc_); \
  } while (0)

#define CUBLAS_CHECK(call)                                                      \
  do {                                                                          \
    const int pt_cublas_rc_ = static_cast<int>(call);                           \
    if (pt_cublas_rc_ != 0)                                                     \
      ::pt::cuda::fail_cublas(__FILE__, __LINE__, #call, pt_cublas_rc_);        \
  } while (0)

#define NCCL_CHECK(call)                                                        \
  do {                                                                          \
    const int pt_nccl_rc_ = static_cast<int>(call);                             \
    if (pt_nccl_rc_ != 0) ::pt::cuda::fail_nccl(__FILE__, __LINE__, #call, pt_nccl_rc_); \
  } while (0)
