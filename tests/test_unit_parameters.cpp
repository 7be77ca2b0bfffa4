// test_unit_parameters.cpp: the parameter counts every family's cost units
// carry (CostUnitInfo::parameters, ::statistics; counted from the widths,
// for the memory check before anything is built) against the parameters of
// the unit's layers, built: every built-in family, with padded vocabularies,
// width changes, downsampling, projection skips and both normalisations.
// Then persistent_state_bytes against the tensors a built unit and its
// optimizer actually allocate.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipetrain/model/family.hpp"
#include "pipetrain/model/model.hpp"
#include "pipetrain/model/optimizer.hpp"

namespace pt {
namespace {

struct BuiltCount {
  double parameters = 0.0;
  double statistics = 0.0;
  double allocated_bytes = 0.0;  // values, gradients and optimizer state
};

// The bytes of the stage's values, gradients and the state an optimizer
// allocates for them.
double allocated_bytes(StageModel& stage, OptimizerKind optimizer) {
  TrainingConfig training;
  training.optimizer = optimizer;
  Optimizer state(training, stage.params());  // allocates the state it keeps
  double bytes = 0.0;
  for (Param* p : stage.params())
    for (const Tensor* t : {&p->value, &p->grad, &p->state1, &p->state2})
      if (t->defined()) bytes += static_cast<double>(t->bytes());
  return bytes;
}

BuiltCount count_built(const ModelConfig& model, int64_t index, OptimizerKind optimizer) {
  StageModel stage = build_cost_unit_stage(model, index);
  BuiltCount c;
  for (Param* p : stage.params()) {
    const double n = static_cast<double>(p->value.numel());
    c.parameters += n;
    if (p->running_statistic) c.statistics += n;
  }
  c.allocated_bytes = allocated_bytes(stage, optimizer);
  return c;
}

// Every cost unit of `model`: counted == built, and the state bytes are
// what was allocated, under both optimizers.
void expect_counts_match(const ModelConfig& model, const std::string& what) {
  const std::vector<CostUnitInfo> units = cost_units(model);
  double total = 0.0;
  for (size_t i = 0; i < units.size(); ++i) {
    for (OptimizerKind optimizer : {OptimizerKind::Sgd, OptimizerKind::AdamW}) {
      const BuiltCount built = count_built(model, static_cast<int64_t>(i), optimizer);
      EXPECT_EQ(units[i].parameters, built.parameters) << what << ", unit " << units[i].name;
      EXPECT_EQ(units[i].statistics, built.statistics) << what << ", unit " << units[i].name;
      EXPECT_EQ(persistent_state_bytes(units[i], optimizer), built.allocated_bytes)
          << what << ", unit " << units[i].name << ", " << kind_name(optimizer);
    }
    total += units[i].parameters;
  }
  EXPECT_GT(total, 0.0) << what;
}

TEST(UnitParameters, Mlp) {
  ModelConfig m;
  m.mlp.input_dim = 7;
  m.mlp.hidden_dim = 11;
  m.mlp.output_dim = 3;
  m.mlp.depth = 4;
  expect_counts_match(m, "mlp 7 -> 11 -> 3");
  m.mlp.depth = 1;  // one layer: input to output
  expect_counts_match(m, "mlp of one layer");
}

TEST(UnitParameters, GptWithAndWithoutPaddedVocabulary) {
  ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = 21;
  m.gpt.seq_len = 6;
  m.gpt.d_model = 12;
  m.gpt.heads = 3;
  m.gpt.blocks = 2;
  m.gpt.mlp_ratio = 3;
  expect_counts_match(m, "gpt V = 21");
  m.gpt.vocab_multiple = 8;  // 24 rows stored
  expect_counts_match(m, "gpt V = 21 padded to 24");
}

ModelConfig small_cnn(NormKind norm) {
  ModelConfig m;
  m.type = "cnn";
  m.cnn.image_size = 8;
  m.cnn.in_channels = 2;
  m.cnn.classes = 5;
  m.cnn.width = 4;
  m.cnn.stages = 3;  // widths 4, 8, 16: two downsampling blocks with projections
  m.cnn.stage_blocks = 2;
  m.cnn.norm_groups = 2;
  m.cnn.norm = norm;
  return m;
}

TEST(UnitParameters, CnnUnderGroupAndBatchNormalisation) {
  expect_counts_match(small_cnn(NormKind::Group), "cnn, group normalisation");
  expect_counts_match(small_cnn(NormKind::Batch), "cnn, batch normalisation");
  const std::vector<CostUnitInfo> units = cost_units(small_cnn(NormKind::Batch));
  EXPECT_GT(units.front().statistics, 0.0) << "the stem's batch normalisation keeps running statistics";
}

TEST(UnitParameters, Hybrid) {
  ModelConfig m = small_cnn(NormKind::Group);
  m.type = "hybrid";
  m.cnn.stages = 2;
  m.gpt.d_model = 12;
  m.gpt.heads = 2;
  m.gpt.blocks = 2;
  m.gpt.mlp_ratio = 2;
  expect_counts_match(m, "hybrid");
}

// A stage's figure is its units' with the pinned ones on the end stages: the
// bytes the built stages and their optimizers allocate.
TEST(UnitParameters, StagesOfAPartition) {
  ModelConfig m;
  m.type = "gpt";
  m.gpt.vocab_size = 19;
  m.gpt.seq_len = 4;
  m.gpt.d_model = 8;
  m.gpt.heads = 2;
  m.gpt.blocks = 5;
  m.gpt.mlp_ratio = 2;
  const std::vector<int64_t> counts = {1, 3, 1};
  const std::vector<double> figures = stage_persistent_state_bytes(m, OptimizerKind::AdamW, counts);
  ASSERT_EQ(figures.size(), counts.size());
  for (int s = 0; s < 3; ++s) {
    StageModel stage = build_stage(m, counts, s);
    EXPECT_EQ(figures[static_cast<size_t>(s)], allocated_bytes(stage, OptimizerKind::AdamW)) << "stage " << s;
  }
  double all = 0.0;
  for (const CostUnitInfo& u : cost_units(m)) all += u.parameters;
  EXPECT_EQ(model_parameters(m), all);
}

}  // namespace
}  // namespace pt
