// replica_group_nccl.cpp: the data-parallel replica group on GPUs: one NCCL
// communicator per stage's replica group (the ranks holding the same stages
// in every replica), bootstrapped over MPI like the pipeline links (replica
// 0 makes the id, MPI_Bcast sends its bytes, ncclCommInitRank under the
// watchdog). Buckets live on the GPU: packing is a device copy, the
// all-to-all is grouped ncclSend/ncclRecv and the all-gather ncclAllGather,
// both on the group's own stream (after the compute stream's work), and the
// fixed-order fold is a sequence of elementwise adds on the compute stream,
// so GPU results are as deterministic as the CPU's for a given GPU.
// Compiled with the CUDA backend; not run in this project's CI (no GPU).
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <memory>
#include <string>

#include "check.hpp"
#include "context.hpp"
#include "kernels.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

using Clock = std::chrono::steady_clock;

float* floats(Tensor& t) { return static_cast<float*>(t.raw()); }
const float* floats(const Tensor& t) { return static_cast<const float*>(t.raw()); }

class NcclGather final : public PendingTransfer {
 public:
  NcclGather(ncclComm_t comm, cudaEvent_t done, double timeout_s, const Tensor& send,
             const Tensor& recv)
      : comm_(comm), done_event_(done), timeout_s_(timeout_s), posted_(Clock::now()),
        send_(send), recv_(recv) {}
  ~NcclGather() override {
    if (!done_) {  // dropped unfinished (error path): NCCL may still write
      retire_buffer(send_);
      retire_buffer(recv_);
    }
    cudaEventDestroy(done_event_);
  }
  bool test() override {
    if (done_) return true;
    const cudaError_t q = cudaEventQuery(done_event_);
    if (q == cudaSuccess) return done_ = true;
    if (q != cudaErrorNotReady) CUDA_CHECK(q);
    ncclResult_t async = ncclSuccess;
    NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
    if (async != ncclSuccess && async != ncclInProgress)
      throw Error(std::string("NCCL asynchronous error in the data-parallel all-gather: ") +
                  ncclGetErrorString(async));
    return false;
  }

 private:
  ncclComm_t comm_;
  cudaEvent_t done_event_;
  double timeout_s_;
  Clock::time_point posted_;
  Tensor send_, recv_;
  bool done_ = false;
};

class NcclReplicaGroup final : public ReplicaGroup {
 public:
  NcclReplicaGroup(MPI_Comm replicas, double timeout_s) : timeout_s_(timeout_s) {
    MPI_CHECK(MPI_Comm_rank(replicas, &rank_));
    MPI_CHECK(MPI_Comm_size(replicas, &size_));
    context();
    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    timed_bcast(&id, sizeof id, MPI_BYTE, 0, replicas,
                "the NCCL unique id broadcast of the replica group");
    timed_barrier(replicas, "the barrier before the replica group's ncclCommInitRank");
    {
      DeadlineScope deadline("NCCL's replica group set-up (ncclCommInitRank)");
      NCCL_CHECK(ncclCommInitRank(&comm_, size_, id, rank_));
    }
    // A second communicator and stream for the all-gathers: all-to-alls and
    // all-gathers each keep one order on every replica (grad_reducer.cpp).
    {
      DeadlineScope deadline("NCCL's replica group split for the all-gathers (ncclCommSplit)");
      NCCL_CHECK(ncclCommSplit(comm_, 0, rank_, &gather_comm_, nullptr));
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&gather_stream_, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  }
  ~NcclReplicaGroup() override {
    if (gather_comm_) ncclCommDestroy(gather_comm_);
    if (comm_) ncclCommDestroy(comm_);
    if (ready_) cudaEventDestroy(ready_);
    if (stream_) cudaStreamDestroy(stream_);
    if (gather_stream_) cudaStreamDestroy(gather_stream_);
  }
  const char* name() const override { return "nccl"; }
  int replica() const override { return rank_; }
  int replicas() const override { return size_; }
  Tensor buffer(int64_t count) override {
    return Tensor::empty({count}, DType::F32, MemCategory::Gradients, Device::CUDA);
  }
  void pack(const Tensor& src, Tensor& dst, int64_t offset) override {
    PT_CHECK(src.dtype() == DType::F32 && offset + src.numel() <= dst.numel(), "bucket packing");
    CUDA_CHECK(cudaMemcpyAsync(floats(dst) + offset, src.raw(), src.bytes(), cudaMemcpyDefault,
                               context().compute));
  }
  void unpack(const Tensor& src, int64_t offset, Tensor& dst) override {
    PT_CHECK(offset >= 0 && offset + dst.numel() <= src.numel(), "bucket unpacking");
    CUDA_CHECK(cudaMemcpyAsync(dst.raw(), floats(src) + offset, dst.bytes(), cudaMemcpyDefault,
                               context().compute));
  }
  void fold(const Tensor& src, const std::vector<int64_t>& offsets, Tensor& dst) override {
    PT_CHECK(dst.device() == Device::CUDA, "the NCCL replica group folds into device gradients");
    const int64_t n = dst.numel();
    cudaStream_t s = context().compute;
    kern::fill(floats(dst), 0.f, n, s);
    for (int64_t o : offsets) {
      PT_CHECK(o >= 0 && o + n <= src.numel(), "bucket fold offset");
      kern::add(floats(dst), floats(src) + o, floats(dst), n, s);
    }
  }
  std::unique_ptr<PendingTransfer> ialltoall(const Tensor& send, int64_t send_offset, int64_t chunk,
                                             Tensor& recv, int64_t recv_offset) override {
    PT_CHECK(send_offset + chunk * size_ <= send.numel() && recv_offset + chunk * size_ <= recv.numel(),
             "replica all-to-all sizes");
    after_compute(stream_);
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < size_; ++r) {
      NCCL_CHECK(ncclSend(floats(send) + send_offset + r * chunk, static_cast<size_t>(chunk),
                          ncclFloat, r, comm_, stream_));
      NCCL_CHECK(ncclRecv(floats(recv) + recv_offset + r * chunk, static_cast<size_t>(chunk),
                          ncclFloat, r, comm_, stream_));
    }
    NCCL_CHECK(ncclGroupEnd());
    return completion(comm_, stream_, send, recv);
  }
  std::unique_ptr<PendingTransfer> iallgather(const Tensor& send, Tensor& recv) override {
    PT_CHECK(recv.numel() == send.numel() * size_, "replica all-gather sizes");
    after_compute(gather_stream_);
    NCCL_CHECK(ncclAllGather(send.raw(), recv.raw(), static_cast<size_t>(send.numel()), ncclFloat,
                             gather_comm_, gather_stream_));
    return completion(gather_comm_, gather_stream_, send, recv);
  }

 private:
  // The group's stream waits for what the compute stream has queued (packing, folds).
  void after_compute(cudaStream_t stream) {
    CUDA_CHECK(cudaEventRecord(ready_, context().compute));
    CUDA_CHECK(cudaStreamWaitEvent(stream, ready_, 0));
  }
  std::unique_ptr<PendingTransfer> completion(ncclComm_t comm, cudaStream_t stream,
                                              const Tensor& send, const Tensor& recv) {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, stream));
    return std::make_unique<NcclGather>(comm, done, timeout_s_, send, recv);
  }

  double timeout_s_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr, gather_comm_ = nullptr;
  cudaStream_t stream_ = nullptr, gather_stream_ = nullptr;
  cudaEvent_t ready_ = nullptr;
};

}  // namespace

std::unique_ptr<ReplicaGroup> make_nccl_replica_group(MPI_Comm replicas, double timeout_s) {
  return std::make_unique<NcclReplicaGroup>(replicas, timeout_s);
}

}  // namespace pt::cuda
