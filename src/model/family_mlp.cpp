// family_mlp.cpp: the "mlp" model family, a stack of Linear layers with an
// activation between them, trained on the synthetic teacher data. A
// partition unit is one Linear layer and (but for the last) its activation;
// nothing is pinned to the first or last stage.
#include <cmath>

#include "families.hpp"
#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

// Width of the activation entering MLP unit u, and leaving it.
int64_t width_before(const ModelConfig& m, int64_t unit) {
  return unit == 0 ? m.mlp.input_dim : m.mlp.hidden_dim;
}

int64_t width_after(const ModelConfig& m, int64_t unit) {
  return unit == m.mlp.depth - 1 ? m.mlp.output_dim : m.mlp.hidden_dim;
}

int64_t units(const ModelConfig& m) { return m.mlp.depth; }

int64_t tokens(const ModelConfig&) { return 1; }

StageInput stage_input(const ModelConfig& m, int64_t first_unit, bool) {
  return {Shape{width_before(m, first_unit)}, DType::F32};
}

void add_unit(const ModelConfig& m, StageModel& sm, int64_t u, ParamInit init) {
  const bool last_unit = (u == m.mlp.depth - 1);
  sm.layers.push_back(make_linear("unit" + std::to_string(u) + ".linear", width_before(m, u),
                                  width_after(m, u), m.init_seed, static_cast<uint64_t>(u),
                                  last_unit ? 1.f : std::sqrt(2.f), init));
  sm.layer_unit.push_back(u);
  if (!last_unit) {
    sm.layers.push_back(make_activation(m.activation));
    sm.layer_unit.push_back(u);
  }
}

void end_stage(const ModelConfig& m, StageModel& sm) {
  sm.loss = make_loss(m.mlp.loss);
  sm.loss_terms_per_sample = m.mlp.loss == LossKind::Mse ? m.mlp.output_dim : 1;
}

// Matmul FLOPs of each Linear layer's forward, 2 per multiply-add; its
// weight (out, in) and bias (out).
std::vector<CostUnitInfo> costs(const ModelConfig& m) {
  std::vector<CostUnitInfo> out;
  for (int64_t u = 0; u < m.mlp.depth; ++u) {
    const double in = static_cast<double>(width_before(m, u)), width = static_cast<double>(width_after(m, u));
    CostUnitInfo unit{"linear" + std::to_string(u), true, 2.0 * in * width};
    unit.parameters = (in + 1.0) * width;
    out.push_back(unit);
  }
  return out;
}

// The backward of a weight product is two products (dx, dW): W is half.
double weight_grad_share(const ModelConfig&) { return 0.5; }

std::string describe(const ModelConfig& m) {
  const MlpConfig& c = m.mlp;
  return " input_dim=" + std::to_string(c.input_dim) + " hidden_dim=" + std::to_string(c.hidden_dim) +
         " output_dim=" + std::to_string(c.output_dim) + " depth=" + std::to_string(c.depth) +
         " activation=" + kind_name(m.activation) + " loss=" + kind_name(c.loss);
}

void check(const Deck& deck) {
  const MlpConfig& m = deck.model.mlp;
  if (m.loss == LossKind::CrossEntropy && m.output_dim < 2)
    throw InputError(deck.where("model.loss") + " = \"cross_entropy\": needs at least 2 classes, but " +
                     deck.described("model.output_dim", std::to_string(m.output_dim)));
}

}  // namespace

ModelFamily mlp_family() {
  ModelFamily f;
  f.name = "mlp";
  f.summary = "Linear layers with an activation between them (synthetic teacher data or HDF5 image files)";
  f.keys = {"input_dim", "hidden_dim", "output_dim", "depth", "activation", "loss"};
  f.data_types = {DataKind::Synthetic, DataKind::ImageFiles};
  f.data_rule = "trains on data.type = \"synthetic\" or \"image_files\"";
  f.check = check;
  f.describe = describe;
  f.units_key = "depth";
  f.unit_name = "Linear layer";
  f.units = units;
  f.tokens_per_sample = tokens;
  f.stage_input = stage_input;
  f.add_unit = add_unit;
  f.end_stage = end_stage;
  f.cost_units = costs;
  f.weight_grad_share = weight_grad_share;
  return f;
}

}  // namespace pt
