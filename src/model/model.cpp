// model.cpp: partitioning the MLP into stages and building one stage.
#include "pipetrain/model.hpp"

#include <cmath>
#include <numeric>

#include "pipetrain/error.hpp"

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
  PT_CHECK(model.type == "mlp", "unknown model type '" + model.type + "'");
  return model.depth;
}

Shape StageModel::output_shape(int64_t rows) const {
  Shape shape = input_shape(rows);
  for (const auto& layer : layers) shape = layer->output_shape(shape);
  return shape;
}

std::vector<Param*> StageModel::params() {
  std::vector<Param*> all;
  for (auto& layer : layers)
    for (Param* p : layer->params()) all.push_back(p);
  return all;
}

namespace {
// Width of the activation entering MLP unit u.
int64_t mlp_width_before(const ModelConfig& m, int64_t unit) {
  return unit == 0 ? m.input_dim : m.hidden_dim;
}
}  // namespace

StageModel build_stage(const ModelConfig& model, const std::vector<int64_t>& units_per_stage,
                       int stage) {
  const int64_t total = model_units(model);
  PT_CHECK(stage >= 0 && stage < static_cast<int>(units_per_stage.size()), "stage index");
  StageModel sm;
  sm.stage = stage;
  sm.num_stages = static_cast<int>(units_per_stage.size());
  sm.first_unit = std::accumulate(units_per_stage.begin(), units_per_stage.begin() + stage,
                                  int64_t{0});
  sm.num_units = units_per_stage[stage];
  PT_CHECK(sm.first_unit + sm.num_units <= total, "stage units beyond the model");
  PT_CHECK(!sm.is_last() || sm.first_unit + sm.num_units == total,
           "the last stage must end at the last unit");
  sm.input_width = mlp_width_before(model, sm.first_unit);
  for (int64_t u = sm.first_unit; u < sm.first_unit + sm.num_units; ++u) {
    const bool last_unit = (u == total - 1);
    const int64_t in = mlp_width_before(model, u);
    const int64_t out = last_unit ? model.output_dim : model.hidden_dim;
    sm.layers.push_back(make_linear("unit" + std::to_string(u) + ".linear", in, out,
                                    model.init_seed, static_cast<uint64_t>(u),
                                    last_unit ? 1.f : std::sqrt(2.f)));
    if (!last_unit) sm.layers.push_back(make_activation(model.activation));
  }
  if (sm.is_last()) sm.loss = make_loss(model.loss);
  return sm;
}

}  // namespace pt
