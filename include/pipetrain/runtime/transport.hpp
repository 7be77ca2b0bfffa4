// transport.hpp: non-blocking point-to-point exchange of activations and
// gradients between the ranks that own neighbouring stages.
//
// The CPU build uses MPI (MpiTransport); the CUDA build adds NCCL and a
// host-staged MPI path behind the same interface. Posting never blocks; the
// executor polls test() and enforces the timeout itself, so a stuck peer is
// always reported with the action that waits for it. A receive that the
// transport can order on the device (NCCL) is not waited for by the host:
// the compute stream waits for it (order_before_compute), and the executor
// still polls it until it completes, under the same timeout.
#pragma once

#include <mpi.h>

#include <memory>

#include "pipetrain/tensor/tensor.hpp"

namespace pt {

class PendingTransfer {
 public:
  virtual ~PendingTransfer() = default;
  // True once the transfer has completed (the buffer may be read or reused).
  virtual bool test() = 0;
  // Makes the work queued on the backend's compute stream from now on wait
  // for this transfer, without the host waiting, and returns true; false
  // when the transport cannot (the host must wait with test()). Only a
  // device whose kernels run asynchronously can: the NCCL transport's
  // receives (cudaStreamWaitEvent on the transfer's event). test() still
  // reports completion either way.
  virtual bool order_before_compute() { return false; }
  // A completed receive: the bytes that arrived, which may be fewer than the
  // buffer holds (a truncated message); -1 where the transport cannot tell
  // (NCCL) or for a send.
  virtual int64_t received_bytes() const { return -1; }
};

// A transfer that is one MPI request: complete once MPI_Test says so. The
// subclass's destructor decides what an unfinished request leaves behind.
class MpiRequestTransfer : public PendingTransfer {
 public:
  bool test() override;
  int64_t received_bytes() const override { return received_; }
  MPI_Request request_ = MPI_REQUEST_NULL;
  bool counts_bytes_ = false;  // a receive: its status's byte count is kept

 protected:
  bool done_ = false;
  int64_t received_ = -1;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The buffer must stay alive until the transfer completes.
  virtual std::unique_ptr<PendingTransfer> isend(const Tensor& buf, int peer, int tag) = 0;
  virtual std::unique_ptr<PendingTransfer> irecv(Tensor& buf, int peer, int tag) = 0;
  virtual int max_tag() const = 0;
};

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm);

// A buffer that MPI may still use after its transfer was dropped (a send
// that could not be cancelled): its storage is kept forever, never reused.
void retire_buffer(const Tensor& buf);

// NCCL's point-to-point semantics on the CPU, over MPI (pipeline.transport =
// "nccl_model"; src/runtime/transport_nccl_model.cpp): per-link channels
// matched by order, rendezvous sends, in-order completion; and, with
// lazy_connect, NCCL's blocking first use of a channel. Collective over comm.
struct NcclModelOptions {
  bool lazy_connect = false;  // true: NCCL's lazy connection (deadlocks GPipe; tests)
};
std::unique_ptr<Transport> make_nccl_model_transport(MPI_Comm comm,
                                                     const NcclModelOptions& options = {});
// The largest message tag of `comm` (MPI_TAG_UB; at least 32767).
int mpi_tag_upper_bound(MPI_Comm comm);

}  // namespace pt
