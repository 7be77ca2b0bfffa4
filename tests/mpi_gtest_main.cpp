// mpi_gtest_main.cpp: GoogleTest main for tests that run under mpirun.
// Only rank 0 prints; a failure on any rank makes every rank exit non-zero.
#include <gtest/gtest.h>
#include <mpi.h>

#include "pipetrain/base/gpu_environment.hpp"

int main(int argc, char** argv) {
  pt::prepare_gpu_process_environment();  // before a CUDA-aware MPI_Init starts CUDA
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int local_failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = 0;
  MPI_Allreduce(&local_failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (local_failed) std::fprintf(stderr, "rank %d: tests FAILED\n", rank);
  MPI_Finalize();
  return any_failed;
}
