// mpi_cancel.cpp: cancel_request, the bounded withdrawal of an MPI request.
#include "pipetrain/base/mpi_cancel.hpp"

#include "pipetrain/base/timed_wait.hpp"

namespace pt {

CancelOutcome cancel_request(MPI_Request& request, double limit_s) {
  if (request == MPI_REQUEST_NULL) return CancelOutcome::Completed;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) {
    request = MPI_REQUEST_NULL;  // the library is gone; so is the request
    return CancelOutcome::StillActive;
  }
  MPI_Cancel(&request);
  MPI_Status status;
  int done = 0;
  const bool settled = poll_until(
      [&] { return MPI_Test(&request, &done, &status) != MPI_SUCCESS || done != 0; }, limit_s);
  if (!settled || done == 0) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
    request = MPI_REQUEST_NULL;
    return CancelOutcome::StillActive;
  }
  int cancelled = 0;
  MPI_Test_cancelled(&status, &cancelled);
  return cancelled ? CancelOutcome::Cancelled : CancelOutcome::Completed;
}

}  // namespace pt
