// test_memory_check.cpp: the memory checks before a run builds anything
// (app/memory_check.hpp), given the memory on hand rather than reading it, so
// that the outcome does not depend on the machine: a stage too large for its
// GPU (or node) is refused on every rank with the same message naming the
// rank, its stage and the model's key; a model too large for the whole job is
// refused before that; room enough passes. On 2 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "error_of.hpp"
#include "mpi_test_util.hpp"
#include "test_decks.hpp"
#include "pipetrain/app/memory_check.hpp"
#include "pipetrain/model/model.hpp"

namespace pt {
namespace {

// The tiny MLP (8 units: 12 -> 24 x 7 -> 5, AdamW) on 2 stages of 6 and 2 units.
Deck lopsided_mlp() {
  Deck deck = pt_test::tiny_mlp(8);
  deck.source_file = "deck.toml";
  deck.key_origin["model.depth"] = "deck.toml:5";
  deck.pipeline.micro_batches = 2;
  deck.pipeline.partition_strategy = PartitionStrategy::Explicit;
  deck.pipeline.partition = {6, 2};
  return deck;
}

// The stages' persistent bytes, which the checks compare with.
std::vector<double> stage_bytes(const Deck& deck) {
  return stage_persistent_state_bytes(deck.model, deck.training.optimizer, deck.pipeline.partition);
}

MemoryOnHand gpu_with(double bytes) { return {true, false, bytes, "GPU memory free (test)"}; }

TEST(MemoryCheck, AStageTooLargeForItsGpuIsRefusedOnEveryRank) {
  ASSERT_EQ(test::world_size(), 2);
  const Deck deck = lopsided_mlp();
  const std::vector<double> bytes = stage_bytes(deck);
  ASSERT_GT(bytes[0], bytes[1]);
  const ProcessGrid grid(MPI_COMM_WORLD, 1);
  // Room for stage 1 but not stage 0: rank 0 (stage 0) is named, on both ranks.
  const double between = 0.5 * (bytes[0] + bytes[1]);
  const std::string message = test::error_of([&] { check_stages_fit(deck, deck.pipeline.partition, grid, gpu_with(between)); });
  EXPECT_NE(message.find("the model does not fit in memory: rank 0 (stage 0) needs at least"), std::string::npos)
      << message;
  EXPECT_NE(message.find("model.depth = 8 (deck.toml:5) over 2 stages"), std::string::npos) << message;
  EXPECT_NE(message.find("AdamW's two moments"), std::string::npos) << message;
  EXPECT_NE(message.find("GPU memory free (test)"), std::string::npos) << message;
  // Room for both: no error.
  EXPECT_EQ(test::error_of([&] { check_stages_fit(deck, deck.pipeline.partition, grid, gpu_with(bytes[0])); }), "");
}

TEST(MemoryCheck, TheNodesRanksShareItsMemory) {
  const Deck deck = lopsided_mlp();
  const std::vector<double> bytes = stage_bytes(deck);
  const ProcessGrid grid(MPI_COMM_WORLD, 1);
  // Both ranks of this test share one node: each stage fits alone, not both.
  const MemoryOnHand node{true, true, bytes[0] + 0.5 * bytes[1], "host memory (test)"};
  const std::string message = test::error_of([&] { check_stages_fit(deck, deck.pipeline.partition, grid, node); });
  EXPECT_NE(message.find("the 2 ranks on node "), std::string::npos) << message;
  EXPECT_NE(message.find("put fewer ranks on each node"), std::string::npos) << message;
  const MemoryOnHand roomy{true, true, bytes[0] + bytes[1], "host memory (test)"};
  EXPECT_EQ(test::error_of([&] { check_stages_fit(deck, deck.pipeline.partition, grid, roomy); }), "");
}

TEST(MemoryCheck, AModelTooLargeForTheJobIsRefusedBeforeThePartition) {
  const Deck deck = lopsided_mlp();
  const std::vector<double> bytes = stage_bytes(deck);
  const double model = bytes[0] + bytes[1];
  // Two GPUs of 0.4 x the model each hold 0.8 x of it.
  const std::string message = test::error_of([&] { check_model_fits_job(deck, 1, MPI_COMM_WORLD, gpu_with(0.4 * model)); });
  EXPECT_NE(message.find("the model does not fit in this job's memory: its 4.04e+03 parameters (model.depth = 8 "
                         "(deck.toml:5)) need at least"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the job's 2 GPUs have"), std::string::npos) << message;
  EXPECT_EQ(test::error_of([&] { check_model_fits_job(deck, 1, MPI_COMM_WORLD, gpu_with(0.5 * model)); }), "");
  // Two data-parallel replicas hold the model twice.
  const std::string twice = test::error_of([&] { check_model_fits_job(deck, 2, MPI_COMM_WORLD, gpu_with(0.5 * model)); });
  EXPECT_NE(twice.find("for its 2 data-parallel replicas"), std::string::npos) << twice;
  // Unknown memory on one rank: no check anywhere (the ranks agree).
  MemoryOnHand unknown = gpu_with(0.0);
  unknown.checked = test::world_rank() != 1;
  EXPECT_EQ(test::error_of([&] { check_model_fits_job(deck, 1, MPI_COMM_WORLD, unknown); }), "");
}

// validate's check of a balanced partition's budget: just below the least
// largest stage over every contiguous partition (found here by trying them
// all) it is refused with the key, just above it passes.
TEST(MemoryCheck, ABalancedBudgetBelowEveryPartitionsParametersIsRefused) {
  Deck deck = lopsided_mlp();
  deck.pipeline.partition_strategy = PartitionStrategy::Balanced;
  deck.pipeline.partition.clear();
  deck.key_origin["pipeline.memory_budget_mb"] = "deck.toml:9";
  double least = 1e300;
  for (int64_t first = 1; first < 8; ++first) {
    const std::vector<double> b = stage_persistent_state_bytes(deck.model, deck.training.optimizer, {first, 8 - first});
    least = std::min(least, std::max(b[0], b[1]));
  }
  deck.pipeline.memory_budget_mb = 0.999 * least / (1024.0 * 1024.0);
  const std::string message = test::error_of([&] { check_budget_holds_parameters(deck, 2); });
  EXPECT_NE(message.find("deck.toml:9: pipeline.memory_budget_mb = "), std::string::npos) << message;
  EXPECT_NE(message.find("that the largest of 2 stages holds for its parameters' fp32 values, gradients and "
                         "AdamW's two moments alone, whatever the partition"),
            std::string::npos)
      << message;
  deck.pipeline.memory_budget_mb = 1.001 * least / (1024.0 * 1024.0);
  EXPECT_EQ(test::error_of([&] { check_budget_holds_parameters(deck, 2); }), "");
}

}  // namespace
}  // namespace pt
