// context.hpp: the per-process CUDA state shared by the backend, the tensor
// memory hooks and the transports (internal to pt_cuda).
//
// One device per process, one compute stream (non-blocking: it never
// serialises with the legacy default stream) carrying every kernel, cuBLAS
// call and tensor copy, one cuBLAS handle bound to it, and an error word in
// mapped pinned host memory that kernels set when they meet invalid input
// (a token or label out of range); it is read at every synchronisation.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

namespace pt::cuda {

// Bits of the device error word.
enum DeviceErrorBits : unsigned {
  kBadToken = 1u,  // embedding: token outside [0, V)
  kBadLabel = 2u,  // cross-entropy: label outside [0, classes)
};

struct Context {
  int device = -1;
  cudaStream_t compute = nullptr;
  cublasHandle_t cublas = nullptr;
  unsigned* error_word = nullptr;         // device view of the mapped word
  volatile unsigned* error_host = nullptr;  // host view of the same word
  double* readback = nullptr;             // pinned host: small results of reductions
};

// Creates the context on `device` (once per process; a second call with
// another device throws) and registers Device::CUDA tensor memory.
void create_context(int device);
bool context_ready();
// The context, with its device made current on the calling thread.
// Throws when select_device / init_device has not run.
Context& context();

// Synchronises the compute stream, then throws if a kernel flagged bad input.
void sync_and_check();
// Waits for the compute stream under a DeadlineScope naming `what`: every
// host wait for it is bounded, since a receive ordered on the device can
// hold the stream (context.cpp).
void wait_for_compute_stream(const char* what);
// The same bound for any other stream.
void wait_for_stream(cudaStream_t stream, const char* what);
// Whether the work before `event` has finished (cudaEventQuery, for polls):
// "not ready" is cleared from the runtime's last error so that the next
// launch check does not see it; any other failure throws.
bool event_completed(cudaEvent_t event);

// Registers the Device::CUDA hooks of pipetrain/tensor/tensor.hpp (device_memory.cpp).
void install_memory_hooks();

}  // namespace pt::cuda
