// check.cpp: the failure helpers behind CUDA_CHECK, CUBLAS_CHECK, NCCL_CHECK
// and CUDNN_CHECK, and check_on_gpu.
#include "check.hpp"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

namespace pt::cuda {

void fail_cuda(const char* file, int line, const char* call, int code) {
  const auto err = static_cast<cudaError_t>(code);
  ::pt::fail_at(file, line, std::string(call) + " failed: " + cudaGetErrorName(err) + ": " +
                                cudaGetErrorString(err));
}

void fail_cublas(const char* file, int line, const char* call, int code) {
  const auto status = static_cast<cublasStatus_t>(code);
  ::pt::fail_at(file, line, std::string(call) + " failed: " + cublasGetStatusName(status) +
                                ": " + cublasGetStatusString(status));
}

void fail_nccl(const char* file, int line, const char* call, int code) {
  const auto result = static_cast<ncclResult_t>(code);
  std::string msg = std::string(call) + " failed: " + ncclGetErrorString(result);
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') msg += " (" + std::string(last) + ")";
  ::pt::fail_at(file, line, msg);
}

void fail_cudnn(const char* file, int line, const char* call, const std::string& message) {
  ::pt::fail_at(file, line, std::string(call) + " failed: cuDNN: " + message);
}

void check_on_gpu(const Tensor& t, const char* what) {
  PT_CHECK(t.device() == Device::CUDA,
           std::string("CUDA backend: ") + what + " " + shape_string(t.shape()) +
               " is not on the GPU (move it with Tensor::to(Device::CUDA))");
}

void check_on_gpu(std::initializer_list<const Tensor*> tensors, const char* what) {
  for (const Tensor* t : tensors) check_on_gpu(*t, what);
}

}  // namespace pt::cuda
