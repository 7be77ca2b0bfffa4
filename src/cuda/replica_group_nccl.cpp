// replica_group_nccl.cpp: the data-parallel replica group on GPUs: one NCCL
// communicator per stage's replica group (the ranks holding the same stages
// in every replica), bootstrapped over MPI like the pipeline links (replica
// 0 makes the id, MPI_Bcast sends its bytes, ncclCommInitRank under the
// watchdog). Buckets live on the GPU: packing is a device copy, the
// all-to-all is grouped ncclSend/ncclRecv and the all-gather ncclAllGather,
// both on the group's own stream (after the compute stream's work), and the
// fixed-order fold is a sequence of elementwise adds on the compute stream,
// so GPU results are as deterministic as the CPU's for a given GPU.
//
// Both communicators are connected in the constructor (a 1-float all-to-all
// and all-gather, waited for within timeout_s), not lazily by the first
// bucket mid-backward while other communicators' kernels run. Every poll of
// an operation reads the communicator's asynchronous error and the time since
// it was posted (nccl_wait.hpp): past timeout_s it aborts both communicators
// and throws a TimeoutError naming the operation. A CommLedger counts what is
// in flight; the group is torn down with ncclCommDestroy only when nothing
// is, with ncclCommAbort otherwise (ncclCommDestroy would wait forever).
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
#include "nccl_wait.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"
#include "pipetrain/runtime/comm_ledger.hpp"

namespace pt::cuda {

namespace {

using Clock = std::chrono::steady_clock;

float* floats(Tensor& t) { return static_cast<float*>(t.raw()); }
const float* floats(const Tensor& t) { return static_cast<const float*>(t.raw()); }

// The group's communicators, streams and ledger, shared with its pending
// operations (the reducer may hold one past the group).
struct GroupComms {
  int rank = 0, size = 1;
  double timeout_s = 0.0;
  ncclComm_t comm = nullptr;         // all-to-alls
  ncclComm_t gather_comm = nullptr;  // all-gathers
  cudaStream_t stream = nullptr, gather_stream = nullptr;
  cudaEvent_t ready = nullptr;
  CommLedger ledger;

  ~GroupComms() {
    switch (ledger.teardown()) {
      case CommLedger::Teardown::Destroy:
        if (gather_comm) ncclCommDestroy(gather_comm);
        if (comm) ncclCommDestroy(comm);
        break;
      case CommLedger::Teardown::Abort:
        abort_all();
        break;
      case CommLedger::Teardown::Nothing:
        break;
    }
    if (ready) cudaEventDestroy(ready);
    if (stream) cudaStreamDestroy(stream);
    if (gather_stream) cudaStreamDestroy(gather_stream);
  }

  void abort_all() {
    if (gather_comm) ncclCommAbort(gather_comm);
    if (comm) ncclCommAbort(comm);
    gather_comm = comm = nullptr;
    ledger.aborted();
  }
};

// One all-to-all or all-gather: complete when its event is. Dropped
// unfinished (an error path), NCCL may still write its buffers: they are
// retired, and the ledger tells the group to abort rather than destroy.
class NcclGroupOp final : public PendingTransfer {
 public:
  NcclGroupOp(std::shared_ptr<GroupComms> comms, ncclComm_t comm, cudaEvent_t done,
              std::string what, const Tensor& send, const Tensor& recv)
      : comms_(std::move(comms)), comm_(comm), done_event_(done), what_(std::move(what)),
        posted_(Clock::now()), send_(send), recv_(recv) {
    comms_->ledger.posted();
  }
  ~NcclGroupOp() override {
    if (!done_) {
      comms_->ledger.dropped();
      retire_buffer(send_);
      retire_buffer(recv_);
    }
    cudaEventDestroy(done_event_);
  }
  bool test() override {
    if (done_) return true;
    if (event_completed(done_event_)) {
      done_ = true;
      comms_->ledger.completed();
      return true;
    }
    PT_CHECK(!comms_->ledger.is_aborted(), "the replica group's NCCL communicators were aborted");
    check_nccl_wait(comm_, posted_, comms_->timeout_s, what_,
                    ": a replica dead or stuck, or the replicas started their reductions in "
                    "different orders",
                    [this] { comms_->abort_all(); });
    return false;
  }

 private:
  std::shared_ptr<GroupComms> comms_;
  ncclComm_t comm_;
  cudaEvent_t done_event_;
  std::string what_;
  Clock::time_point posted_;
  Tensor send_, recv_;  // (numel) flat buffers of the all-to-all or all-gather, alive while it runs
  bool done_ = false;
};

class NcclReplicaGroup final : public ReplicaGroup {
 public:
  NcclReplicaGroup(MPI_Comm replicas, double timeout_s) : comms_(std::make_shared<GroupComms>()) {
    GroupComms& c = *comms_;
    c.timeout_s = timeout_s;
    MPI_CHECK(MPI_Comm_rank(replicas, &c.rank));
    MPI_CHECK(MPI_Comm_size(replicas, &c.size));
    context();
    ncclUniqueId id;
    if (c.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    timed_bcast(&id, sizeof id, MPI_BYTE, 0, replicas,
                "the NCCL unique id broadcast of the replica group");
    timed_barrier(replicas, "the barrier before the replica group's ncclCommInitRank");
    {
      DeadlineScope deadline("NCCL's replica group set-up (ncclCommInitRank)");
      NCCL_CHECK(ncclCommInitRank(&c.comm, c.size, id, c.rank));
    }
    // A second communicator and stream for the all-gathers: all-to-alls and
    // all-gathers each keep one order on every replica (grad_reducer.cpp).
    {
      DeadlineScope deadline("NCCL's replica group split for the all-gathers (ncclCommSplit)");
      NCCL_CHECK(ncclCommSplit(c.comm, 0, c.rank, &c.gather_comm, nullptr));
    }
    CUDA_CHECK(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaStreamCreateWithFlags(&c.gather_stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&c.ready, cudaEventDisableTiming));
    connect();
  }
  const char* name() const override { return "nccl"; }
  int replica() const override { return comms_->rank; }
  int replicas() const override { return comms_->size; }
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
    GroupComms& c = usable();
    PT_CHECK(send_offset + chunk * c.size <= send.numel() &&
                 recv_offset + chunk * c.size <= recv.numel(),
             "replica all-to-all sizes");
    after_compute(c.stream);
    NCCL_CHECK(ncclGroupStart());
    for (int r = 0; r < c.size; ++r) {
      NCCL_CHECK(ncclSend(floats(send) + send_offset + r * chunk, static_cast<size_t>(chunk),
                          ncclFloat, r, c.comm, c.stream));
      NCCL_CHECK(ncclRecv(floats(recv) + recv_offset + r * chunk, static_cast<size_t>(chunk),
                          ncclFloat, r, c.comm, c.stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    return completion(c.comm, c.stream, "the data-parallel all-to-all", chunk, send, recv);
  }
  std::unique_ptr<PendingTransfer> iallgather(const Tensor& send, Tensor& recv) override {
    GroupComms& c = usable();
    PT_CHECK(recv.numel() == send.numel() * c.size, "replica all-gather sizes");
    after_compute(c.gather_stream);
    NCCL_CHECK(ncclAllGather(send.raw(), recv.raw(), static_cast<size_t>(send.numel()), ncclFloat,
                             c.gather_comm, c.gather_stream));
    return completion(c.gather_comm, c.gather_stream, "the data-parallel all-gather", send.numel(),
                      send, recv);
  }

 private:
  GroupComms& usable() {
    PT_CHECK(!comms_->ledger.is_aborted(), "the replica group's NCCL communicators were aborted");
    return *comms_;
  }

  // NCCL connects peers on a communicator's first operation. Here, where
  // every replica is, both communicators get a 1-float all-to-all and
  // all-gather, waited for within timeout_s (the posting itself, which may
  // block the host while NCCL connects, under the watchdog).
  void connect() {
    const int64_t n = comms_->size;
    Tensor send = Tensor::zeros({n}, DType::F32, MemCategory::Workspace, Device::CUDA);
    Tensor recv = Tensor::zeros({n}, DType::F32, MemCategory::Workspace, Device::CUDA);
    Tensor one = Tensor::zeros({1}, DType::F32, MemCategory::Workspace, Device::CUDA);
    Tensor all = Tensor::zeros({n}, DType::F32, MemCategory::Workspace, Device::CUDA);
    std::unique_ptr<PendingTransfer> a, g;
    {
      DeadlineScope deadline("the NCCL replica group's connection at start (a 1-float all-to-all "
                             "and all-gather over its replicas)");
      a = ialltoall(send, 0, 1, recv, 0);
      g = iallgather(one, all);
    }
    const auto done = [&] { return a->test() && g->test(); };
    if (!poll_until(done, comms_->timeout_s)) {
      comms_->abort_all();
      throw TimeoutError("rank " + std::to_string(comms_->rank) + " of the replica group: its NCCL "
                         "connection at start did not complete in " +
                         std::to_string(static_cast<int>(comms_->timeout_s)) +
                         " s; communicators aborted (see pipeline.timeout_s)");
    }
  }

  // The group's stream waits for what the compute stream has queued (packing, folds).
  void after_compute(cudaStream_t stream) {
    CUDA_CHECK(cudaEventRecord(comms_->ready, context().compute));
    CUDA_CHECK(cudaStreamWaitEvent(stream, comms_->ready, 0));
  }

  std::unique_ptr<PendingTransfer> completion(ncclComm_t comm, cudaStream_t stream,
                                              const std::string& op, int64_t floats_each,
                                              const Tensor& send, const Tensor& recv) {
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, stream));
    const std::string what = "rank " + std::to_string(comms_->rank) + " of the replica group: " +
                             op + " #" + std::to_string(++posted_) + " (" +
                             std::to_string(floats_each) + " floats per replica, " +
                             std::to_string(comms_->size) + " replicas)";
    return std::make_unique<NcclGroupOp>(comms_, comm, done, what, send, recv);
  }

  std::shared_ptr<GroupComms> comms_;
  long long posted_ = 0;  // operations posted so far, for messages
};

}  // namespace

std::unique_ptr<ReplicaGroup> make_nccl_replica_group(MPI_Comm replicas, double timeout_s) {
  return std::make_unique<NcclReplicaGroup>(replicas, timeout_s);
}

}  // namespace pt::cuda
