// transport_nccl.cpp: the NCCL transport for device tensors.
//
// Bootstrap: rank 0 calls ncclGetUniqueId, MPI_Bcast sends its bytes, every
// rank calls ncclCommInitRank (the world communicator). From it, ncclCommSplit
// makes one 2-rank communicator per neighbour link (r, r+1 mod P: a ring, so
// interleaved schedules that wrap from the last rank to rank 0 work too) and
// direction, each with its own stream. A stream that holds only
// the sends to one peer, or only the receives from one, cannot deadlock the
// way a single stream does when two ranks post "send then receive" to each
// other (an NCCL send of a large message waits for the peer's receive, which
// would sit behind the peer's own send). Every channel is connected in the
// constructor (connect_all_channels), because NCCL's lazy connection would
// otherwise block the host on a channel's first use; the CPU transport
// nccl_model reproduces that deadlock and this fix in CI.
// Each transfer: the channel stream waits for the compute stream, then
// ncclSend/ncclRecv inside ncclGroupStart/End, then an event; test() polls
// the event, ncclCommGetAsyncError and the deadline (nccl_wait.hpp). The
// engine's CommLedger counts the transfers in flight: the destructor destroys
// the communicators only when none is, and aborts them otherwise.
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <chrono>
#include <climits>
#include <memory>
#include <string>

#include "check.hpp"
#include "context.hpp"
#include "device_memory.hpp"
#include "nccl_wait.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

using Clock = std::chrono::steady_clock;

// One direction of one link: only sends to `peer`, or only receives from it.
struct Channel {
  ncclComm_t comm = nullptr;
  int peer = -1;          // the other rank inside the 2-rank communicator
  int world_peer = -1;    // the same rank in the transport's communicator
  cudaStream_t stream = nullptr;
  cudaEvent_t ready = nullptr;
};

enum ChannelId { kToNext = 0, kFromNext, kToPrev, kFromPrev, kChannels };

class NcclEngine {
 public:
  NcclEngine(MPI_Comm comm, double timeout_s) : timeout_s_(timeout_s) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    context();
    init_world(comm);
    {
      DeadlineScope deadline("NCCL's split of the stage links (ncclCommSplit)");
      for (int group = 0; group < groups(); ++group)
        for (int up = 0; up < 2; ++up) split_links(group, up == 1);
    }
    connect_all_channels();
  }

  ~NcclEngine() {
    const bool clean = ledger_.teardown() == CommLedger::Teardown::Destroy;
    for (Channel& ch : channels_) {
      if (ch.comm) clean ? ncclCommDestroy(ch.comm) : ncclCommAbort(ch.comm);
      if (ch.ready) cudaEventDestroy(ch.ready);
      if (ch.stream) cudaStreamDestroy(ch.stream);
    }
    if (world_) clean ? ncclCommDestroy(world_) : ncclCommAbort(world_);
  }

  CommLedger& ledger() { return ledger_; }

  int rank() const { return rank_; }
  int size() const { return size_; }

  // The channel to (send) or from peer: rank + 1 or rank - 1 (mod P).
  Channel& channel(bool send, int peer) {
    const int next = (rank_ + 1) % size_, prev = (rank_ - 1 + size_) % size_;
    ChannelId id = kChannels;
    if (peer != rank_ && peer == next && channels_[send ? kToNext : kFromNext].comm)
      id = send ? kToNext : kFromNext;
    else if (peer != rank_ && peer == prev && channels_[send ? kToPrev : kFromPrev].comm)
      id = send ? kToPrev : kFromPrev;
    PT_CHECK(id != kChannels, "nccl transport: rank " + std::to_string(rank_) +
                                  " cannot reach rank " + std::to_string(peer) +
                                  " (ring neighbours rank +- 1 mod P only)");
    return channels_[id];
  }

  // Enqueues the transfer; returns the event that marks its completion.
  cudaEvent_t post(Channel& ch, bool send, void* ptr, size_t bytes) {
    Context& ctx = context();
    CUDA_CHECK(cudaEventRecord(ch.ready, ctx.compute));
    CUDA_CHECK(cudaStreamWaitEvent(ch.stream, ch.ready, 0));
    NCCL_CHECK(ncclGroupStart());
    if (send) NCCL_CHECK(ncclSend(ptr, bytes, ncclUint8, ch.peer, ch.comm, ch.stream));
    else NCCL_CHECK(ncclRecv(ptr, bytes, ncclUint8, ch.peer, ch.comm, ch.stream));
    NCCL_CHECK(ncclGroupEnd());
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(done, ch.stream));
    ledger_.posted();
    return done;
  }

  // Throws (after aborting every communicator) on an asynchronous NCCL error
  // or when the transfer has been pending longer than the timeout.
  void check_health(Channel& ch, Clock::time_point posted, const std::string& what) {
    check_nccl_wait(ch.comm, posted, timeout_s_, "rank " + std::to_string(rank_) + ": NCCL " + what,
                    ": peer dead or stuck, or the two ranks posted this link's messages in "
                    "different orders",
                    [this] { abort_all(); });
  }

 private:
  void init_world(MPI_Comm comm) {
    ncclUniqueId id;
    if (rank_ == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    timed_bcast(&id, sizeof id, MPI_BYTE, 0, comm, "the NCCL unique id broadcast");
    // Some MPI collectives (HCOLL) defer a broadcast's progress; every rank
    // holds the id before any enters ncclCommInitRank.
    timed_barrier(comm, "the barrier before ncclCommInitRank");
    DeadlineScope deadline("NCCL's communicator set-up (ncclCommInitRank)");
    NCCL_CHECK(ncclCommInitRank(&world_, size_, id, rank_));
  }

  // NCCL connects a channel on its first send or receive and blocks the host
  // there until the peer makes its own first call on it, which deadlocks
  // GPipe and 1F1B with N < P (the first RECV_B is posted long before the
  // peer's first SEND_B). So every channel is connected here, where all ranks
  // are together: one group with a 1-byte send on every outgoing channel and
  // a receive on every incoming one, then a wait for all of them.
  void connect_all_channels() {
    Context& ctx = context();
    DeviceBuffer bytes(2 * kChannels);
    CUDA_CHECK(cudaMemsetAsync(bytes.get(), 0, 2 * kChannels, ctx.compute));
    CUDA_CHECK(cudaStreamSynchronize(ctx.compute));
    DeadlineScope deadline("the NCCL channel connection at start (1-byte exchange on every link)");
    NCCL_CHECK(ncclGroupStart());
    for (int id = 0; id < kChannels; ++id) {
      Channel& ch = channels_[id];
      if (ch.comm == nullptr) continue;
      char* slot = bytes.as<char>() + 2 * id;
      if (id == kToNext || id == kToPrev)
        NCCL_CHECK(ncclSend(slot, 1, ncclUint8, ch.peer, ch.comm, ch.stream));
      else
        NCCL_CHECK(ncclRecv(slot + 1, 1, ncclUint8, ch.peer, ch.comm, ch.stream));
    }
    NCCL_CHECK(ncclGroupEnd());
    for (Channel& ch : channels_)
      if (ch.comm != nullptr) CUDA_CHECK(cudaStreamSynchronize(ch.stream));
  }

  // Links: l = (l, l+1 mod P) for l < links(); P = 2 has the one link (0, 1).
  int links() const { return size_ <= 1 ? 0 : (size_ == 2 ? 1 : size_); }
  // Split groups: no rank is in two links of one group (an odd ring needs a
  // third group for its closing link).
  int groups() const { return size_ > 2 && size_ % 2 == 1 ? 3 : 2; }
  int group_of(int link) const {
    return size_ > 2 && size_ % 2 == 1 && link == size_ - 1 ? 2 : link % 2;
  }

  // One collective ncclCommSplit: this rank's link of `group`, if any, gets a
  // 2-rank communicator for direction `up` (lower end -> upper end).
  void split_links(int group, bool up) {
    int link = -1;
    bool lower = false;
    const int as_upper = (rank_ - 1 + size_) % size_;  // the link this rank closes
    if (rank_ < links() && group_of(rank_) == group) {
      link = rank_;
      lower = true;
    } else if (as_upper < links() && group_of(as_upper) == group) {
      link = as_upper;
    }
    ncclComm_t comm = nullptr;
    NCCL_CHECK(ncclCommSplit(world_, link < 0 ? NCCL_SPLIT_NOCOLOR : link, lower ? 0 : 1, &comm,
                             nullptr));
    if (link < 0) return;
    // The key puts the lower end at rank 0 of the new communicator.
    const ChannelId id = lower ? (up ? kToNext : kFromNext) : (up ? kFromPrev : kToPrev);
    Channel& ch = channels_[id];
    ch.comm = comm;
    ch.peer = lower ? 1 : 0;
    ch.world_peer = lower ? (rank_ + 1) % size_ : as_upper;
    CUDA_CHECK(cudaStreamCreateWithFlags(&ch.stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&ch.ready, cudaEventDisableTiming));
  }

  void abort_all() {
    for (Channel& ch : channels_) {
      if (ch.comm) ncclCommAbort(ch.comm);
      ch.comm = nullptr;
    }
    if (world_) ncclCommAbort(world_);
    world_ = nullptr;
    ledger_.aborted();
  }

  double timeout_s_;
  int rank_ = 0, size_ = 1;
  ncclComm_t world_ = nullptr;
  Channel channels_[kChannels];
  CommLedger ledger_;  // transfers in flight on every channel
};

class NcclTransfer final : public PendingTransfer {
 public:
  NcclTransfer(std::shared_ptr<NcclEngine> engine, Channel& ch, cudaEvent_t done,
               std::string what)
      : engine_(std::move(engine)), ch_(ch), done_(done), what_(std::move(what)),
        posted_(Clock::now()) {}
  ~NcclTransfer() override {
    if (!finished_) engine_->ledger().dropped();
    cudaEventDestroy(done_);
  }
  bool test() override {
    if (finished_) return true;
    if (event_completed(done_)) {
      finished_ = true;
      engine_->ledger().completed();
      return true;
    }
    PT_CHECK(ch_.comm != nullptr, "NCCL communicator already aborted");
    engine_->check_health(ch_, posted_, what_);
    return false;
  }
  // The compute stream waits for the transfer's event; the host goes on.
  bool order_before_compute() override {
    if (!finished_) CUDA_CHECK(cudaStreamWaitEvent(context().compute, done_, 0));
    return true;
  }

 private:
  std::shared_ptr<NcclEngine> engine_;
  Channel& ch_;
  cudaEvent_t done_;
  std::string what_;
  Clock::time_point posted_;
  bool finished_ = false;
};

class NcclTransport final : public Transport {
 public:
  NcclTransport(MPI_Comm comm, double timeout_s)
      : engine_(std::make_shared<NcclEngine>(comm, timeout_s)),
        max_tag_(mpi_tag_upper_bound(comm)) {}
  const char* name() const override { return "nccl"; }
  int rank() const override { return engine_->rank(); }
  int size() const override { return engine_->size(); }
  int max_tag() const override { return max_tag_; }

  std::unique_ptr<PendingTransfer> isend(const Tensor& buf, int peer, int tag) override {
    return post(true, const_cast<void*>(buf.raw()), buf, peer, tag);
  }
  std::unique_ptr<PendingTransfer> irecv(Tensor& buf, int peer, int tag) override {
    return post(false, buf.raw(), buf, peer, tag);
  }

 private:
  std::unique_ptr<PendingTransfer> post(bool send, void* ptr, const Tensor& buf, int peer,
                                        int tag) {
    PT_CHECK(buf.device() == Device::CUDA,
             "nccl transport: buffer " + shape_string(buf.shape()) + " is not on the GPU");
    Channel& ch = engine_->channel(send, peer);
    cudaEvent_t done = engine_->post(ch, send, ptr, buf.bytes());
    const std::string what = std::string(send ? "send to" : "receive from") + " rank " +
                             std::to_string(peer) + " (tag " + std::to_string(tag) + ", " +
                             std::to_string(buf.bytes()) + " bytes)";
    return std::make_unique<NcclTransfer>(engine_, ch, done, what);
  }

  std::shared_ptr<NcclEngine> engine_;
  int max_tag_ = 32767;
};

}  // namespace

std::unique_ptr<Transport> make_nccl_transport(MPI_Comm comm, double timeout_s) {
  return std::make_unique<NcclTransport>(comm, timeout_s);
}

}  // namespace pt::cuda
