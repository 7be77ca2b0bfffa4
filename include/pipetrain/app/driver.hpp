// driver.hpp: the commands of the pipetrain executable (train, validate).
#pragma once

#include <mpi.h>

namespace pt {

// Runs the command line on every rank of `comm`; returns the exit status.
// Input errors found before training agree across ranks (status 2, no
// abort); any failure during training aborts the whole job.
int run_main(int argc, char** argv, MPI_Comm comm);

}  // namespace pt
