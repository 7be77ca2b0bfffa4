// main.cpp: the pipetrain executable. A short driver: start MPI, run the
// command (src/app/driver.cpp), stop MPI.
//   mpirun -np 4 build/pipetrain train inputs/mlp.toml [--set section.key=value]
//   build/pipetrain validate inputs/mlp.toml --ranks 4 --print-schedule
#include <mpi.h>

#include "pipetrain/app/driver.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  const int status = pt::run_main(argc, argv, MPI_COMM_WORLD);
  MPI_Finalize();
  return status;
}
