// blas_threads.cpp: the BLAS threads of a rank (runtime/blas_threads.hpp).
#include "pipetrain/runtime/blas_threads.hpp"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

// The cores of this node that its ranks share: PIPETRAIN_NODE_CORES when set
// (a positive integer; e.g. a node share smaller than the CPUs online), else
// the CPUs online.
int node_cores() {
  if (const char* env = std::getenv("PIPETRAIN_NODE_CORES")) {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end == env || *end != '\0' || v < 1 || v > 1 << 20)
      throw InputError(std::string("PIPETRAIN_NODE_CORES = \"") + env +
                       "\": expected a positive integer (the cores this node's ranks share)");
    return static_cast<int>(v);
  }
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

BlasThreadsChoice choose_blas_threads(int64_t requested, MPI_Comm comm) {
  BlasThreadsChoice c;
  c.ranks_on_node = node_local_size(comm, "the node-local communicator split (BLAS threads)");
  c.node_cores = node_cores();
  c.automatic = requested == 0;
  c.threads = c.automatic ? std::max(1, c.node_cores / c.ranks_on_node) : static_cast<int>(requested);
  return c;
}

}  // namespace pt
