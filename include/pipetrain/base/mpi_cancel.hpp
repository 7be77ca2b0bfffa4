// mpi_cancel.hpp: withdrawing an MPI request whose buffer is about to be
// given back (a transfer dropped on an error path).
//
// MPI_Cancel only marks a request; MPI may go on reading a send buffer or
// writing a receive buffer until the request completes. Freeing the request
// (MPI_Request_free) does not end that either. So the buffer may be reused
// only once the cancelled request has completed, which cancel_request waits
// for, for a bounded time: a cancelled receive completes at once in practice;
// a send may not be cancellable at all (Open MPI does not cancel sends that
// were not delivered), and then only its receiver can complete it.
#pragma once

#include <mpi.h>

namespace pt {

enum class CancelOutcome {
  Cancelled,    // withdrawn: the buffer is free and no data moved
  Completed,    // it had completed, or completed meanwhile: the buffer is free
  StillActive,  // not settled in time: freed with MPI_Request_free, but MPI
                // may still use the buffer; never reuse that memory
};

// MPI_Cancel, then MPI_Test until the request completes or limit_s passes
// (StillActive: MPI_Request_free). An MPI_REQUEST_NULL request is Completed.
// After MPI_Finalize nothing is called and the outcome is StillActive.
// `request` is MPI_REQUEST_NULL afterwards. Never throws.
CancelOutcome cancel_request(MPI_Request& request, double limit_s);

}  // namespace pt
