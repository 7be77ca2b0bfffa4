// driver.hpp: the commands of the pipetrain executable (train, validate, profile, plan, sample).
#pragma once

#include <mpi.h>

#include <string>

namespace pt {

// Runs the command line on every rank of `comm`; returns the exit status.
// Input errors found before training agree across ranks (status 2, no
// abort); any failure during training aborts the whole job. `blas_note` is
// what select_blas_kernel said before MPI_Init (logged with the run header).
int run_main(int argc, char** argv, MPI_Comm comm, const std::string& blas_note = "");

}  // namespace pt
