// family.cpp: the registry of model families. The built-in families are
// listed here once.
#include "pipetrain/model/family.hpp"

#include <algorithm>
#include <deque>

#include "families.hpp"
#include "pipetrain/base/error.hpp"

namespace pt {

namespace {

// A deque: registering a family never moves the ones handed out before.
std::deque<ModelFamily>& registry() {
  static std::deque<ModelFamily> families{mlp_family(), gpt_family(), cnn_family(),
                                                hybrid_family()};
  return families;
}

std::string quoted_names() {
  std::string text;
  for (const std::string& name : model_family_names()) text += (text.empty() ? "\"" : ", \"") + name + "\"";
  return text;
}

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

// The hooks every family must have (add_front and check are optional).
void check_complete(const ModelFamily& f) {
  const bool complete = f.describe && f.units && f.tokens_per_sample && f.stage_input && f.add_unit &&
                        f.end_stage && f.cost_units && f.weight_grad_share;
  PT_CHECK(!f.name.empty() && complete, "model family '" + f.name + "' lacks its name or a hook");
  PT_CHECK(contains(f.keys, f.units_key), "model family '" + f.name + "': units_key is not one of its keys");
}

}  // namespace

bool ModelFamily::uses_key(const std::string& key) const { return contains(keys, key); }

bool ModelFamily::trains_on(DataKind data_type) const {
  return std::find(data_types.begin(), data_types.end(), data_type) != data_types.end();
}

const ModelFamily* find_model_family(const std::string& name) {
  for (const ModelFamily& f : registry())
    if (f.name == name) return &f;
  return nullptr;
}

const ModelFamily& model_family(const ModelConfig& model) {
  const ModelFamily* f = find_model_family(model.type);
  if (!f)
    throw InputError("model.type = \"" + model.type + "\": unknown model family; the families are " +
                     quoted_names());
  return *f;
}

bool selective_recompute_drops(const ModelConfig& model) {
  const ModelFamily& f = model_family(model);
  return f.selective_drops && f.selective_drops(model);
}

void check_family_backend(const ModelConfig& model, Backend& be) {
  const ModelFamily& f = model_family(model);
  if (f.check_backend) f.check_backend(model, be);
}

std::vector<std::string> model_family_names() {
  std::vector<std::string> names;
  for (const ModelFamily& f : registry()) names.push_back(f.name);
  return names;
}

void register_model_family(const ModelFamily& family) {
  check_complete(family);
  if (find_model_family(family.name))
    throw InputError("model family \"" + family.name + "\" is registered already; the families are " +
                     quoted_names());
  registry().push_back(family);
}

}  // namespace pt
