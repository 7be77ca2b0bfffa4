// family.hpp: model families as a registry.
//
// A model family (model.type: "mlp", "gpt", ...) is one ModelFamily value:
// what the deck may set for it, how its partition units are counted and
// built into a stage, its cost units and planner costs, and the traits the
// profiler and the planner ask about. Every layer above asks the registry
// (model_family) instead of comparing model.type with a name, so a new
// family is its own file(s) plus one register_model_family call: the
// built-in families are listed in family.cpp, a test may register its own.
//
// Parameter names belong to the layers a family's add_unit / add_front /
// end_stage make (e.g. "unit3.linear.weight", "block2.attn.qkv.weight"),
// and the unit names to its cost_units ("linear3", "block2"): both are made
// in the family's own file and nowhere else. A family whose layers need
// kernels beyond the core ones asks the backend for their group
// (check_backend); only the backends that provide it implement it.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/gpt.hpp"
#include "pipetrain/model/model.hpp"

namespace pt {

// What enters a stage of the family: one sample's shape and element type.
struct StageInput {
  Shape sample_shape;
  DType dtype = DType::F32;
};

struct ModelFamily {
  // ---- identity and deck keys ----
  std::string name;                     // the value of model.type
  std::string summary;                  // one line for listings
  std::vector<std::string> keys;        // [model] keys it reads (type and init_seed are everyone's)
  // Keys of `keys` whose default differs in this family: {key, value as the
  // deck would write it without quotes}, e.g. {"activation", "relu"} for the
  // cnn (whose blocks are ResNet's) where the key's own default is gelu. A
  // deck that leaves the key out gets this value; the resolved deck shows it.
  std::vector<std::pair<std::string, std::string>> key_defaults;
  std::vector<DataKind> data_types;     // data.type values it trains on
  std::string data_rule;                // e.g. "trains on data.type = \"synthetic\""
  // Cross-key checks of its keys (throw InputError); nullptr = none.
  void (*check)(const Deck& deck) = nullptr;
  // Throws InputError when `be` lacks a kernel group (backend.hpp) that the
  // family's layers, as `model` configures them, compute with, naming the
  // family (or the key) and the backend (gpt: the transformer kernels, and
  // with model.attention = "fused" the fused attention kernels); nullptr =
  // the core kernels suffice.
  void (*check_backend)(const ModelConfig& model, Backend& be) = nullptr;
  // " key=value" of every key, for profile files (which must match a deck).
  std::string (*describe)(const ModelConfig& model) = nullptr;

  // ---- partition units ----
  std::string units_key;                // the [model] key counting them, e.g. "depth"
  std::string unit_name;                // e.g. "Linear layer"
  int64_t (*units)(const ModelConfig& model) = nullptr;
  int64_t (*tokens_per_sample)(const ModelConfig& model) = nullptr;

  // ---- building a stage: add_front, add_unit per unit, end_stage ----
  // The input of a stage whose first unit is `first_unit` (first: the
  // pipeline's first stage).
  StageInput (*stage_input)(const ModelConfig& model, int64_t first_unit, bool first) = nullptr;
  // The layers pinned before the units on the first stage (e.g. an
  // embedding; layer_unit -1); nullptr = none.
  void (*add_front)(const ModelConfig& model, StageModel& stage) = nullptr;
  // The layers of partition unit `unit` (layer_unit = unit), appended.
  void (*add_unit)(const ModelConfig& model, StageModel& stage, int64_t unit, ParamInit init) = nullptr;
  // On the last stage: pinned layers after the units (layer_unit -1), the
  // loss and loss_terms_per_sample.
  void (*end_stage)(const ModelConfig& model, StageModel& stage) = nullptr;

  // ---- costs: profiling and planning ----
  // Cost units in forward order: add_front's (pinned_front of them), the
  // partition units, end_stage's (pinned_back) when it adds layers.
  std::vector<CostUnitInfo> (*cost_units)(const ModelConfig& model) = nullptr;
  int pinned_front = 0;
  int pinned_back = 0;
  // Whether selective recomputation drops something in this family's
  // layers as the model configures them (the GPT's attention probabilities,
  // which fused attention does not keep); nullptr or false: "selective" is
  // the same as "none".
  bool (*selective_drops)(const ModelConfig& model) = nullptr;
  // W's share of a backward without recompute (zero-bubble schedules).
  double (*weight_grad_share)(const ModelConfig& model) = nullptr;
  // The transformer dimensions of the analytic cost model (plan --device);
  // nullptr = the family has none and is planned by measuring.
  GptDims (*analytic_dims)(const ModelConfig& model) = nullptr;

  bool uses_key(const std::string& key) const;
  bool trains_on(DataKind data_type) const;
};

// The family of model.type; InputError naming the families when there is
// none of that name.
const ModelFamily& model_family(const ModelConfig& model);
// The family's selective_drops for `model` (false without the hook).
bool selective_recompute_drops(const ModelConfig& model);
// Before a run computes on `be`: the family's check_backend, once.
void check_family_backend(const ModelConfig& model, Backend& be);
// nullptr when no family has that name.
const ModelFamily* find_model_family(const std::string& name);
// The registered families' names, built-in first, in registration order.
std::vector<std::string> model_family_names();
// Adds a family; InputError when its name is taken, PT_CHECK when a hook
// it must have is missing. Families stay registered until the process ends.
void register_model_family(const ModelFamily& family);

}  // namespace pt
