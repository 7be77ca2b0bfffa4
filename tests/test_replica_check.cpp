// test_replica_check.cpp: data-parallel replicas that silently disagree
// (data_parallel.check_every, #44 part 4).
//
// (a) When the check runs: every k steps and after every step a checkpoint
//     follows, never with one replica or k = 0.
// (b) Replicas that agree pass it, every step (counted), with 1 and 2 stages.
// (c) One replica's parameter with one bit flipped (the test flips it, or
//     the fault-injection hook PIPETRAIN_TEST_CORRUPT_REPLICA in its own
//     CTest entry) ends the next check on that stage's replicas, naming the
//     stage, the replicas and the parameter.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "mpi_test_util.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/runtime/grid.hpp"
#include "pipetrain/runtime/replica_check.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

Deck replicated_deck() {
  Deck d;
  d.model.mlp.input_dim = 12;
  d.model.mlp.hidden_dim = 16;
  d.model.mlp.output_dim = 5;
  d.model.mlp.depth = 4;
  d.data.samples = 128;
  d.training.steps = 3;
  d.training.batch_size = 16;
  d.training.lr = 1e-2;
  d.training.blas_threads = 1;
  d.pipeline.micro_batches = 2;
  d.pipeline.timeout_s = 10;
  d.data_parallel.replicas = 2;
  d.data_parallel.check_every = 1;
  return d;
}

const char* corrupt_env() { return std::getenv("PIPETRAIN_TEST_CORRUPT_REPLICA"); }

TEST(ReplicaCheck, RunsEveryKStepsAndBeforeEveryCheckpoint) {
  if (world_rank() != 0) return;
  std::vector<int64_t> due;
  for (int64_t step = 0; step < 10; ++step)
    if (replica_check_due(step, 100, 4, 10, 2)) due.push_back(step);
  EXPECT_EQ(due, (std::vector<int64_t>{3, 7, 9}));  // checkpoints after 4, 8 and the last step
  due.clear();
  for (int64_t step = 0; step < 10; ++step)
    if (replica_check_due(step, 3, 0, 10, 2)) due.push_back(step);
  EXPECT_EQ(due, (std::vector<int64_t>{2, 5, 8}));
  EXPECT_FALSE(replica_check_due(3, 0, 4, 10, 2));  // off
  EXPECT_FALSE(replica_check_due(3, 1, 4, 10, 1));  // one replica
}

TEST(ReplicaCheck, AgreeingReplicasPassEveryStep) {
  if (corrupt_env()) GTEST_SKIP() << "a fault-injection run (ReplicaFault)";
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs 2 replicas";
  const Deck deck = replicated_deck();
  const int64_t before = replica_checks_run();
  ProcessGrid grid(MPI_COMM_WORLD, 2);
  Trainer trainer(deck, grid);
  for (int64_t s = 0; s < deck.training.steps; ++s) trainer.train_step(s);
  EXPECT_EQ(replica_checks_run() - before, deck.training.steps);
}

// The last stage's replica 1 gets one bit of its first parameter flipped
// after step 0; the check after step 1 names them, on both of its replicas.
TEST(ReplicaCheck, ACorruptedReplicaIsNamed) {
  if (corrupt_env()) GTEST_SKIP() << "a fault-injection run (ReplicaFault)";
  if (world_size() % 2 != 0) GTEST_SKIP() << "needs 2 replicas";
  Deck deck = replicated_deck();
  deck.data_parallel.check_every = 2;  // the check after step 1, not after step 0
  ProcessGrid grid(MPI_COMM_WORLD, 2);
  Trainer trainer(deck, grid);
  trainer.train_step(0);
  const int last_stage = trainer.schedule().num_stages - 1;
  const bool last = trainer.stages().back().stage == last_stage;
  Param* first = nullptr;
  for (Param* p : trainer.params())
    if (!first) first = p;
  if (last && trainer.replica() == 1) {
    float* v = first->value.f32();
    uint32_t bits;
    std::memcpy(&bits, v, 4);
    bits ^= 1u << 22;  // the top mantissa bit: the next update cannot round it away
    std::memcpy(v, &bits, 4);
  }
  std::string error;
  try {
    trainer.train_step(1);
  } catch (const Error& e) {
    error = e.what();
  }
  if (!last) {
    EXPECT_EQ(error, "") << "the other stage's replicas agree";
    return;
  }
  const std::string want = "data-parallel replicas disagree after step 1: stage " +
                           std::to_string(last_stage) + ", parameter " + first->name +
                           " (the first that differs): replica 0 (world rank ";
  EXPECT_NE(error.find(want), std::string::npos) << error;
  EXPECT_NE(error.find("replica 1 (world rank"), std::string::npos) << error;
  EXPECT_NE(error.find("before a checkpoint saves it"), std::string::npos) << error;
}

// PIPETRAIN_TEST_CORRUPT_REPLICA=1:0: world rank 1 (replica 1 of stage 0
// at np 2) flips a bit of its last parameter after step 0's update; the
// check right after names it.
TEST(ReplicaFault, TheHookIsCaughtAndNamed) {
  if (!corrupt_env()) GTEST_SKIP() << "PIPETRAIN_TEST_CORRUPT_REPLICA is not set (tests/CMakeLists.txt)";
  ASSERT_EQ(world_size(), 2);
  const Deck deck = replicated_deck();
  ProcessGrid grid(MPI_COMM_WORLD, 2);
  Trainer trainer(deck, grid);
  std::string error;
  try {
    trainer.train_step(0);
  } catch (const Error& e) {
    error = e.what();
  }
  const std::string last_param = trainer.params().back()->name;
  const std::string want = "data-parallel replicas disagree after step 0: stage 0, parameter " +
                           last_param + " (the first that differs): replica 0 (world rank 0) holds digest ";
  EXPECT_NE(error.find(want), std::string::npos) << error;
  EXPECT_NE(error.find("replica 1 (world rank 1) holds digest"), std::string::npos) << error;
}

}  // namespace
}  // namespace pt
