// gpu_environment.cpp: the CUDA driver's environment, set before MPI_Init
// (gpu_environment.hpp).
#include "pipetrain/base/gpu_environment.hpp"

#include <cstdlib>

namespace pt {

namespace {

// Streams a process may drive at once: the compute stream, the staged
// transport's stream, four NCCL channel streams (to and from each
// neighbour), plus NCCL's own internal streams (a few per communicator, five
// communicators). The driver maps streams onto CUDA_DEVICE_MAX_CONNECTIONS
// hardware queues (8 by default); two streams on one queue serialise, so a
// NCCL receive kernel spinning for its peer could hold back the compute
// kernel that produces what the peer waits for. 32 is the driver's maximum
// and covers all of them.
constexpr const char* kMaxConnections = "32";

}  // namespace

void prepare_gpu_process_environment() {
  // setenv(..., 0) keeps a value the user set.
  setenv("CUDA_MODULE_LOADING", "EAGER", 0);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", kMaxConnections, 0);
}

}  // namespace pt
