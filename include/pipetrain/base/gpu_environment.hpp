// gpu_environment.hpp: what a process tells the CUDA driver before anything
// in it can start CUDA. A CUDA-aware MPI initialises CUDA inside MPI_Init, so
// main (and the MPI test main) call this before MPI_Init; it is plain
// setenv, so the CPU build calls it too, harmlessly.
#pragma once

namespace pt {

// Where the user has not set them: CUDA_MODULE_LOADING=EAGER (every kernel
// loaded when the context is created, so no lazy load, which synchronises
// the context, can happen while NCCL kernels wait for a peer) and
// CUDA_DEVICE_MAX_CONNECTIONS=32 (enough hardware queues that the process's
// streams never share one; docs/cuda.md).
void prepare_gpu_process_environment();

}  // namespace pt
