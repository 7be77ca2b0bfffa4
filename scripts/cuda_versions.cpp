// cuda_versions.cpp: the tiny query scripts/gpu-check.sh compiles with nvcc
// and runs before anything else: the CUDA runtime this toolkit links, the
// newest CUDA the installed driver supports, and the visible devices. Exit
// status 0 only when the driver is new enough and at least one device is
// visible, so a driver too old for the runtime (every GPU test would skip)
// is reported at the top, not discovered as a column of skips.
#include <cuda_runtime.h>

#include <cstdio>

int main() {
  int runtime = 0, driver = 0, devices = 0;
  cudaRuntimeGetVersion(&runtime);
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess) devices = 0;
  std::printf("CUDA runtime %d.%d; driver supports CUDA %d.%d%s; visible devices %d%s%s\n",
              runtime / 1000, runtime / 10 % 100, driver / 1000, driver / 10 % 100,
              driver == 0 ? " (no driver)" : (driver < runtime ? " (TOO OLD for the runtime)" : ""),
              devices, rc == cudaSuccess ? "" : ": ", rc == cudaSuccess ? "" : cudaGetErrorString(rc));
  std::printf("RESULT cuda_runtime %d.%d\nRESULT cuda_driver %d.%d\nRESULT cuda_devices %d\n",
              runtime / 1000, runtime / 10 % 100, driver / 1000, driver / 10 % 100, devices);
  return driver >= runtime && driver > 0 && devices > 0 ? 0 : 1;
}
