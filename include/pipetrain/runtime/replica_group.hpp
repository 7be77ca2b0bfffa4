// replica_group.hpp: the ranks that hold the same stages in the D replicas of
// a pipeline, and the one collective data parallelism needs from them.
//
// The gradient reduction (grad_reducer.hpp) is a reduce-scatter and an
// all-gather built from two collectives that move data without adding it:
// an all-to-all gives each replica its chunk of every replica's bucket, the
// replica adds the pieces itself in a fixed order, and an all-gather returns
// the summed chunks to all. So the sum never depends on a collective's
// internal algorithm (which changes with message size and would make results
// differ between partitions), at the traffic of a ring all-reduce. A group works on buffers where it
// communicates: host memory for MPI (the CPU backend), the GPU for NCCL
// (src/cuda/replica_group_nccl.cpp, bootstrapped over MPI like the pipeline
// links).
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/runtime/transport.hpp"
#include "pipetrain/tensor/tensor.hpp"

namespace pt {

class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  virtual const char* name() const = 0;
  virtual int replica() const = 0;   // this rank's index in the group
  virtual int replicas() const = 0;  // D
  // `count` floats where this group communicates (counted as Gradients).
  virtual Tensor buffer(int64_t count) = 0;
  // dst[offset, offset + src.numel()) := src (src on any device).
  virtual void pack(const Tensor& src, Tensor& dst, int64_t offset) = 0;
  // dst := src[offset, offset + dst.numel()) (dst on any device).
  virtual void unpack(const Tensor& src, int64_t offset, Tensor& dst) = 0;
  // dst := ((0 + src[o_0 ..]) + src[o_1 ..]) + ..., element by element, the
  // offsets in the order given (dst.numel() floats from each).
  virtual void fold(const Tensor& src, const std::vector<int64_t>& offsets, Tensor& dst) = 0;
  // Starts an all-to-all of `chunk` floats per replica: replica r receives
  // send[send_offset + r * chunk ..] of every replica q at
  // recv[recv_offset + q * chunk ..]. Buffers stay alive until it completes.
  virtual std::unique_ptr<PendingTransfer> ialltoall(const Tensor& send, int64_t send_offset,
                                                     int64_t chunk, Tensor& recv,
                                                     int64_t recv_offset) = 0;
  // Starts gathering every replica's `send` into `recv` (replicas() x
  // send.numel() floats, replica order). All-to-alls and all-gathers go on
  // two separate channels (communicators), each started in the same order
  // on every replica.
  virtual std::unique_ptr<PendingTransfer> iallgather(const Tensor& send, Tensor& recv) = 0;
};

// MPI_Iallgather over `replicas` (host buffers). Not collective.
std::unique_ptr<ReplicaGroup> make_mpi_replica_group(MPI_Comm replicas);

}  // namespace pt
