// test_mpi_cancel.cpp: cancel_request (pipetrain/base/mpi_cancel.hpp), which
// the host-staged GPU transport uses before it hands a dropped transfer's
// pinned buffer back to its pool. A receive nobody sends to is cancelled and
// its buffer is free; a synchronous send nobody has received yet is never
// reported free unless MPI really withdrew it (Open MPI cannot, so its buffer
// must be retired). Runs under mpirun (1 and 2 ranks); no GPU.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mpi_test_util.hpp"
#include "pipetrain/base/mpi_cancel.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

TEST(MpiCancel, NullRequestIsAlreadyComplete) {
  MPI_Request r = MPI_REQUEST_NULL;
  EXPECT_EQ(cancel_request(r, 0.1), CancelOutcome::Completed);
}

TEST(MpiCancel, UnmatchedReceiveIsCancelled) {
  std::vector<char> buf(1 << 20);
  MPI_Request r = MPI_REQUEST_NULL;
  MPI_Irecv(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, MPI_ANY_SOURCE, 901,
            MPI_COMM_WORLD, &r);
  EXPECT_EQ(cancel_request(r, 5.0), CancelOutcome::Cancelled);
  EXPECT_EQ(r, MPI_REQUEST_NULL);
}

TEST(MpiCancel, UndeliveredSendIsNeverReportedFreeByMistake) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const int n = 4 << 20;  // large enough for a rendezvous protocol
  std::vector<char> buf(n, 7);
  int outcome = -1;
  if (world_rank() == 0) {
    MPI_Request r = MPI_REQUEST_NULL;
    MPI_Issend(buf.data(), n, MPI_CHAR, 1, 902, MPI_COMM_WORLD, &r);
    const CancelOutcome got = cancel_request(r, 0.2);
    // Nobody has posted the receive: it cannot have completed.
    EXPECT_NE(got, CancelOutcome::Completed);
    outcome = static_cast<int>(got);
    MPI_Send(&outcome, 1, MPI_INT, 1, 903, MPI_COMM_WORLD);
  } else if (world_rank() == 1) {
    MPI_Recv(&outcome, 1, MPI_INT, 0, 903, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (outcome == static_cast<int>(CancelOutcome::StillActive)) {
      // The send is still live: MPI still reads the sender's buffer, which is
      // why the transport retires it. Receive it so the job ends cleanly.
      std::vector<char> in(n, 0);
      MPI_Recv(in.data(), n, MPI_CHAR, 0, 902, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      EXPECT_EQ(in[n - 1], 7);
    }
    std::printf("  undelivered send: %s\n",
                outcome == static_cast<int>(CancelOutcome::StillActive) ? "still active (retire)"
                                                                       : "cancelled");
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the sender's buffer lives until the receive is done
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// The MPI test main, like pipetrain's main, sets the CUDA driver's
// environment before MPI_Init (a CUDA-aware MPI starts CUDA there), keeping
// what the user set.
TEST(GpuEnvironment, SetBeforeMpiInitByTheMain) {
  const char* loading = std::getenv("CUDA_MODULE_LOADING");
  const char* connections = std::getenv("CUDA_DEVICE_MAX_CONNECTIONS");
  ASSERT_NE(loading, nullptr) << "CUDA_MODULE_LOADING not set before MPI_Init";
  ASSERT_NE(connections, nullptr) << "CUDA_DEVICE_MAX_CONNECTIONS not set before MPI_Init";
  std::printf("  CUDA_MODULE_LOADING=%s CUDA_DEVICE_MAX_CONNECTIONS=%s\n", loading, connections);
}

}  // namespace
}  // namespace pt
