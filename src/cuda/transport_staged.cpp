// transport_staged.cpp: the host-staged MPI transport for device tensors.
//
// Open MPI here is not CUDA-aware, so a send copies device -> pinned host on
// the transport's stream (after the compute stream reaches the point where the
// send was posted), then MPI_Isend; a receive does MPI_Irecv into pinned host
// memory, then copies host -> device. Each transfer is a small state machine;
// every isend/irecv/test advances all transfers of the transport, so a rank
// waiting on one receive still starts its own sends. Works when two ranks
// share a GPU (NCCL refuses that) and for single-GPU tests. A transfer dropped
// before it finished (error paths) returns its pinned buffer to the pool only
// once MPI has let go of it (StagedOp::withdraw).
#include <cuda_runtime.h>
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <memory>
#include <vector>

#include "check.hpp"
#include "context.hpp"
#include "pinned_pool.hpp"
#include "pipetrain/base/mpi_cancel.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/cuda/cuda.hpp"

namespace pt::cuda {

namespace {

enum class Stage { Copying, Messaging, Done };

// How long a dropped transfer's cancellation may take before its buffer is retired.
constexpr double kRecvCancelS = 2.0;  // a cancelled receive completes at once in practice
constexpr double kSendCancelS = 0.2;  // an undelivered send usually cannot be cancelled

// One transfer. Send: Copying (D2H) -> Messaging (MPI_Isend) -> Done.
// Receive: Messaging (MPI_Irecv) -> Copying (H2D) -> Done.
struct StagedOp {
  bool is_send = false;
  Stage stage = Stage::Messaging;
  void* device = nullptr;
  size_t bytes = 0;
  int peer = 0, tag = 0;
  PinnedBuffer host;
  cudaEvent_t ready = nullptr;   // compute stream at post time
  cudaEvent_t copied = nullptr;  // the copy of this transfer finished
  MPI_Request request = MPI_REQUEST_NULL;

  ~StagedOp() {
    if (stage == Stage::Copying && copied) {  // before host is reused
      DeadlineScope deadline("a staged transfer's device copy, dropped early");
      cudaEventSynchronize(copied);
    }
    if (request != MPI_REQUEST_NULL) withdraw();  // dropped early (error path only)
    if (ready) cudaEventDestroy(ready);
    if (copied) cudaEventDestroy(copied);
  }

  // The pinned buffer goes back to the pool only once MPI is done with it: a
  // cancelled receive completes within moments; a send that cannot be
  // cancelled (Open MPI does not cancel undelivered sends) may still be read
  // by MPI, so its buffer is retired, never reused.
  void withdraw() {
    const double limit_s = is_send ? kSendCancelS : kRecvCancelS;
    if (cancel_request(request, limit_s) != CancelOutcome::StillActive) return;
    std::fprintf(stderr,
                 "pipetrain: mpi_staged: a dropped %s rank %d (tag %d) could not be cancelled; "
                 "its %zu-byte pinned buffer is retired\n",
                 is_send ? "send to" : "receive from", peer, tag, bytes);
    host.retire();
  }
};

class Engine {
 public:
  explicit Engine(MPI_Comm comm) : comm_(comm) {
    context();
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~Engine() {
    active_.clear();
    try {
      wait_for_stream(stream_, "the staged transport's copy stream at shutdown");
    } catch (const std::exception&) {  // a destructor reports nothing more: the error path is under way
    }
    cudaStreamDestroy(stream_);
  }

  std::shared_ptr<StagedOp> post(bool is_send, void* device, size_t bytes, int peer, int tag) {
    PT_CHECK(bytes <= static_cast<size_t>(INT_MAX), "message over 2 GiB");
    Context& ctx = context();
    auto op = std::make_shared<StagedOp>();
    op->is_send = is_send;
    op->device = device;
    op->bytes = bytes;
    op->peer = peer;
    op->tag = tag;
    op->host = PinnedBuffer(bytes);
    CUDA_CHECK(cudaEventCreateWithFlags(&op->ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&op->copied, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(op->ready, ctx.compute));
    if (is_send) {
      CUDA_CHECK(cudaStreamWaitEvent(stream_, op->ready, 0));
      copy(op->host.get(), device, bytes, cudaMemcpyDeviceToHost, *op);
      op->stage = Stage::Copying;
    } else {
      MPI_CHECK(MPI_Irecv(op->host.get(), static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_,
                          &op->request));
      op->stage = Stage::Messaging;
    }
    active_.push_back(op);
    progress();
    return op;
  }

  // Advances every active transfer as far as it can go without waiting.
  void progress() {
    size_t kept = 0;
    for (size_t i = 0; i < active_.size(); ++i) {
      advance(*active_[i]);
      if (active_[i]->stage != Stage::Done) active_[kept++] = std::move(active_[i]);
    }
    active_.resize(kept);
  }

  void forget(const std::shared_ptr<StagedOp>& op) {
    active_.erase(std::remove(active_.begin(), active_.end(), op), active_.end());
  }

 private:
  void copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, StagedOp& op) {
    if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, stream_));
    CUDA_CHECK(cudaEventRecord(op.copied, stream_));
  }

  static bool copy_done(StagedOp& op) { return event_completed(op.copied); }

  bool message_done(StagedOp& op) {
    int flag = 0;
    MPI_CHECK(MPI_Test(&op.request, &flag, MPI_STATUS_IGNORE));
    return flag != 0;
  }

  void advance(StagedOp& op) {
    if (op.stage == Stage::Copying && copy_done(op)) {
      if (op.is_send) {
        MPI_CHECK(MPI_Isend(op.host.get(), static_cast<int>(op.bytes), MPI_BYTE, op.peer, op.tag,
                            comm_, &op.request));
        op.stage = Stage::Messaging;
      } else {
        op.stage = Stage::Done;
        op.host = PinnedBuffer();
        return;
      }
    }
    if (op.stage == Stage::Messaging && message_done(op)) {
      if (op.is_send) {
        op.stage = Stage::Done;
        op.host = PinnedBuffer();
      } else {
        // H2D after the compute work queued before this receive was posted.
        CUDA_CHECK(cudaStreamWaitEvent(stream_, op.ready, 0));
        copy(op.device, op.host.get(), op.bytes, cudaMemcpyHostToDevice, op);
        op.stage = Stage::Copying;
      }
    }
  }

  MPI_Comm comm_;
  cudaStream_t stream_ = nullptr;
  std::vector<std::shared_ptr<StagedOp>> active_;
};

class StagedTransfer final : public PendingTransfer {
 public:
  StagedTransfer(std::shared_ptr<Engine> engine, std::shared_ptr<StagedOp> op)
      : engine_(std::move(engine)), op_(std::move(op)) {}
  ~StagedTransfer() override {
    if (op_->stage != Stage::Done) engine_->forget(op_);
  }
  bool test() override {
    if (op_->stage == Stage::Done) return true;
    engine_->progress();
    return op_->stage == Stage::Done;
  }

 private:
  std::shared_ptr<Engine> engine_;
  std::shared_ptr<StagedOp> op_;
};

class StagedTransport final : public Transport {
 public:
  explicit StagedTransport(MPI_Comm comm) : comm_(comm), engine_(std::make_shared<Engine>(comm)) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    max_tag_ = mpi_tag_upper_bound(comm_);
  }
  const char* name() const override { return "mpi_staged"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int max_tag() const override { return max_tag_; }

  std::unique_ptr<PendingTransfer> isend(const Tensor& buf, int peer, int tag) override {
    check(buf);
    auto op = engine_->post(true, const_cast<void*>(buf.raw()), buf.bytes(), peer, tag);
    return std::make_unique<StagedTransfer>(engine_, std::move(op));
  }
  std::unique_ptr<PendingTransfer> irecv(Tensor& buf, int peer, int tag) override {
    check(buf);
    auto op = engine_->post(false, buf.raw(), buf.bytes(), peer, tag);
    return std::make_unique<StagedTransfer>(engine_, std::move(op));
  }

 private:
  static void check(const Tensor& buf) {
    PT_CHECK(buf.device() == Device::CUDA,
             "mpi_staged transport: buffer " + shape_string(buf.shape()) + " is not on the GPU");
  }

  MPI_Comm comm_;
  std::shared_ptr<Engine> engine_;
  int rank_ = 0, size_ = 1, max_tag_ = 32767;
};

}  // namespace

std::unique_ptr<Transport> make_staged_transport(MPI_Comm comm) {
  return std::make_unique<StagedTransport>(comm);
}

}  // namespace pt::cuda
