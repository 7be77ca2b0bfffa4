// blas_threads.hpp: how many BLAS threads each rank of a node runs, from
// training.blas_threads or the cores the node's ranks share.
#pragma once

#include <mpi.h>

#include <cstdint>

namespace pt {

// BLAS threads for this rank: `requested` (training.blas_threads), or with 0
// node cores / ranks on the node.
struct BlasThreadsChoice {
  int threads = 1;
  int node_cores = 1;
  int ranks_on_node = 1;
  bool automatic = true;
};
BlasThreadsChoice choose_blas_threads(int64_t requested, MPI_Comm comm);
// The cores this node's ranks share: PIPETRAIN_NODE_CORES when set, else the
// CPUs online. InputError for a value that is not a positive integer.
int node_cores();

}  // namespace pt
