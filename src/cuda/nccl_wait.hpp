// nccl_wait.hpp: one poll of a pending NCCL operation, shared by the NCCL
// transport and the NCCL replica group (internal to pt_cuda). NCCL kernels
// never return an error by themselves: a peer that died or never posts its
// side leaves the operation pending forever. So every poll reads the
// communicator's asynchronous error and the time since the operation was
// posted (judge_wait, runtime/comm_ledger.hpp); on an error or past the
// timeout the owner aborts its communicators (ncclCommAbort, which does not
// wait) and the poll throws, naming the operation and the run's phase.
#pragma once

#include <nccl.h>

#include <chrono>
#include <string>

#include "check.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/comm_ledger.hpp"

namespace pt::cuda {

// "" when `comm` has no asynchronous error, else NCCL's text for it.
inline std::string nccl_async_error(ncclComm_t comm) {
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(comm, &async));
  if (async == ncclSuccess || async == ncclInProgress) return "";
  return std::string(ncclGetErrorString(async)) + " " + ncclGetLastError(comm);
}

// Returns while the operation `what` on `comm`, posted at `posted`, may
// still complete. Otherwise calls abort() (every communicator of the owner)
// and throws Error (an asynchronous error) or TimeoutError (past
// timeout_s), `hint` appended to the message.
template <class Abort>
void check_nccl_wait(ncclComm_t comm, std::chrono::steady_clock::time_point posted,
                     double timeout_s, const std::string& what, const std::string& hint,
                     Abort&& abort) {
  const std::string error = nccl_async_error(comm);
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - posted).count();
  const std::string phase = wait_phase().empty() ? "" : " " + wait_phase();
  switch (judge_wait(!error.empty(), waited, timeout_s)) {
    case WaitVerdict::Pending:
      return;
    case WaitVerdict::Failed:
      abort();
      throw Error(what + ": NCCL asynchronous error" + phase + ": " + error +
                  "; communicators aborted");
    case WaitVerdict::TimedOut:
      abort();
      throw TimeoutError(what + " not complete " + std::to_string(static_cast<int>(waited)) +
                         " s after it was posted" + phase +
                         "; communicators aborted (see pipeline.timeout_s)" + hint);
  }
}

}  // namespace pt::cuda
