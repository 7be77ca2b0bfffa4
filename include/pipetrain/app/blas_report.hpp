// blas_report.hpp: every rank's BLAS and CPU, gathered for the run header
// and the outputs, so that every figure names the kernels it ran on.
#pragma once

#include <mpi.h>

#include <string>

#include "pipetrain/tensor/blas_info.hpp"

namespace pt {

struct BlasReport {
  BlasInfo rank0;     // rank 0's BLAS (metrics.h5 attributes)
  std::string lines;  // rank 0: one line per distinct BLAS/CPU, with its ranks
  bool any_fallback = false;
};

// Collective over comm. `selection_note` is what select_blas_kernel said on
// this rank (the same on every rank of one kind of node).
BlasReport gather_blas_report(MPI_Comm comm, const std::string& selection_note);

}  // namespace pt
