// test_ordered_receives.cpp: the executor's receives that the compute
// stream waits for instead of the host (PendingTransfer::order_before_compute,
// the NCCL transport's cudaStreamWaitEvent; docs/cuda.md "Streams and
// events"), proven on the CPU with a transport that claims the ordering.
//
// The CPU computes synchronously, so the stand-in makes the data land before
// it says yes (it polls the MPI receive, bounded); what is tested is the
// executor's side, which is the same on a GPU: every consumed receive goes
// through the ordering when nothing synchronises computes, none while a
// trace is recorded, the numbers are bitwise those of host waits, every
// ordered receive is still seen complete before the step ends, and a receive
// that never lands ends the step with a timeout naming its action.
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <string>

#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/trainer.hpp"
#include "pipetrain/runtime/transport.hpp"
#include "test_decks.hpp"
#include "training_run.hpp"

namespace pt {
namespace {

struct Counts {
  int receives = 0;  // irecv calls
  int ordered = 0;   // order_before_compute calls answered yes
};

// A receive the compute stream would wait for; `inner` null: it never
// lands (a peer that never sends), though the ordering is granted. With
// `in_flight_until_ordered` it reports no completion before the ordering
// was asked for, as a GPU transfer still in flight would: a host wait for it
// would then never end (and time out), so the test proves there is none.
class OrderedReceive final : public PendingTransfer {
 public:
  OrderedReceive(std::unique_ptr<PendingTransfer> inner, Counts& counts,
                 bool in_flight_until_ordered)
      : inner_(std::move(inner)), counts_(counts), hidden_(in_flight_until_ordered) {}
  bool test() override { return !hidden_ && inner_ && inner_->test(); }
  bool order_before_compute() override {
    ++counts_.ordered;
    hidden_ = false;
    if (inner_ && !poll_until([&] { return inner_->test(); }, 30.0))
      throw Error("the test transport's receive did not land in 30 s");
    return true;
  }

 private:
  std::unique_ptr<PendingTransfer> inner_;  // null: never lands
  Counts& counts_;
  bool hidden_;
};

// MPI underneath; every receive answers order_before_compute. With
// `lost_tag` >= 0 the receive of that tag on rank `lost_rank` is never posted.
class OrderingTransport final : public Transport {
 public:
  OrderingTransport(MPI_Comm comm, Counts& counts, bool in_flight_until_ordered,
                    int lost_rank = -1, int lost_tag = -1)
      : mpi_(make_mpi_transport(comm)), counts_(counts), hidden_(in_flight_until_ordered),
        lost_rank_(lost_rank), lost_tag_(lost_tag) {}
  const char* name() const override { return "ordering (test)"; }
  int rank() const override { return mpi_->rank(); }
  int size() const override { return mpi_->size(); }
  int max_tag() const override { return mpi_->max_tag(); }
  std::unique_ptr<PendingTransfer> isend(const Tensor& buf, int peer, int tag) override {
    return mpi_->isend(buf, peer, tag);
  }
  std::unique_ptr<PendingTransfer> irecv(Tensor& buf, int peer, int tag) override {
    ++counts_.receives;
    const bool lost = rank() == lost_rank_ && tag == lost_tag_;
    return std::make_unique<OrderedReceive>(lost ? nullptr : mpi_->irecv(buf, peer, tag),
                                            counts_, hidden_);
  }

 private:
  std::unique_ptr<Transport> mpi_;
  Counts& counts_;
  bool hidden_;
  int lost_rank_, lost_tag_;
};

// The tests' tiny MLP (test_decks.hpp), 24 samples a step.
Deck small_deck(const std::string& schedule, int micro_batches) {
  Deck d = pt_test::tiny_mlp(24);
  d.pipeline.micro_batches = micro_batches;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.timeout_s = 30;
  return d;
}

test::RunResult train_ordering(const Deck& deck, Counts& counts, bool in_flight_until_ordered) {
  ComputeSetup setup;
  setup.make_transport = [&](MPI_Comm comm) -> std::unique_ptr<Transport> {
    return std::make_unique<OrderingTransport>(comm, counts, in_flight_until_ordered);
  };
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  test::RunResult r;
  {
    Trainer trainer(deck, comm, setup);
    r = test::train_steps(trainer, deck);
  }
  MPI_Comm_free(&comm);
  return r;
}

int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

TEST(OrderedReceives, EveryReceiveIsOrderedAndTheNumbersAreThoseOfHostWaits) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  for (const char* schedule : {"gpipe", "1f1b", "zb-h1"})
    for (int n : {1, 2, 4}) {
      const Deck deck = small_deck(schedule, n);
      const std::string label = std::string(schedule) + " N=" + std::to_string(n);
      Counts counts;
      const test::RunResult ordered = train_ordering(deck, counts, true);
      const test::RunResult host = test::train_on(deck, world_size());
      test::expect_bitwise(ordered, host, label, true);
      EXPECT_GT(counts.receives, 0) << label;
      EXPECT_EQ(counts.ordered, counts.receives)
          << label << ": a consumed receive was waited for on the host";
    }
}

// A trace ends every compute with its kernels, so a wait ordered on the
// device would show as compute: with one, the host waits (WAIT events).
TEST(OrderedReceives, TracedRunsWaitOnTheHost) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  Deck deck = small_deck("1f1b", 4);
  deck.output.trace = true;
  Counts counts;
  const test::RunResult traced = train_ordering(deck, counts, false);
  EXPECT_GT(counts.receives, 0);
  EXPECT_EQ(counts.ordered, 0) << "a traced run ordered a receive on the device";
  deck.output.trace = false;
  test::expect_bitwise(traced, test::train_on(deck, world_size()), "traced", true);
}

// Rank 1's receive of micro-batch 1's activation never lands: the step
// cannot end; the ordered receive is still awaited, within the timeout,
// and the message names it.
TEST(OrderedReceives, AReceiveThatNeverLandsTimesOutNamingItsAction) {
  if (world_size() != 2) GTEST_SKIP() << "runs at 2 ranks";
  const double saved = wait_limit();
  set_wait_limit(2.0);
  Deck deck = small_deck("gpipe", 2);
  deck.training.steps = 1;
  deck.pipeline.timeout_s = 2.0;
  const int tag_of_mb1_activation_to_stage1 = (1 * 2 + 1) * 2 + 0;  // Executor::tag
  Counts counts;
  ComputeSetup setup;
  setup.make_transport = [&](MPI_Comm comm) -> std::unique_ptr<Transport> {
    return std::make_unique<OrderingTransport>(comm, counts, false, 1,
                                               tag_of_mb1_activation_to_stage1);
  };
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::string message;
  try {
    Trainer trainer(deck, comm, setup);
    trainer.train_step(0);
  } catch (const TimeoutError& e) {
    message = e.what();
  }
  MPI_Comm_free(&comm);
  set_wait_limit(saved);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 1) {
    EXPECT_NE(message.find("waiting on 1RECV_F1"), std::string::npos) << message;
    EXPECT_NE(message.find("from rank 0"), std::string::npos) << message;
  } else {
    EXPECT_FALSE(message.empty()) << "rank 0 should time out in the step's end";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace pt
