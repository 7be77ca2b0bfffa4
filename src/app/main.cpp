// main.cpp: the pipetrain executable. A short driver: block the stop signals
// (a training run takes them between steps), make sure OpenBLAS runs the
// CPU's best kernels (which may restart the program, so before MPI), start
// MPI, run the command (src/app/driver.cpp), stop MPI.
//   mpirun -np 4 build/pipetrain train inputs/mlp.toml [--set section.key=value]
//   build/pipetrain validate inputs/mlp.toml --ranks 4 --print-schedule
#include <mpi.h>

#include "pipetrain/app/driver.hpp"
#include "pipetrain/base/gpu_environment.hpp"
#include "pipetrain/base/stop_signal.hpp"
#include "pipetrain/tensor/blas_info.hpp"

int main(int argc, char** argv) {
  pt::block_stop_signals();  // before any thread starts (stop_signal.hpp)
  pt::prepare_gpu_process_environment();  // before a CUDA-aware MPI_Init starts CUDA
  const std::string blas_note = pt::select_blas_kernel(argc, argv);
  MPI_Init(&argc, &argv);
  const int status = pt::run_main(argc, argv, MPI_COMM_WORLD, blas_note);
  MPI_Finalize();
  return status;
}
