// replica_group_mpi.cpp: the MPI replica group (MPI_Ialltoall and
// MPI_Iallgather on host buffers, folds on the CPU).
#include <mpi.h>

#include <climits>
#include <cstring>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/replica_group.hpp"

namespace pt {

namespace {

class MpiGather final : public MpiRequestTransfer {
 public:
  MpiGather(const Tensor& send, const Tensor& recv) : send_(send), recv_(recv) {}
  ~MpiGather() override {
    // A collective cannot be cancelled: dropped unfinished (an error path,
    // the job is ending), its buffers are never given back.
    if (done_ || request_ == MPI_REQUEST_NULL) return;
    retire_buffer(send_);
    retire_buffer(recv_);
  }

 private:
  Tensor send_, recv_;  // (numel) flat buffers of the all-to-all or all-gather, alive while it runs
};

class MpiReplicaGroup final : public ReplicaGroup {
 public:
  // Two duplicates of the replica communicator: all-to-alls on one,
  // all-gathers on the other, so each keeps one order on every replica.
  explicit MpiReplicaGroup(MPI_Comm comm) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    comm_ = timed_comm_dup(comm, "the replica group's communicator duplicate for all-to-alls");
    gather_comm_ = timed_comm_dup(comm, "the replica group's communicator duplicate for all-gathers");
  }
  ~MpiReplicaGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    MPI_Comm_free(&comm_);
    MPI_Comm_free(&gather_comm_);
  }
  const char* name() const override { return "mpi"; }
  int replica() const override { return rank_; }
  int replicas() const override { return size_; }
  Tensor buffer(int64_t count) override {
    return Tensor::empty({count}, DType::F32, MemCategory::Gradients, Device::CPU);
  }
  void pack(const Tensor& src, Tensor& dst, int64_t offset) override {
    PT_CHECK(src.dtype() == DType::F32 && offset + src.numel() <= dst.numel(), "bucket packing");
    const Tensor host = src.to(Device::CPU);
    std::memcpy(dst.f32() + offset, host.f32(), host.bytes());
  }
  void unpack(const Tensor& src, int64_t offset, Tensor& dst) override {
    PT_CHECK(offset >= 0 && offset + dst.numel() <= src.numel(), "bucket unpacking");
    if (dst.device() == Device::CPU) {
      std::memcpy(dst.f32(), src.f32() + offset, dst.bytes());
      return;
    }
    Tensor host = Tensor::empty(dst.shape(), DType::F32, MemCategory::Workspace, Device::CPU);
    std::memcpy(host.f32(), src.f32() + offset, dst.bytes());
    copy_tensor(host, dst);
  }
  void fold(const Tensor& src, const std::vector<int64_t>& offsets, Tensor& dst) override {
    const int64_t n = dst.numel();
    Tensor host = dst.device() == Device::CPU ? dst : Tensor::empty(dst.shape(), DType::F32,
                                                                   MemCategory::Workspace, Device::CPU);
    float* out = host.f32();
    for (int64_t i = 0; i < n; ++i) out[i] = 0.f;
    for (int64_t o : offsets) {
      PT_CHECK(o >= 0 && o + n <= src.numel(), "bucket fold offset");
      const float* in = src.f32() + o;
      for (int64_t i = 0; i < n; ++i) out[i] += in[i];
    }
    if (dst.device() != Device::CPU) copy_tensor(host, dst);
  }
  std::unique_ptr<PendingTransfer> ialltoall(const Tensor& send, int64_t send_offset, int64_t chunk,
                                             Tensor& recv, int64_t recv_offset) override {
    PT_CHECK(chunk <= INT_MAX && send_offset + chunk * size_ <= send.numel() &&
                 recv_offset + chunk * size_ <= recv.numel(),
             "replica all-to-all sizes");
    auto t = std::make_unique<MpiGather>(send, recv);
    const int count = static_cast<int>(chunk);
    MPI_CHECK(MPI_Ialltoall(send.f32() + send_offset, count, MPI_FLOAT, recv.f32() + recv_offset,
                            count, MPI_FLOAT, comm_, &t->request_));
    return t;
  }
  std::unique_ptr<PendingTransfer> iallgather(const Tensor& send, Tensor& recv) override {
    PT_CHECK(send.numel() <= INT_MAX && recv.numel() == send.numel() * size_,
             "replica all-gather sizes");
    auto t = std::make_unique<MpiGather>(send, recv);
    const int count = static_cast<int>(send.numel());
    MPI_CHECK(MPI_Iallgather(send.f32(), count, MPI_FLOAT, recv.f32(), count, MPI_FLOAT, gather_comm_,
                             &t->request_));
    return t;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL, gather_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
};

}  // namespace

std::unique_ptr<ReplicaGroup> make_mpi_replica_group(MPI_Comm replicas) {
  return std::make_unique<MpiReplicaGroup>(replicas);
}

}  // namespace pt
