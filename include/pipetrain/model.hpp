// model.hpp: the model as a sequence of partition units, and one stage's share.
//
// A model is a list of units; a unit is the smallest piece a partition may
// assign to a stage (for the MLP: one Linear layer and its activation). The
// partition gives each stage a contiguous run of units; every unit belongs to
// exactly one stage, and build_stage asserts it. Parameters are initialised
// from (init_seed, unit index), so a unit's weights are the same whatever the
// stage count.
#pragma once

#include <memory>
#include <vector>

#include "pipetrain/deck.hpp"
#include "pipetrain/layers.hpp"

namespace pt {

// Units per stage: `explicit_counts` when given (checked), else as uniform as
// possible with the remainder going to the earliest stages.
std::vector<int64_t> partition_units(int64_t total_units, int num_stages,
                                     const std::vector<int64_t>& explicit_counts);

int64_t model_units(const ModelConfig& model);

class StageModel {
 public:
  int stage = 0;
  int num_stages = 1;
  int64_t first_unit = 0;   // global index of this stage's first unit
  int64_t num_units = 0;
  std::vector<std::unique_ptr<Layer>> layers;  // in forward order
  std::unique_ptr<Loss> loss;                  // last stage only

  bool is_first() const { return stage == 0; }
  bool is_last() const { return stage == num_stages - 1; }
  // Input and output of one micro-batch of `rows` samples.
  Shape input_shape(int64_t rows) const { return {rows, input_width}; }
  Shape output_shape(int64_t rows) const;
  // This stage's parameters in global order.
  std::vector<Param*> params();

  int64_t input_width = 0;  // features entering the stage
};

StageModel build_stage(const ModelConfig& model, const std::vector<int64_t>& units_per_stage,
                       int stage);

}  // namespace pt
