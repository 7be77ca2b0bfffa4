// unit_mover.cpp: the transfers of a rebalancing move.
#include "pipetrain/runtime/unit_mover.hpp"

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"

namespace pt {

namespace {

constexpr int kMoveTag = 30000;  // below MPI's guaranteed tag bound (32767)

// The stage that holds unit `u` under `counts`.
int owner_of(const std::vector<int64_t>& counts, int64_t u) {
  int64_t end = 0;
  for (size_t s = 0; s < counts.size(); ++s) {
    end += counts[s];
    if (u < end) return static_cast<int>(s);
  }
  PT_FAIL("unit " + std::to_string(u) + " beyond the partition");
}

// One tensor of a moving unit on its way: what is sent, or where a receive
// for a device tensor lands before it is copied to `target`.
struct Transfer {
  MPI_Request request = MPI_REQUEST_NULL;
  Tensor host;  // (numel) flat host copy of the moved tensor, sent or received
  Tensor* target = nullptr;  // receives into a device tensor: the new stage's tensor
  std::string what;
};

}  // namespace

std::string counts_text(const std::vector<int64_t>& counts) {
  std::string text = "[";
  for (size_t i = 0; i < counts.size(); ++i) text += (i ? ", " : "") + std::to_string(counts[i]);
  return text + "]";
}

MoveTotals exchange_units(StageModel& leaving, StageModel& next, const std::vector<int64_t>& from,
                          const std::vector<int64_t>& to, int64_t units, MPI_Comm comm) {
  int rank = 0;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  std::vector<Transfer> transfers;
  MoveTotals totals;
  const std::string move = counts_text(from) + " -> " + counts_text(to);
  // Units that stay (and the pinned layers) are already in `next`.
  for (int64_t u = 0; u < units; ++u) {
    const int a = owner_of(from, u), b = owner_of(to, u);
    if (a == b || (a != rank && b != rank)) continue;
    for (Param* p : (a == rank ? leaving : next).unit_params(u)) {
      for (const ParamState& state : param_state(*p)) {
        Tensor& t = *state.tensor;
        Transfer x;
        x.what = "the rebalancing " + std::string(a == rank ? "send" : "receive") + " of " +
                 p->name + "/" + state.name + (a == rank ? " to rank " : " from rank ") +
                 std::to_string(a == rank ? b : a) + " (move " + move + ")";
        PT_CHECK(t.numel() <= (int64_t{1} << 31) - 1, x.what + ": tensor too large for one message");
        const int count = static_cast<int>(t.numel());
        if (a == rank) {
          x.host = t.to(Device::CPU);
          MPI_CHECK(MPI_Isend(x.host.raw(), count, MPI_FLOAT, b, kMoveTag, comm, &x.request));
          ++totals.tensors_sent;
          totals.bytes_sent += static_cast<double>(x.host.bytes());
        } else if (t.device() == Device::CPU) {  // lands in place
          MPI_CHECK(MPI_Irecv(t.raw(), count, MPI_FLOAT, a, kMoveTag, comm, &x.request));
        } else {
          x.host = Tensor::empty(t.shape(), DType::F32, t.category(), Device::CPU);
          x.target = &t;
          MPI_CHECK(MPI_Irecv(x.host.raw(), count, MPI_FLOAT, a, kMoveTag, comm, &x.request));
        }
        transfers.push_back(std::move(x));
      }
    }
  }
  for (Transfer& x : transfers) {
    timed_wait(x.request, comm, x.what);
    if (x.target != nullptr) copy_tensor(x.host, *x.target);
  }
  return totals;
}

}  // namespace pt
