// test_model.cpp: partitioning, stage building (and rebuilding for a
// rebalancing move) and the learning-rate schedule.
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
  m.mlp.depth = 7;
  const auto counts = partition_units(m.mlp.depth, 3, {});
  int64_t next = 0;
  size_t linear_layers = 0;
  for (int s = 0; s < 3; ++s) {
    StageModel stage = build_stage(m, counts, s);
    EXPECT_EQ(stage.first_unit, next);
    next += stage.num_units;
    for (auto& layer : stage.layers) linear_layers += layer->kind() == "linear";
    EXPECT_EQ(stage.loss != nullptr, s == 2);
  }
  EXPECT_EQ(next, m.mlp.depth);
  EXPECT_EQ(linear_layers, static_cast<size_t>(m.mlp.depth));
}

TEST(Partition, WeightsDoNotDependOnThePartition) {
  ModelConfig m;
  m.mlp.depth = 4;
  StageModel whole = build_stage(m, {4}, 0);
  StageModel second_half = build_stage(m, {2, 2}, 1);
  Param* a = whole.params()[4];  // unit 2's weight
  Param* b = second_half.params()[0];
  ASSERT_EQ(a->name, b->name);
  ASSERT_EQ(a->value.numel(), b->value.numel());
  EXPECT_EQ(0, std::memcmp(a->value.raw(), b->value.raw(), a->value.bytes()));
}

std::vector<const Layer*> layer_objects(const StageModel& stage) {
  std::vector<const Layer*> layers;
  for (const auto& layer : stage.layers) layers.push_back(layer.get());
  return layers;
}

std::vector<int64_t> units_of_layers(const StageModel& stage, size_t from, size_t to) {
  return {stage.layer_unit.begin() + static_cast<std::ptrdiff_t>(from),
          stage.layer_unit.begin() + static_cast<std::ptrdiff_t>(to)};
}

// Building a stage draws every weight and sets every bias (the counters
// count), so the zeros of a rebuild below are not vacuous.
TEST(RebuildStage, BuildingCountsEveryInitialValue) {
  ModelConfig m;
  m.mlp.depth = 4;
  const LayerBuildCounts start = layer_build_counts();
  StageModel stage = build_stage(m, {4}, 0);
  const LayerBuildCounts built = layer_build_counts();
  int64_t weights = 0, biases = 0;
  for (Param* p : stage.params()) (p->value.ndim() == 2 ? weights : biases) += p->value.numel();
  EXPECT_EQ(built.layers - start.layers, static_cast<int64_t>(stage.layers.size()));
  EXPECT_EQ(built.random_elements - start.random_elements, weights);
  EXPECT_EQ(built.constant_elements - start.constant_elements, biases);
}

// MLP of 8 units, [4, 4] -> [6, 2]: stage 0 keeps its 4 units' layers (the
// same objects) and constructs units 4 and 5 (Linear + activation each)
// without initial values; stage 1 keeps units 6 and 7 and the loss, and is
// left units 4 and 5 to send.
TEST(RebuildStage, MlpKeepsStayingLayersAndBuildsOnlyArrivingOnes) {
  ModelConfig m;
  m.mlp.depth = 8;
  StageModel first = build_stage(m, {4, 4}, 0), last = build_stage(m, {4, 4}, 1);
  const std::vector<const Layer*> first_layers = layer_objects(first), last_layers = layer_objects(last);
  const LayerBuildCounts start = layer_build_counts();
  StageModel first_next = rebuild_stage(m, {6, 2}, first, Device::CPU);
  StageModel last_next = rebuild_stage(m, {6, 2}, last, Device::CPU);
  const LayerBuildCounts built = layer_build_counts();
  EXPECT_EQ(built.layers - start.layers, 4);
  EXPECT_EQ(built.random_elements - start.random_elements, 0);
  EXPECT_EQ(built.constant_elements - start.constant_elements, 0);

  EXPECT_EQ(first_next.num_units, 6);
  ASSERT_EQ(first_next.layers.size(), 12u);
  const std::vector<const Layer*> first_now = layer_objects(first_next);
  EXPECT_EQ(std::vector<const Layer*>(first_now.begin(), first_now.begin() + 8), first_layers);
  EXPECT_EQ(units_of_layers(first_next, 8, 12), (std::vector<int64_t>{4, 4, 5, 5}));
  EXPECT_EQ(first_next.unit_params(5)[0]->name, "unit5.linear.weight");
  EXPECT_TRUE(first_next.unit_params(5)[0]->zero_by_overwrite);
  EXPECT_TRUE(first.layers.empty());  // nothing leaves stage 0
  EXPECT_EQ(first_next.output_shape(3), (Shape{3, m.mlp.hidden_dim}));

  EXPECT_EQ(last_next.first_unit, 6);
  EXPECT_EQ(layer_objects(last_next), std::vector<const Layer*>(last_layers.begin() + 4, last_layers.end()));
  EXPECT_NE(last_next.loss, nullptr);
  EXPECT_EQ(last_next.sample_input_shape, (Shape{m.mlp.hidden_dim}));
  EXPECT_EQ(last.layer_unit, (std::vector<int64_t>{4, 4, 5, 5}));  // left to send
  EXPECT_EQ(layer_objects(last), std::vector<const Layer*>(last_layers.begin(), last_layers.begin() + 4));
  EXPECT_EQ(last.unit_params(4).size(), 2u);
}

// GPT of 4 blocks, [2, 2] -> [3, 1]: the first stage keeps the embedding in
// front and constructs block 2 alone; the last keeps block 3 and the head
// behind it and leaves block 2 to send.
TEST(RebuildStage, GptKeepsThePinnedLayersInPlace) {
  ModelConfig m;
  m.type = "gpt";
  m.mlp.loss = LossKind::CrossEntropy;
  m.gpt.vocab_size = 16;
  m.gpt.seq_len = 8;
  m.gpt.d_model = 16;
  m.gpt.heads = 2;
  m.gpt.blocks = 4;
  StageModel first = build_stage(m, {2, 2}, 0), last = build_stage(m, {2, 2}, 1);
  const std::vector<const Layer*> first_layers = layer_objects(first), last_layers = layer_objects(last);
  const LayerBuildCounts start = layer_build_counts();
  StageModel first_next = rebuild_stage(m, {3, 1}, first, Device::CPU);
  StageModel last_next = rebuild_stage(m, {3, 1}, last, Device::CPU);
  const LayerBuildCounts built = layer_build_counts();
  EXPECT_EQ(built.layers - start.layers, 1);
  EXPECT_EQ(built.random_elements - start.random_elements, 0);
  EXPECT_EQ(built.constant_elements - start.constant_elements, 0);

  EXPECT_EQ(first_next.layer_unit, (std::vector<int64_t>{-1, 0, 1, 2}));
  const std::vector<const Layer*> first_now = layer_objects(first_next);
  EXPECT_EQ(std::vector<const Layer*>(first_now.begin(), first_now.begin() + 3), first_layers);
  EXPECT_EQ(first_next.unit_params(2).front()->name, "block2.ln1.weight");
  EXPECT_EQ(first_next.input_dtype, DType::I32);
  EXPECT_EQ(first_next.output_shape(2), (Shape{2, m.gpt.seq_len, m.gpt.d_model}));

  EXPECT_EQ(last_next.layer_unit, (std::vector<int64_t>{3, -1}));
  EXPECT_EQ(layer_objects(last_next), std::vector<const Layer*>(last_layers.begin() + 1, last_layers.end()));
  EXPECT_NE(last_next.loss, nullptr);
  EXPECT_EQ(last.layer_unit, (std::vector<int64_t>{2}));
  EXPECT_EQ(layer_objects(last).front(), last_layers.front());
}

TEST(LearningRate, WarmupThenCosineToMinimum) {
  TrainingConfig cfg;
  cfg.steps = 11;
  cfg.lr = 1.0;
  cfg.min_lr = 0.1;
  cfg.warmup_steps = 2;
  cfg.lr_schedule = LrScheduleKind::Cosine;
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 0), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 1), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 2), 1.0);    // start of the decay
  EXPECT_NEAR(learning_rate(cfg, 10), 0.1, 1e-12);  // last step reaches min_lr
  EXPECT_NEAR(learning_rate(cfg, 6), 0.55, 1e-12);  // halfway: the mean
  cfg.lr_schedule = LrScheduleKind::Constant;
  EXPECT_DOUBLE_EQ(learning_rate(cfg, 7), 1.0);
}

}  // namespace
}  // namespace pt
