// test_message_checks.cpp: pipeline.check_messages (#44, part 3).
//
// (a) With the check on, training is bitwise what it is without it, under
//     MPI and under the NCCL model, and every message a rank receives was
//     verified (counted: this rank's RECV actions x steps; every SEND sent
//     an envelope).
// (b) Fault injection (PIPETRAIN_TEST_MESSAGE_FAULT, set per CTest entry;
//     tests/CMakeLists.txt): a flipped bit, a message delivered to the wrong
//     micro-batch and a truncated message are each caught by the receiver and
//     named (link, message, what differs); a NaN computed by a stage is named
//     by its stage, action and micro-batch, in the forward and in the
//     backward; without the check a truncated message is still named, by its
//     length. The damaged rank is PT_TEST_TRANSPORT's transport's sender.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mpi_test_util.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/runtime/message_check.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {
namespace {

using test::world_rank;
using test::world_size;

Deck small_deck(bool check, const std::string& schedule = "1f1b", int64_t virtual_stages = 1) {
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
  d.pipeline.micro_batches = 4;
  d.pipeline.schedule = kind_named<ScheduleKind>(schedule);
  d.pipeline.virtual_stages = virtual_stages;
  d.pipeline.timeout_s = 3;
  d.pipeline.check_messages = check;
  return d;
}

std::unique_ptr<Transport> nccl_model(MPI_Comm comm) { return make_nccl_model_transport(comm); }

struct Outcome {
  std::vector<double> losses;
  std::vector<float> params;  // world rank 0
  std::string error;          // the first error's message, if any
  int64_t sends = 0, receives = 0;  // this rank's SEND and RECV actions over the steps
};

Outcome train(const Deck& deck, bool model_nccl) {
  ComputeSetup setup;
  if (model_nccl) setup.make_transport = nccl_model;
  Outcome out;
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  try {
    Trainer trainer(deck, comm, setup);
    for (int64_t s = 0; s < deck.training.steps; ++s) {
      for (const Action& a : trainer.schedule().ranks[trainer.rank()]) {
        out.sends += a.kind == ActionKind::SEND_F || a.kind == ActionKind::SEND_B;
        out.receives += a.kind == ActionKind::RECV_F || a.kind == ActionKind::RECV_B;
      }
      out.losses.push_back(trainer.train_step(s).loss);
    }
    out.params = trainer.gather_parameters();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  MPI_Comm_free(&comm);
  return out;
}

const char* fault_env() { return std::getenv("PIPETRAIN_TEST_MESSAGE_FAULT"); }

void expect_checked_run_matches(const Deck& plain, const Deck& checked, bool model_nccl,
                                const std::string& label) {
  const Outcome off = train(plain, model_nccl);
  const MessageCheckCounts before = message_check_counts();
  const Outcome on = train(checked, model_nccl);
  const MessageCheckCounts after = message_check_counts();
  ASSERT_TRUE(off.error.empty()) << label << ": " << off.error;
  ASSERT_TRUE(on.error.empty()) << label << ": " << on.error;
  ASSERT_EQ(off.losses.size(), on.losses.size());
  for (size_t i = 0; i < on.losses.size(); ++i)
    EXPECT_EQ(std::memcmp(&off.losses[i], &on.losses[i], sizeof(double)), 0) << label << " step " << i;
  EXPECT_EQ(off.params, on.params) << label;
  EXPECT_GT(on.receives, 0) << label;
  EXPECT_EQ(after.verified - before.verified, on.receives) << label << ": a receive went unchecked";
  EXPECT_EQ(after.sent - before.sent, on.sends) << label << ": a send went without its envelope";
}

TEST(MessageChecks, CheckedTrainingIsBitwiseTheSameAndVerifiesEveryMessage) {
  if (fault_env()) GTEST_SKIP() << "a fault-injection run (MessageFault)";
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  for (bool model_nccl : {false, true})
    for (const char* schedule : {"gpipe", "1f1b"})
      expect_checked_run_matches(small_deck(false, schedule), small_deck(true, schedule), model_nccl,
                                 std::string(schedule) + (model_nccl ? " nccl_model" : " mpi"));
}

// Two stages per rank (zb-v: rank P-1 holds stages P-1 and P, handed over
// locally): local handoffs are checked for inf/NaN too, and only messages
// between ranks carry envelopes.
TEST(MessageChecks, TwoStagesPerRankAreCheckedToo) {
  if (fault_env()) GTEST_SKIP() << "a fault-injection run (MessageFault)";
  if (world_size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  expect_checked_run_matches(small_deck(false, "zb-v", 2), small_deck(true, "zb-v", 2), false, "zb-v");
}

// What the rank that notices a fault must say, by kind.
std::vector<std::string> expected_message(const std::string& kind, bool check) {
  const std::string link = "on the link stage 0 (rank 0) -> stage 1 (rank 1), the activation of "
                           "micro-batch 0 in step 1: ";
  if (!check) return {"truncated message on the link stage 0 (rank 0) -> stage 1 (rank 1): the "
                      "activation of micro-batch 0 in step 1 has 288 of its 576 bytes"};
  if (kind == "bitflip") return {"inter-stage message check failed " + link + "checksum: the sender's "};
  if (kind == "wrong_mb")
    return {"inter-stage message check failed " + link +
            "micro-batch: the envelope says 1, this receive is for 0 (pipeline.check_messages"};
  if (kind == "truncate")
    return {"inter-stage message check failed " + link +
                "length: 288 bytes arrived, the envelope counts 144 elements (576 bytes): the "
                "message was truncated; checksum: ",
            "(pipeline.check_messages"};
  return {};
}

TEST(MessageFault, IsCaughtAndNamed) {
  const char* fault = fault_env();
  if (!fault) GTEST_SKIP() << "PIPETRAIN_TEST_MESSAGE_FAULT is not set (see tests/CMakeLists.txt)";
  ASSERT_EQ(world_size(), 2);
  const std::string spec = fault;  // RANK:1:KIND
  const std::string kind = spec.substr(spec.rfind(':') + 1);
  const int faulty_rank = std::stoi(spec.substr(0, spec.find(':')));
  const char* transport = std::getenv("PT_TEST_TRANSPORT");
  ASSERT_NE(transport, nullptr) << "PT_TEST_TRANSPORT (mpi | nccl_model) is not set";
  const char* check_env = std::getenv("PT_TEST_CHECK");
  const bool check = !check_env || std::string(check_env) != "0";
  Deck deck = small_deck(check);
  deck.pipeline.timeout_s = 2;  // the damaged message's peer waits this long, then gives up
  const Outcome out = train(deck, std::string(transport) == "nccl_model");
  if (kind == "nan") {
    // The rank whose stage computed the NaN names it, before sending it.
    if (world_rank() != faulty_rank) return;  // its peer times out waiting
    const std::string what = faulty_rank == 0
        ? "non-finite values in step 1: the activation that F of micro-batch 0 on stage 0 (rank 0) "
          "computed holds 1 inf/NaN of 144 elements; they first appear in the forward of stage 0 "
          "or in its input batch"
        : "non-finite values in step 1: the input gradient that B of micro-batch 0 on stage 1 "
          "(rank 1) computed holds 1 inf/NaN of 144 elements; its inputs were finite, so they "
          "first appear in the backward of stage 1";
    EXPECT_NE(out.error.find(what), std::string::npos) << out.error;
    return;
  }
  ASSERT_EQ(faulty_rank, 0) << "the damage is aimed at stage 0's first activation";
  if (world_rank() != 1) return;  // the sender times out waiting for the gradient
  for (const std::string& part : expected_message(kind, check))
    EXPECT_NE(out.error.find(part), std::string::npos) << "missing: " << part << "\ngot: " << out.error;
}

}  // namespace
}  // namespace pt
