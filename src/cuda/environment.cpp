// environment.cpp: what the process tells the CUDA driver before it starts
// (module loading and hardware queues), and the versions of the CUDA
// runtime, driver, cuBLAS and NCCL for the run log and scripts/gpu-check.sh.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "pipetrain/base/gpu_environment.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

// CUDA's encoding: 12040 = 12.4.
std::string cuda_dotted(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v / 10 % 100);
}

}  // namespace

void prepare_cuda_environment() { prepare_gpu_process_environment(); }

Versions versions() {
  prepare_cuda_environment();
  Versions v;
  if (cudaRuntimeGetVersion(&v.runtime) != cudaSuccess) v.runtime = 0;
  if (cudaDriverGetVersion(&v.driver) != cudaSuccess) v.driver = 0;
  (void)cudaGetLastError();
  int major = 0, minor = 0, patch = 0;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    v.cublas = major * 10000 + minor * 100 + patch;
  if (ncclGetVersion(&v.nccl) != ncclSuccess) v.nccl = 0;
  return v;
}

std::string Versions::describe() const {
  std::string out = "CUDA runtime " + cuda_dotted(runtime) + ", ";
  if (driver == 0) out += "no CUDA driver";
  else out += "driver supports CUDA " + cuda_dotted(driver);
  if (driver > 0 && !driver_supports_runtime()) out += " (too old for this runtime)";
  char tail[96];
  std::snprintf(tail, sizeof tail, ", cuBLAS %d.%d.%d, NCCL %d.%d.%d", cublas / 10000,
                cublas / 100 % 100, cublas % 100, nccl / 10000, nccl / 100 % 100, nccl % 100);
  return out + tail;
}

}  // namespace pt::cuda
