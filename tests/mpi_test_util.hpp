// mpi_test_util.hpp: small helpers shared by the MPI tests.
#pragma once

#include <mpi.h>

namespace pt::test {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

inline bool is_root() { return world_rank() == 0; }

}  // namespace pt::test
