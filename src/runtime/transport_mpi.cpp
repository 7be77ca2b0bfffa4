// transport_mpi.cpp: the MPI transport (MPI_Isend / MPI_Irecv / MPI_Test).
#include <mpi.h>

#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/mpi_cancel.hpp"
#include "pipetrain/runtime/transport.hpp"

namespace pt {

namespace {

class MpiTransfer final : public MpiRequestTransfer {
 public:
  MpiTransfer(const Tensor& buf, bool send) : buf_(buf), send_(send) {}
  ~MpiTransfer() override {
    // A transfer dropped before completion (an error path) is withdrawn; if
    // MPI may still use the buffer, its memory is never given back.
    if (done_ || request_ == MPI_REQUEST_NULL) return;
    if (cancel_request(request_, send_ ? 0.2 : 2.0) == CancelOutcome::StillActive)
      retire_buffer(buf_);
  }

 private:
  Tensor buf_;  // (rows, width) the message's payload; keeps the storage alive while MPI may use it
  bool send_;
};

int checked_count(const Tensor& buf) {
  PT_CHECK(buf.bytes() <= static_cast<size_t>(INT32_MAX), "message over 2 GiB");
  return static_cast<int>(buf.bytes());
}

class MpiTransport final : public Transport {
 public:
  explicit MpiTransport(MPI_Comm comm) : comm_(comm) {
    MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    MPI_CHECK(MPI_Comm_size(comm_, &size_));
    max_tag_ = mpi_tag_upper_bound(comm_);
  }
  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int max_tag() const override { return max_tag_; }

  std::unique_ptr<PendingTransfer> isend(const Tensor& buf, int peer, int tag) override {
    auto t = std::make_unique<MpiTransfer>(buf, true);
    MPI_CHECK(MPI_Isend(buf.raw(), checked_count(buf), MPI_BYTE, peer, tag, comm_, &t->request_));
    return t;
  }
  std::unique_ptr<PendingTransfer> irecv(Tensor& buf, int peer, int tag) override {
    auto t = std::make_unique<MpiTransfer>(buf, false);
    t->counts_bytes_ = true;
    MPI_CHECK(MPI_Irecv(buf.raw(), checked_count(buf), MPI_BYTE, peer, tag, comm_, &t->request_));
    return t;
  }

 private:
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1, max_tag_ = 32767;
};

}  // namespace

bool MpiRequestTransfer::test() {
  if (done_) return true;
  int flag = 0;
  MPI_Status status;
  MPI_CHECK(MPI_Test(&request_, &flag, &status));
  done_ = flag != 0;
  if (done_ && counts_bytes_) {
    int count = 0;
    MPI_CHECK(MPI_Get_count(&status, MPI_BYTE, &count));
    received_ = count;
  }
  return done_;
}

void retire_buffer(const Tensor& buf) {
  static std::vector<Tensor>* retired = new std::vector<Tensor>();  // never freed, on purpose
  retired->push_back(buf);
}

int mpi_tag_upper_bound(MPI_Comm comm) {
  int flag = 0;
  int* ub = nullptr;
  MPI_CHECK(MPI_Comm_get_attr(comm, MPI_TAG_UB, &ub, &flag));
  return flag ? *ub : 32767;
}

std::unique_ptr<Transport> make_mpi_transport(MPI_Comm comm) {
  return std::make_unique<MpiTransport>(comm);
}

}  // namespace pt
