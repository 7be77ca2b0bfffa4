// model.cpp: partitioning a model into stages and building one stage, the
// same for every model family (its layers come from the family, family.hpp).
#include "pipetrain/model/model.hpp"

#include <algorithm>
#include <numeric>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/family.hpp"

namespace pt {

std::vector<int64_t> partition_units(int64_t total_units, int num_stages,
                                     const std::vector<int64_t>& explicit_counts) {
  PT_CHECK(num_stages >= 1, "at least one stage");
  std::vector<int64_t> counts = explicit_counts;
  if (counts.empty()) {
    for (int s = 0; s < num_stages; ++s)
      counts.push_back(total_units / num_stages + (s < total_units % num_stages ? 1 : 0));
  }
  PT_CHECK(static_cast<int>(counts.size()) == num_stages,
           "partition has " + std::to_string(counts.size()) + " entries for " +
               std::to_string(num_stages) + " stages");
  for (int64_t c : counts) PT_CHECK(c >= 1, "every stage needs at least one unit");
  PT_CHECK(std::accumulate(counts.begin(), counts.end(), int64_t{0}) == total_units,
           "partition does not cover every unit exactly once");
  return counts;
}

int64_t model_units(const ModelConfig& model) { return model_family(model).units(model); }

int64_t tokens_per_sample(const ModelConfig& model) { return model_family(model).tokens_per_sample(model); }

std::vector<CostUnitInfo> cost_units(const ModelConfig& model) { return model_family(model).cost_units(model); }

double persistent_state_bytes(const CostUnitInfo& unit, OptimizerKind optimizer) {
  constexpr double kFloat = 4.0;
  const double state_tensors = optimizer == OptimizerKind::AdamW ? 2.0 : 1.0;
  return unit.parameters * 2.0 * kFloat + (unit.parameters - unit.statistics) * state_tensors * kFloat;
}

std::vector<double> stage_persistent_state_bytes(const ModelConfig& model, OptimizerKind optimizer,
                                                 const std::vector<int64_t>& units_per_stage) {
  const ModelFamily& family = model_family(model);
  const std::vector<CostUnitInfo> units = cost_units(model);
  const int64_t partitioned = std::accumulate(units_per_stage.begin(), units_per_stage.end(), int64_t{0});
  PT_CHECK(!units_per_stage.empty() &&
               family.pinned_front + partitioned + family.pinned_back == static_cast<int64_t>(units.size()),
           "a partition of " + std::to_string(partitioned) + " units for a model of " +
               std::to_string(family.units(model)));
  std::vector<double> bytes(units_per_stage.size(), 0.0);
  size_t unit = 0;
  for (size_t s = 0; s < units_per_stage.size(); ++s) {
    size_t end = unit + static_cast<size_t>(units_per_stage[s]);
    if (s == 0) end += static_cast<size_t>(family.pinned_front);
    if (s + 1 == units_per_stage.size()) end = units.size();  // with the pinned back units
    for (; unit < end; ++unit) bytes[s] += persistent_state_bytes(units[unit], optimizer);
  }
  return bytes;
}

double model_parameters(const ModelConfig& model) {
  double parameters = 0.0;
  for (const CostUnitInfo& unit : cost_units(model)) parameters += unit.parameters;
  return parameters;
}

// Matmul FLOPs: 2 per multiply-add; training = 3 x forward (the backward
// computes two products per forward product).
double model_train_flops_per_sample(const ModelConfig& m) {
  double forward = 0.0;
  for (const CostUnitInfo& unit : cost_units(m)) forward += unit.forward_flops;
  return 3.0 * forward;
}

double model_padding_flops_per_sample(const ModelConfig& m) {
  double padding = 0.0;
  for (const CostUnitInfo& unit : cost_units(m)) padding += unit.padding_flops;
  return 3.0 * padding;
}

Shape StageModel::input_shape(int64_t rows) const {
  Shape shape{rows};
  shape.insert(shape.end(), sample_input_shape.begin(), sample_input_shape.end());
  return shape;
}

Shape StageModel::output_shape(int64_t rows) const {
  Shape shape = input_shape(rows);
  for (const auto& layer : layers) shape = layer->output_shape(shape);
  return shape;
}

std::vector<Param*> StageModel::unit_params(int64_t unit) {
  std::vector<Param*> owned;
  for (size_t i = 0; i < layers.size(); ++i)
    if (layer_unit[i] == unit)
      for (Param* p : layers[i]->params()) owned.push_back(p);
  return owned;
}

std::vector<Param*> StageModel::params() {
  std::vector<Param*> all;
  for (auto& layer : layers)
    for (Param* p : layer->params()) all.push_back(p);
  return all;
}

namespace {

// The family's layers of the stage placed in `sm` (stage, first_unit,
// num_units): its input, the pinned layers before the units on the first
// stage, the units, the pinned layers and loss on the last.
void add_stage_layers(const ModelConfig& model, StageModel& sm) {
  const ModelFamily& family = model_family(model);
  const StageInput input = family.stage_input(model, sm.first_unit, sm.is_first());
  sm.sample_input_shape = input.sample_shape;
  sm.input_dtype = input.dtype;
  if (sm.is_first() && family.add_front) family.add_front(model, sm);
  for (int64_t u = sm.first_unit; u < sm.first_unit + sm.num_units; ++u)
    family.add_unit(model, sm, u, ParamInit::FromSeed);
  if (sm.is_last()) family.end_stage(model, sm);
}

}  // namespace

namespace {

// The stage's index, the stage count and the stage's units under the
// partition, checked against the model.
void place_units(const ModelConfig& model, const std::vector<int64_t>& units_per_stage, int stage,
                 StageModel& sm) {
  PT_CHECK(stage >= 0 && stage < static_cast<int>(units_per_stage.size()), "stage index");
  sm.stage = stage;
  sm.num_stages = static_cast<int>(units_per_stage.size());
  sm.first_unit = std::accumulate(units_per_stage.begin(), units_per_stage.begin() + stage,
                                  int64_t{0});
  sm.num_units = units_per_stage[stage];
  PT_CHECK(sm.first_unit + sm.num_units <= model_units(model), "stage units beyond the model");
  PT_CHECK(!sm.is_last() || sm.first_unit + sm.num_units == model_units(model),
           "the last stage must end at the last unit");
}

// Moves layer `i` of (layers, units) to the end of `to`.
void take_layer(std::vector<std::unique_ptr<Layer>>& layers, const std::vector<int64_t>& units,
                size_t i, StageModel& to) {
  to.layers.push_back(std::move(layers[i]));
  to.layer_unit.push_back(units[i]);
}

}  // namespace

StageModel build_stage(const ModelConfig& model, const std::vector<int64_t>& units_per_stage,
                       int stage) {
  StageModel sm;
  place_units(model, units_per_stage, stage, sm);
  add_stage_layers(model, sm);
  return sm;
}

namespace {

// Fresh storage on `dev` for parameters constructed with
// ParamInit::Uninitialised (on the host): values unset, gradients zero.
void reallocate_unset(const std::vector<Param*>& params, Device dev) {
  if (dev == Device::CPU) return;
  for (Param* p : params) {
    p->value = Tensor::empty(p->value.shape(), DType::F32, MemCategory::Parameters, dev);
    p->grad = Tensor::zeros(p->grad.shape(), DType::F32, MemCategory::Gradients, dev);
  }
}

}  // namespace

StageModel rebuild_stage(const ModelConfig& model, const std::vector<int64_t>& units_per_stage,
                         StageModel& old, Device dev) {
  PT_CHECK(static_cast<int>(units_per_stage.size()) == old.num_stages,
           "a rebalancing move keeps the stage count");
  const ModelFamily& family = model_family(model);
  StageModel next;
  place_units(model, units_per_stage, old.stage, next);
  const StageInput input = family.stage_input(model, next.first_unit, next.is_first());
  next.sample_input_shape = input.sample_shape;
  next.input_dtype = input.dtype;
  next.loss = std::move(old.loss);
  next.loss_terms_per_sample = old.loss_terms_per_sample;
  std::vector<std::unique_ptr<Layer>> layers = std::move(old.layers);
  const std::vector<int64_t> units = std::move(old.layer_unit);
  old.layers.clear();
  old.layer_unit.clear();
  size_t front = 0;  // pinned layers before the units (the GPT embedding)
  while (front < units.size() && units[front] < 0) take_layer(layers, units, front++, next);
  for (int64_t u = next.first_unit; u < next.first_unit + next.num_units; ++u) {
    const bool held = u >= old.first_unit && u < old.first_unit + old.num_units;
    if (!held) {
      family.add_unit(model, next, u, ParamInit::Uninitialised);
      reallocate_unset(next.unit_params(u), dev);
    }
    for (size_t i = front; held && i < units.size(); ++i)
      if (units[i] == u) take_layer(layers, units, i, next);
  }
  // What is left: pinned layers after the units (the GPT head) stay, in
  // order; the layers of units that leave go back to `old`.
  for (size_t i = front; i < units.size(); ++i)
    if (layers[i]) take_layer(layers, units, i, units[i] < 0 ? next : old);
  return next;
}

namespace {

// Stage 0 of 2 (first), 1 of 2 (last), 0 of 1 (both) or 1 of 3 (middle).
void place_stage(StageModel& sm, bool first, bool last) {
  sm.stage = first ? 0 : 1;
  sm.num_stages = first && last ? 1 : (first || last ? 2 : 3);
}

}  // namespace

// Cost unit `index` of pinned_front + units + pinned_back: a pinned front
// stage holds no unit, a unit's stage its unit, a pinned back stage none
// (first_unit past the last unit).
StageModel build_cost_unit_stage(const ModelConfig& model, int64_t index) {
  const ModelFamily& family = model_family(model);
  const int64_t count = static_cast<int64_t>(cost_units(model).size());
  PT_CHECK(index >= 0 && index < count, "cost unit " + std::to_string(index) + " of " +
                                            std::to_string(count));
  const int64_t unit = index - family.pinned_front, units = family.units(model);
  StageModel sm;
  place_stage(sm, index == 0, index == count - 1);
  sm.first_unit = std::clamp<int64_t>(unit, 0, units);
  sm.num_units = unit >= 0 && unit < units ? 1 : 0;
  add_stage_layers(model, sm);
  return sm;
}

void move_parameters(StageModel& stage, Device dev) {
  if (dev == Device::CPU) return;
  for (Param* p : stage.params()) {
    p->value = p->value.to(dev, MemCategory::Parameters);
    p->grad = p->grad.to(dev, MemCategory::Gradients);
    if (p->copy.defined()) p->copy = p->copy.to(dev, MemCategory::Parameters);  // still current
  }
}

Tensor stage_forward(StageModel& stage, Backend& be, const Tensor& x, StagePass& pass) {
  const size_t n = stage.layers.size();
  pass.inputs.assign(n, Tensor());
  pass.saved.assign(n, {});
  Tensor h = x;
  for (size_t i = 0; i < n; ++i) {
    h = stage.layers[i]->input_operand(be, h);  // with activation copies, maybe rounded
    Tensor y = stage.layers[i]->forward(be, h, pass.saved[i]);
    pass.inputs[i] = std::move(h);
    h = std::move(y);
  }
  return h;
}

Tensor stage_backward(StageModel& stage, Backend& be, StagePass& pass, Tensor dy, bool input_grad) {
  const size_t n = stage.layers.size();
  PT_CHECK(pass.inputs.size() == n, "stage_backward without a matching stage_forward");
  for (size_t i = n; i-- > 0;)
    dy = stage.layers[i]->backward(be, pass.inputs[i], pass.saved[i], dy, i > 0 || input_grad);
  pass.inputs.clear();
  pass.saved.clear();
  return dy;
}

}  // namespace pt
