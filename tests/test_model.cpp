// test_model.cpp: partitioning, stage building and the learning-rate schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"

namespace pt {
namespace {

TEST(Partition, UniformGivesRemainderToEarlyStages) {
  EXPECT_EQ(partition_units(16, 4, {}), (std::vector<int64_t>{4, 4, 4, 4}));
  EXPECT_EQ(partition_units(10, 4, {}), (std::vector<int64_t>{3, 3, 2, 2}));
  EXPECT_EQ(partition_units(5, 1, {}), (std::vector<int64_t>{5}));
}

TEST(Partition, ExplicitCountsAreKeptAndChecked) {
  EXPECT_EQ(partition_units(10, 3, {2, 3, 5}), (std::vector<int64_t>{2, 3, 5}));
  EXPECT_THROW(partition_units(10, 3, {2, 3, 4}), Error);     // misses a unit
  EXPECT_THROW(partition_units(10, 3, {0, 5, 5}), Error);     // empty stage
  EXPECT_THROW(partition_units(10, 2, {2, 3, 5}), Error);     // wrong stage count
}

TEST(Partition, EveryUnitBelongsToExactlyOneStage) {
  ModelConfig m;
  m.depth = 7;
  const auto counts = partition_units(m.depth, 3, {});
  int64_t next = 0;
  size_t linear_layers = 0;
  for (int s = 0; s < 3; ++s) {
    StageModel stage = build_stage(m, counts, s);
    EXPECT_EQ(stage.first_unit, next);
    next += stage.num_units;
    for (auto& layer : stage.layers) linear_layers += layer->kind() == "linear";
    EXPECT_EQ(stage.loss != nullptr, s == 2);
  }
  EXPECT_EQ(next, m.depth);
  EXPECT_EQ(linear_layers, static_cast<size_t>(m.depth));
}

TEST(Partition, WeightsDoNotDependOnThePartition) {
  ModelConfig m;
  m.depth = 4;
  StageModel whole = build_stage(m, {4}, 0);
  StageModel second_half = build_stage(m, {2, 2}, 1);
  Param* a = whole.params()[4];  // unit 2's weight
  Param* b = second_half.params()[0];
  ASSERT_EQ(a->name, b->name);
  ASSERT_EQ(a->value.numel(), b->value.numel());
  EXPECT_EQ(0, std::memcmp(a->value.raw(), b->value.raw(), a->value.bytes()));
}

TEST(LearningRate, WarmupThenCosineToMinimum) {
  TrainingConfig cfg;
  cfg.steps = 11;
  cfg.lr = 1.0;
  cfg.min_lr = 0.1;
  cfg.warmup_steps = 2;
  cfg.lr_schedule = "cosine";
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 0), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 2), 1.0);    // start of the decay
  EXPECT_NEAR(learning_rate(cfg, 10), 0.1, 1e-12);  // last step reaches min_lr
  EXPECT_NEAR(learning_rate(cfg, 6), 0.55, 1e-12);  // halfway: the mean
  cfg.lr_schedule = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 7), 1.0);
}

}  // namespace
}  // namespace pt
