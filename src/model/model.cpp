// model.cpp: partitioning a model (MLP or GPT) into stages and building one stage.
#include "pipetrain/model/model.hpp"

#include <cmath>
#include <numeric>

#include "pipetrain/base/error.hpp"
#include "pipetrain/model/gpt.hpp"

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

int64_t model_units(const ModelConfig& model) {
  if (model.type == "mlp") return model.depth;
  if (model.type == "gpt") return model.blocks;
  PT_FAIL("unknown model type '" + model.type + "'");
}

int64_t tokens_per_sample(const ModelConfig& model) {
  return model.type == "gpt" ? model.seq_len : 1;
}

GptDims gpt_dims(const ModelConfig& m) {
  GptDims d;
  d.vocab_size = m.vocab_size;
  d.seq_len = m.seq_len;
  d.d_model = m.d_model;
  d.heads = m.heads;
  d.mlp_ratio = m.mlp_ratio;
  d.blocks = m.blocks;
  return d;
}

// Matmul FLOPs: 2 per multiply-add; training = 3 x forward (the backward
// computes two products per forward product).
double model_train_flops_per_sample(const ModelConfig& m) {
  double forward = 0.0;
  for (const CostUnitInfo& unit : cost_units(m)) forward += unit.forward_flops;
  return 3.0 * forward;
}

namespace {

// Width of the activation entering MLP unit u.
int64_t mlp_width_before(const ModelConfig& m, int64_t unit) {
  return unit == 0 ? m.input_dim : m.hidden_dim;
}

int64_t mlp_width_after(const ModelConfig& m, int64_t unit) {
  return unit == m.depth - 1 ? m.output_dim : m.hidden_dim;
}

// Forward matmul FLOPs per sample of one transformer block: per token the
// qkv, attention projection and MLP products, and the scores and weighted
// values over the full sequence.
double gpt_block_flops(const ModelConfig& m) {
  const double c = m.d_model, t = m.seq_len, r = m.mlp_ratio;
  const double per_token = 2.0 * c * 3.0 * c + 2.0 * t * c * 2.0 + 2.0 * c * c + 2.0 * 2.0 * c * r * c;
  return t * per_token;
}

}  // namespace

std::vector<CostUnitInfo> cost_units(const ModelConfig& m) {
  std::vector<CostUnitInfo> units;
  if (m.type == "mlp") {
    for (int64_t u = 0; u < m.depth; ++u)
      units.push_back({"linear" + std::to_string(u), true,
                       2.0 * static_cast<double>(mlp_width_before(m, u) * mlp_width_after(m, u))});
    return units;
  }
  units.push_back({"embedding", false, 0.0});  // a gather, no matmul
  for (int64_t b = 0; b < m.blocks; ++b) units.push_back({"block" + std::to_string(b), true, gpt_block_flops(m)});
  units.push_back({"head", false, 2.0 * static_cast<double>(m.seq_len * m.d_model * m.vocab_size)});
  return units;
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

// The layers of partition unit `u`, appended to the stage: MLP, its Linear
// and (but for the last unit) the activation; GPT, its block.
void add_unit_layers(const ModelConfig& model, StageModel& sm, int64_t u, ParamInit init) {
  if (model.type == "gpt") {
    sm.layers.push_back(make_gpt_block(gpt_dims(model), u, model.init_seed, init));
    sm.layer_unit.push_back(u);
    return;
  }
  const bool last_unit = (u == model.depth - 1);
  sm.layers.push_back(make_linear("unit" + std::to_string(u) + ".linear", mlp_width_before(model, u),
                                  mlp_width_after(model, u), model.init_seed,
                                  static_cast<uint64_t>(u), last_unit ? 1.f : std::sqrt(2.f), init));
  sm.layer_unit.push_back(u);
  if (!last_unit) {
    sm.layers.push_back(make_activation(model.activation));
    sm.layer_unit.push_back(u);
  }
}

void add_mlp_layers(const ModelConfig& model, StageModel& sm) {
  sm.sample_input_shape = {mlp_width_before(model, sm.first_unit)};
  for (int64_t u = sm.first_unit; u < sm.first_unit + sm.num_units; ++u)
    add_unit_layers(model, sm, u, ParamInit::FromSeed);
  if (sm.is_last()) {
    sm.loss = make_loss(model.loss);
    sm.loss_terms_per_sample = model.loss == "mse" ? model.output_dim : 1;
  }
}

// The blocks first_unit .. first_unit + num_units - 1, after the embedding
// and before the head when asked for.
void add_gpt_layers(const ModelConfig& model, StageModel& sm, bool embedding, bool head) {
  const GptDims dims = gpt_dims(model);
  if (embedding) {
    sm.sample_input_shape = {model.seq_len};
    sm.input_dtype = DType::I32;
    sm.layers.push_back(make_gpt_embedding(dims, model.init_seed));
    sm.layer_unit.push_back(-1);
  } else {
    sm.sample_input_shape = {model.seq_len, model.d_model};
  }
  for (int64_t u = sm.first_unit; u < sm.first_unit + sm.num_units; ++u)
    add_unit_layers(model, sm, u, ParamInit::FromSeed);
  if (head) {
    sm.layers.push_back(make_gpt_head(dims, model.init_seed));
    sm.layer_unit.push_back(-1);
    sm.loss = make_loss("cross_entropy");
    sm.loss_terms_per_sample = model.seq_len;
  }
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
  if (model.type == "mlp") add_mlp_layers(model, sm);
  else add_gpt_layers(model, sm, sm.is_first(), sm.is_last());
  return sm;
}

StageModel rebuild_stage(const ModelConfig& model, const std::vector<int64_t>& units_per_stage,
                         StageModel& old) {
  PT_CHECK(static_cast<int>(units_per_stage.size()) == old.num_stages,
           "a rebalancing move keeps the stage count");
  StageModel next;
  place_units(model, units_per_stage, old.stage, next);
  next.sample_input_shape = model.type == "mlp" ? Shape{mlp_width_before(model, next.first_unit)}
                                                : old.sample_input_shape;
  next.input_dtype = old.input_dtype;
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
    if (!held) add_unit_layers(model, next, u, ParamInit::Uninitialised);
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

StageModel build_cost_unit_stage(const ModelConfig& model, int64_t index) {
  const int64_t count = static_cast<int64_t>(cost_units(model).size());
  PT_CHECK(index >= 0 && index < count, "cost unit " + std::to_string(index) + " of " +
                                            std::to_string(count));
  StageModel sm;
  place_stage(sm, index == 0, index == count - 1);
  if (model.type == "mlp") {
    sm.first_unit = index;
    sm.num_units = 1;
    add_mlp_layers(model, sm);
    return sm;
  }
  // GPT: cost unit 0 is the embedding, 1..blocks the blocks, then the head.
  const bool embedding = index == 0, head = index == count - 1;
  sm.first_unit = embedding ? 0 : index - 1;
  sm.num_units = embedding || head ? 0 : 1;
  add_gpt_layers(model, sm, embedding, head);
  return sm;
}

void move_parameters(StageModel& stage, Device dev) {
  if (dev == Device::CPU) return;
  for (Param* p : stage.params()) {
    p->value = p->value.to(dev, MemCategory::Parameters);
    p->grad = p->grad.to(dev, MemCategory::Gradients);
  }
}

Tensor stage_forward(StageModel& stage, Backend& be, const Tensor& x, StagePass& pass) {
  const size_t n = stage.layers.size();
  pass.inputs.assign(n, Tensor());
  pass.saved.assign(n, {});
  Tensor h = x;
  for (size_t i = 0; i < n; ++i) {
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
