// model.hpp: the model as a sequence of partition units, and one stage's share.
//
// A model is a list of units; a unit is the smallest piece a partition may
// assign to a stage (MLP: one Linear layer and its activation; GPT: one
// transformer block, with the embedding pinned to the first stage and the
// head and loss to the last). The partition gives each stage a contiguous run
// of units; every unit belongs to exactly one stage, and build_stage asserts
// it. Parameters are initialised from (init_seed, unit or parameter name), so
// a unit's weights are the same whatever the stage count.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/layers.hpp"

namespace pt {

// Units per stage: `explicit_counts` when given (checked), else as uniform as
// possible with the remainder going to the earliest stages.
std::vector<int64_t> partition_units(int64_t total_units, int num_stages,
                                     const std::vector<int64_t>& explicit_counts);

int64_t model_units(const ModelConfig& model);
// Training FLOPs (forward + backward = 3 x forward matmul FLOPs) per sample,
// and the tokens in one sample (1 for the MLP, seq_len for GPT).
// Useful work only: a padded vocabulary's extra columns are left out (they
// are model_padding_flops_per_sample, 3 x the forward's padding FLOPs).
double model_train_flops_per_sample(const ModelConfig& model);
double model_padding_flops_per_sample(const ModelConfig& model);
int64_t tokens_per_sample(const ModelConfig& model);

class StageModel {
 public:
  int stage = 0;
  int num_stages = 1;
  int64_t first_unit = 0;   // global index of this stage's first unit
  int64_t num_units = 0;
  std::vector<std::unique_ptr<Layer>> layers;  // in forward order
  std::vector<int64_t> layer_unit;  // (layers) the partition unit of each; -1: pinned (GPT embedding, head)
  std::unique_ptr<Loss> loss;                  // last stage only
  Shape sample_input_shape;                    // input of one sample, e.g. (T, C)
  DType input_dtype = DType::F32;              // I32 token ids on the GPT's first stage
  int64_t loss_terms_per_sample = 1;           // MSE: outputs; GPT: T; class CE: 1

  bool is_first() const { return stage == 0; }
  bool is_last() const { return stage == num_stages - 1; }
  // Input and output of one micro-batch of `rows` samples.
  Shape input_shape(int64_t rows) const;
  Shape output_shape(int64_t rows) const;
  // This stage's parameters in global order.
  std::vector<Param*> params();
  // The parameters of partition unit `unit` (global index), in global order;
  // empty when this stage does not hold it.
  std::vector<Param*> unit_params(int64_t unit);
};

StageModel build_stage(const ModelConfig& model, const std::vector<int64_t>& units_per_stage,
                       int stage);
// For a rebalancing move: stage `old.stage` of the partition `units_per_stage`
// (as many stages as before), made from `old`, the same stage under the
// previous partition. The layers of units both hold, the pinned embedding
// and head and the loss are taken over as they are (the same objects: values,
// gradients and optimizer state untouched, no copy); the layers of arriving
// units are constructed with ParamInit::Uninitialised (nothing drawn) and
// their parameters placed on `dev`, for the caller to fill. `old` is left holding only
// the layers of the units that leave it (its unit_params still name them).
StageModel rebuild_stage(const ModelConfig& model, const std::vector<int64_t>& units_per_stage,
                         StageModel& old, Device dev);

// The units of a cost profile (plan/cost.hpp), in forward order: the
// partition units, and for the GPT also the embedding before them and the
// head (final LayerNorm + LM head + loss) after them, which are pinned to the
// first and last stage (partitionable = false).
// forward_flops is the model's useful work, what MFU counts; padding_flops
// is the work the kernels do on top of it that the model does not need (a
// GPT's LM head over its padded vocabulary columns, model.vocab_multiple),
// which takes time all the same: time is shared out by their sum.
struct CostUnitInfo {
  std::string name;            // "linear3" | "embedding" | "block2" | "head"
  bool partitionable = true;
  double forward_flops = 0.0;  // matmul FLOPs of the forward, per sample
  double padding_flops = 0.0;  // matmul FLOPs of the forward's padding, per sample
  // Elements of the unit's parameters as its layers store them (padded
  // vocabulary rows included), counted from the widths without building
  // anything; `statistics` of them are running statistics (batch
  // normalisation's), which get no optimizer state.
  double parameters = 0.0;
  double statistics = 0.0;
  double computed_flops() const { return forward_flops + padding_flops; }
};
std::vector<CostUnitInfo> cost_units(const ModelConfig& model);
// The bytes a unit holds from start to end of a run whatever the micro-batch
// size: every parameter's fp32 value and gradient (new_param) and the
// optimizer's fp32 state (one tensor for SGD, two for AdamW; not for running
// statistics). Low-precision weight copies, activations, workspaces and
// messages come on top, so a stage needs at least the sum over its units.
double persistent_state_bytes(const CostUnitInfo& unit, OptimizerKind optimizer);
// The sum of persistent_state_bytes over each stage's cost units, for the
// stages of `units_per_stage` (partition units; the family's pinned units go
// to the first and last stage), and the parameters of the whole model.
std::vector<double> stage_persistent_state_bytes(const ModelConfig& model, OptimizerKind optimizer,
                                                 const std::vector<int64_t>& units_per_stage);
double model_parameters(const ModelConfig& model);
// A stage holding cost unit `index` alone, placed as the unit sits in any
// pipeline: first (input from the data) when nothing precedes it, last (with
// the loss) when nothing follows it, a middle stage otherwise.
StageModel build_cost_unit_stage(const ModelConfig& model, int64_t index);
// Moves the stage's parameters and gradients to `dev` (built on the host),
// with their weight copies, if any (model/weight_copies.hpp).
void move_parameters(StageModel& stage, Device dev);

// One micro-batch through a stage outside the executor (benchmarks and
// tests): stage_forward keeps what each layer's backward needs in `pass`,
// stage_backward consumes it and returns the gradient of the stage input
// (undefined when `input_grad` is false, e.g. on the token embedding).
struct StagePass {
  std::vector<Tensor> inputs;              // per layer: its input
  std::vector<std::vector<Tensor>> saved;  // per layer: its saved tensors
};
Tensor stage_forward(StageModel& stage, Backend& be, const Tensor& x, StagePass& pass);
Tensor stage_backward(StageModel& stage, Backend& be, StagePass& pass, Tensor dy, bool input_grad);

}  // namespace pt
