// transport_nccl_model.cpp: a CPU transport with NCCL's point-to-point
// semantics, so that CI (which has no GPU) proves every schedule and the
// executor correct under them (pipeline.transport = "nccl_model";
// docs/reliability.md, "NCCL semantics on the CPU").
//
// What is modelled, as the NCCL transport (src/cuda/transport_nccl.cpp) uses NCCL:
//  - Channels. One per ring link and direction (rank r -> r+1 and r+1 -> r),
//    like its 2-rank communicators, each with one stream. NCCL has no tags:
//    the k-th send on a channel meets the k-th receive. Here messages travel
//    with their position on the channel as MPI tag, the executor's tag goes
//    alongside, and a receive whose tag differs is an error (under NCCL the
//    payloads would be silently exchanged), as is a message longer than its
//    receive. A shorter one (a truncated message) is delivered with its size
//    (received_bytes), which the executor compares with the buffer and the
//    message check with the envelope (docs/reliability.md).
//  - Rendezvous. A send completes only once its receive is posted
//    (MPI_Issend), and the transfers of one channel complete in posting
//    order (one stream).
//  - Lazy connection, when asked for (NCCL's own behaviour, which the NCCL
//    transport now avoids): the first operation on a channel blocks the host
//    until the peer makes its first call on that channel. Without the
//    option every channel is connected in the constructor, which every rank
//    enters together: the fix applied to the NCCL transport.
#include <mpi.h>

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/mpi_cancel.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/transport.hpp"

namespace pt {

namespace {

int checked_count(const Tensor& buf) {
  PT_CHECK(buf.bytes() <= static_cast<size_t>(INT32_MAX), "message over 2 GiB");
  return static_cast<int>(buf.bytes());
}

bool test_request(MPI_Request& req) {
  if (req == MPI_REQUEST_NULL) return true;
  int done = 0;
  MPI_CHECK(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
  return done != 0;
}

// Withdraws a request; false when MPI may still use its buffer.
bool drop_request(MPI_Request& req, bool send) {
  if (req == MPI_REQUEST_NULL) return true;
  return cancel_request(req, send ? 0.2 : 2.0) != CancelOutcome::StillActive;
}

// One posted send or receive: its payload and the (tag, bytes) that travels with it.
struct Transfer {
  Tensor buf;  // (rows, width) the payload; keeps its storage alive while MPI may use it
  bool send = false;
  long long position = 0;    // k: the k-th transfer of its channel
  long long header[2] = {};  // (executor tag, bytes); a receive's arrives here
  long long expected[2] = {};
  MPI_Request data = MPI_REQUEST_NULL, meta = MPI_REQUEST_NULL;
  bool complete = false;
  long long received = -1;  // a completed receive: the bytes its sender sent
  ~Transfer() {
    const bool data_free = drop_request(data, send);
    // The 16-byte header (and the connection messages) go eagerly: a send
    // of them completes locally at once, and a receive can be cancelled.
    drop_request(meta, send);
    if (!data_free) retire_buffer(buf);
  }
};

// One direction of one link, as NCCL sees it: transfers complete in order.
struct Channel {
  int peer = -1;
  bool send = false;
  bool connected = false;
  long long posted = 0;
  std::deque<std::shared_ptr<Transfer>> in_flight;  // oldest first
};

class NcclModelTransport;

class ModelPending final : public PendingTransfer {
 public:
  ModelPending(NcclModelTransport& owner, Channel& channel, std::shared_ptr<Transfer> transfer)
      : owner_(owner), channel_(channel), transfer_(std::move(transfer)) {}
  bool test() override;
  int64_t received_bytes() const override { return transfer_->received; }

 private:
  NcclModelTransport& owner_;
  Channel& channel_;
  std::shared_ptr<Transfer> transfer_;
};

class NcclModelTransport final : public Transport {
 public:
  NcclModelTransport(MPI_Comm comm, const NcclModelOptions& options) : options_(options) {
    MPI_CHECK(MPI_Comm_rank(comm, &rank_));
    MPI_CHECK(MPI_Comm_size(comm, &size_));
    data_ = duplicate(comm, "the NCCL-model data communicator");
    meta_ = duplicate(comm, "the NCCL-model header communicator");
    hello_ = duplicate(comm, "the NCCL-model connection communicator");
    max_position_ = mpi_tag_upper_bound(comm);
    if (!options_.lazy_connect) connect_all();
  }

  ~NcclModelTransport() override {
    channels_.clear();
    for (MPI_Comm* c : {&data_, &meta_, &hello_})
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }

  const char* name() const override { return "nccl_model"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int max_tag() const override { return max_position_; }

  std::unique_ptr<PendingTransfer> isend(const Tensor& buf, int peer, int tag) override {
    Channel& ch = channel(peer, true);
    connect_on_first_use(ch);
    auto t = start(ch, tag, buf.bytes());
    t->buf = buf;
    t->header[0] = tag;
    t->header[1] = static_cast<long long>(buf.bytes());
    const int pos = static_cast<int>(t->position % max_position_);
    MPI_CHECK(MPI_Issend(buf.raw(), checked_count(buf), MPI_BYTE, peer, pos, data_, &t->data));
    MPI_CHECK(MPI_Isend(t->header, 2, MPI_LONG_LONG, peer, pos, meta_, &t->meta));
    return std::make_unique<ModelPending>(*this, ch, t);
  }

  std::unique_ptr<PendingTransfer> irecv(Tensor& buf, int peer, int tag) override {
    Channel& ch = channel(peer, false);
    connect_on_first_use(ch);
    auto t = start(ch, tag, buf.bytes());
    t->buf = buf;
    const int pos = static_cast<int>(t->position % max_position_);
    MPI_CHECK(MPI_Irecv(buf.raw(), checked_count(buf), MPI_BYTE, peer, pos, data_, &t->data));
    MPI_CHECK(MPI_Irecv(t->header, 2, MPI_LONG_LONG, peer, pos, meta_, &t->meta));
    return std::make_unique<ModelPending>(*this, ch, t);
  }

  // Completes the channel's transfers in order, as far as they have arrived.
  void advance(Channel& ch) {
    while (!ch.in_flight.empty()) {
      Transfer& t = *ch.in_flight.front();
      if (!test_request(t.meta) || !test_request(t.data)) return;
      if (!t.send) check_header(ch, t);
      t.complete = true;
      ch.in_flight.pop_front();
    }
  }

 private:
  MPI_Comm duplicate(MPI_Comm comm, const char* what) { return timed_comm_dup(comm, what); }

  // The ring neighbours, both directions: rank r talks to r - 1 and r + 1 (mod P).
  std::vector<int> neighbours() const {
    std::vector<int> peers;
    for (int peer : {(rank_ + 1) % size_, (rank_ - 1 + size_) % size_})
      if (peer != rank_ && (peers.empty() || peers[0] != peer)) peers.push_back(peer);
    return peers;
  }

  Channel& channel(int peer, bool send) {
    const std::vector<int> peers = neighbours();
    PT_CHECK(peer != rank_ && (peer == peers.front() || peer == peers.back()),
             "nccl_model transport: rank " + std::to_string(rank_) + " cannot reach rank " +
                 std::to_string(peer) + " (ring neighbours rank +- 1 mod P only, as NCCL's)");
    Channel& ch = channels_[{peer, send}];
    ch.peer = peer;
    ch.send = send;
    return ch;
  }

  std::shared_ptr<Transfer> start(Channel& ch, int tag, size_t bytes) {
    auto t = std::make_shared<Transfer>();
    t->send = ch.send;
    t->position = ch.posted++;
    t->expected[0] = tag;
    t->expected[1] = static_cast<long long>(bytes);
    ch.in_flight.push_back(t);
    return t;
  }

  // The data sender of a channel names it in the connection messages.
  int hello_tag(const Channel& ch) const { return ch.send ? rank_ : ch.peer; }

  void post_hello(const Channel& ch, long long* in, long long* out, MPI_Request* reqs) {
    MPI_CHECK(MPI_Isend(out, 1, MPI_LONG_LONG, ch.peer, hello_tag(ch), hello_, &reqs[0]));
    MPI_CHECK(MPI_Irecv(in, 1, MPI_LONG_LONG, ch.peer, hello_tag(ch), hello_, &reqs[1]));
  }

  // Every channel at once: all ranks are in the constructor together.
  void connect_all() {
    std::vector<Channel*> all;
    for (int peer : neighbours())
      for (bool send : {true, false}) all.push_back(&channel(peer, send));
    std::vector<long long> in(all.size()), out(all.size(), 1);
    std::vector<MPI_Request> reqs(2 * all.size());
    for (size_t i = 0; i < all.size(); ++i) post_hello(*all[i], &in[i], &out[i], &reqs[2 * i]);
    for (MPI_Request& r : reqs) timed_wait(r, MPI_COMM_SELF, "the NCCL-model channel set-up");
    for (Channel* ch : all) ch->connected = true;
  }

  // NCCL's lazy connection: the first call blocks until the peer's first call.
  void connect_on_first_use(Channel& ch) {
    if (ch.connected) return;
    long long in = 0, out = 1;
    MPI_Request reqs[2];
    post_hello(ch, &in, &out, reqs);
    const bool done = poll_until([&] { return test_request(reqs[0]) && test_request(reqs[1]); },
                                 wait_limit());
    if (!done) {
      drop_request(reqs[0], true);
      drop_request(reqs[1], false);
      const std::string dir = ch.send ? "send to" : "receive from";
      const int from = ch.send ? rank_ : ch.peer, to = ch.send ? ch.peer : rank_;
      throw TimeoutError(
          "timed out after " + std::to_string(static_cast<int>(wait_limit())) + " s " +
          wait_phase() + " in the first " + dir + " rank " + std::to_string(ch.peer) +
          " on the NCCL channel " + std::to_string(from) + "->" + std::to_string(to) +
          ": NCCL connects a channel on first use and blocks the host until rank " +
          std::to_string(ch.peer) + " makes its own first call on it (a deadlock under NCCL; "
          "pipeline.transport = nccl_model with lazy connection)");
    }
    ch.connected = true;
  }

  // A message shorter than its receive (a truncated message) has the right
  // tag: it is let through with its size (received_bytes), as a transport
  // that does not compare sizes would, and the executor names it.
  void check_header(const Channel& ch, Transfer& t) const {
    t.received = t.header[1];
    if (t.header[0] == t.expected[0] && t.header[1] <= t.expected[1]) return;
    throw Error("nccl_model transport: message " + std::to_string(t.position) +
                " on the channel from rank " + std::to_string(ch.peer) + " to rank " +
                std::to_string(rank_) + " was sent with tag " + std::to_string(t.header[0]) +
                " (" + std::to_string(t.header[1]) + " bytes) but received as tag " +
                std::to_string(t.expected[0]) + " (" + std::to_string(t.expected[1]) +
                " bytes): NCCL matches messages by order, so under NCCL these payloads "
                "would be exchanged; the two ranks post this channel's transfers in "
                "different orders");
  }

  NcclModelOptions options_;
  int rank_ = 0, size_ = 1;
  int max_position_ = 32767;
  MPI_Comm data_ = MPI_COMM_NULL, meta_ = MPI_COMM_NULL, hello_ = MPI_COMM_NULL;
  std::map<std::pair<int, bool>, Channel> channels_;  // (peer, send)
};

bool ModelPending::test() {
  if (transfer_->complete) return true;
  owner_.advance(channel_);
  return transfer_->complete;
}

}  // namespace

std::unique_ptr<Transport> make_nccl_model_transport(MPI_Comm comm,
                                                     const NcclModelOptions& options) {
  return std::make_unique<NcclModelTransport>(comm, options);
}

}  // namespace pt
