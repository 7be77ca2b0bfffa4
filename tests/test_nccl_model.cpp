// test_nccl_model.cpp: every schedule the project runs works under NCCL's
// point-to-point semantics, modelled on the CPU (pipeline.transport =
// "nccl_model"), and the validator's NCCL simulation predicts exactly which
// schedules NCCL's lazy connection deadlocks.
//
// (a) Generated schedules (GPipe and 1F1B, N = 1, N < P, N = P, N > P) and a
//     hand-written schedule file give bitwise the same losses and parameters
//     under nccl_model as under plain MPI.
// (b) With NCCL's lazy connection (the NCCL transport's behaviour before it
//     connected every channel at start), a run deadlocks -- caught by the
//     timeout and named as a first-use block -- exactly when the validator's
//     lazy-connection simulation refuses the schedule: GPipe with N >= 2,
//     1F1B with 2 <= N < P.
// (c) The bookkeeping of the real NCCL transport and replica group
//     (runtime/comm_ledger.hpp, #40 2.6): communicators with an operation in
//     flight, or one dropped unfinished, are aborted, never destroyed (which
//     would hang); a poll past the timeout or with an asynchronous error ends
//     the wait.
#include <gtest/gtest.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/runtime/comm_ledger.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

Deck small_deck(int micro_batches, const std::string& schedule) {
  Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 24;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 8;
  d.data.samples = 256;
  d.training.steps = 2;
  d.training.batch_size = 24;
  d.training.lr = 1e-2;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = micro_batches;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.timeout_s = 30;
  return d;
}

struct Outcome {
  std::vector<double> losses;
  std::vector<float> params;  // world rank 0
  std::string timeout;        // the TimeoutError's message, if any
};

// Trains on the whole world with `make_transport` (null: MPI).
Outcome train(const Deck& deck, std::function<std::unique_ptr<Transport>(MPI_Comm)> make) {
  ComputeSetup setup;
  setup.make_transport = std::move(make);
  Outcome out;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  try {
    Trainer trainer(deck, comm, setup);
    for (int64_t s = 0; s < deck.training.steps; ++s)
      out.losses.push_back(trainer.train_step(s).loss);
    out.params = trainer.gather_parameters();
  } catch (const TimeoutError& e) {
    out.timeout = e.what();
  }
  MPI_Comm_free(&comm);
  return out;
}

std::unique_ptr<Transport> nccl_model(MPI_Comm comm) { return make_nccl_model_transport(comm); }
std::unique_ptr<Transport> nccl_model_lazy(MPI_Comm comm) {
  NcclModelOptions options;
  options.lazy_connect = true;
  return make_nccl_model_transport(comm, options);
}

void expect_same(const Outcome& a, const Outcome& b, const std::string& label) {
  ASSERT_TRUE(a.timeout.empty()) << label << ": " << a.timeout;
  ASSERT_TRUE(b.timeout.empty()) << label << ": " << b.timeout;
  ASSERT_EQ(a.losses.size(), b.losses.size()) << label;
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&a.losses[i], &b.losses[i], sizeof(double)), 0) << label << " step " << i;
  ASSERT_EQ(a.params.size(), b.params.size()) << label;
  EXPECT_EQ(a.params, b.params) << label << ": parameters differ";
}

std::vector<int> micro_batch_counts() {
  const int p = world_size();
  std::vector<int> counts = {1, 2, p, 2 * p + 1};
  if (p > 2) counts.push_back(p - 1);  // N < P
  return counts;
}

TEST(NcclModel, GeneratedSchedulesMatchMpiBitwise) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  for (const char* schedule : {"gpipe", "1f1b"})
    for (int n : micro_batch_counts()) {
      const Deck deck = small_deck(n, schedule);
      const std::string label = std::string(schedule) + " N=" + std::to_string(n);
      expect_same(train(deck, nullptr), train(deck, nccl_model), label);
    }
}

// A schedule file: 1F1B with every receive posted just before its consumer,
// which the generators never produce; valid under both semantics.
TEST(NcclModel, ScheduleFileMatchesMpiBitwise) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  const int n = 4;
  Schedule s = generate_1f1b(world_size(), n);
  for (auto& rank : s.ranks) {
    std::vector<Action> late;
    for (const Action& a : rank) {
      if (a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B) continue;
      const bool needs_f = a.kind == ActionKind::F && a.stage > 0;
      const bool needs_b = a.kind == ActionKind::B && a.stage < s.num_stages - 1;
      if (needs_f) late.push_back({a.stage, ActionKind::RECV_F, a.mb});
      if (needs_b) late.push_back({a.stage, ActionKind::RECV_B, a.mb});
      late.push_back(a);
    }
    rank = late;
  }
  validate_schedule(s, CommSemantics::nccl());
  long long pid = getpid();  // rank 0's names the file on every rank
  MPI_Bcast(&pid, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  const std::string path = "/tmp/pipetrain_test_nccl_model_" + std::to_string(pid) + ".txt";
  if (world_rank() == 0) std::ofstream(path) << format_schedule(s);
  MPI_Barrier(MPI_COMM_WORLD);
  Deck deck = small_deck(n, "file");
  deck.pipeline.schedule_file = path;
  expect_same(train(deck, nullptr), train(deck, nccl_model), "schedule file");
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) std::remove(path.c_str());
}

TEST(NcclModel, LazyConnectionDeadlocksExactlyWhereTheValidatorSays) {
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  const double limit = 2.0;
  const double saved = wait_limit();
  set_wait_limit(limit);
  int deadlocks = 0;
  for (const char* schedule : {"gpipe", "1f1b"})
    for (int n : micro_batch_counts()) {
      Deck deck = small_deck(n, schedule);
      deck.training.steps = 1;
      deck.pipeline.timeout_s = limit;
      const std::string label = std::string(schedule) + " N=" + std::to_string(n);
      bool refused = false;
      try {
        validate_schedule(generate_schedule(schedule, world_size(), n), CommSemantics::nccl(true));
      } catch (const InputError& e) {
        refused = true;
        EXPECT_NE(std::string(e.what()).find("lazy connection"), std::string::npos) << e.what();
      }
      const Outcome run = train(deck, nccl_model_lazy);
      EXPECT_EQ(refused, !run.timeout.empty())
          << label << ": validator " << (refused ? "refuses" : "accepts") << ", run "
          << (run.timeout.empty() ? "completed" : "timed out: " + run.timeout);
      deadlocks += refused;
      // Let every rank finish this case before the next one starts.
      MPI_Barrier(MPI_COMM_WORLD);
    }
  set_wait_limit(saved);
  EXPECT_GT(deadlocks, 0) << "the lazy model reproduced no deadlock";
}

TEST(CommLedger, DestroysOnlyWhenEveryPostedOperationWasSeenComplete) {
  CommLedger ledger;
  EXPECT_EQ(ledger.teardown(), CommLedger::Teardown::Destroy) << "nothing ever posted";
  ledger.posted();  // e.g. the warm-up all-to-all
  ledger.posted();  // and all-gather
  EXPECT_EQ(ledger.outstanding(), 2);
  EXPECT_EQ(ledger.teardown(), CommLedger::Teardown::Abort) << "destroy would wait for them";
  ledger.completed();
  EXPECT_EQ(ledger.teardown(), CommLedger::Teardown::Abort);
  ledger.completed();
  EXPECT_EQ(ledger.outstanding(), 0);
  EXPECT_EQ(ledger.teardown(), CommLedger::Teardown::Destroy);
  EXPECT_THROW(ledger.completed(), Error) << "a completion nobody posted";
}

// A data-parallel timeout: the reducer throws with a bucket in flight and
// its operations are dropped unfinished, then the group is destroyed.
// The device cache may free memory (a device synchronisation) only when no
// ledger of the process has an operation in flight.
TEST(CommLedger, CountsWhatIsInFlightOverEveryLedgerOfTheProcess) {
  const long before = CommLedger::in_flight_anywhere();
  {
    CommLedger transport, replicas;
    transport.posted();
    replicas.posted();
    replicas.posted();
    EXPECT_EQ(CommLedger::in_flight_anywhere(), before + 3);
    replicas.completed();
    EXPECT_EQ(CommLedger::in_flight_anywhere(), before + 2);
    transport.completed();
  }  // replicas goes with one still in flight (aborted): it no longer counts
  EXPECT_EQ(CommLedger::in_flight_anywhere(), before);
}

TEST(CommLedger, AnOperationDroppedUnfinishedMeansAbort) {
  CommLedger ledger;
  ledger.posted();
  ledger.dropped();
  EXPECT_EQ(ledger.teardown(), CommLedger::Teardown::Abort);
  CommLedger after_error;
  after_error.posted();
  after_error.aborted();  // a poll already aborted the communicators
  EXPECT_TRUE(after_error.is_aborted());
  EXPECT_EQ(after_error.teardown(), CommLedger::Teardown::Nothing) << "the handles are gone";
}

TEST(CommLedger, AWaitEndsOnAnAsynchronousErrorOrPastTheTimeout) {
  EXPECT_EQ(judge_wait(false, 0.5, 2.0), WaitVerdict::Pending);
  EXPECT_EQ(judge_wait(false, 2.0, 2.0), WaitVerdict::Pending);
  EXPECT_EQ(judge_wait(false, 2.01, 2.0), WaitVerdict::TimedOut);
  EXPECT_EQ(judge_wait(true, 0.0, 2.0), WaitVerdict::Failed) << "an error ends the wait at once";
  EXPECT_EQ(judge_wait(true, 5.0, 2.0), WaitVerdict::Failed);
}

}  // namespace
}  // namespace pt
