// recompute.hpp: the one definition of activation recomputation policies
// (the GPipe trade of compute for memory), chosen per stage, and of how the
// planner's partition units map onto the layers they count. The runtime
// (executor, trainer) and the planner (plan/stage_cost) both parse and read
// policies here, so `every:K` means one thing everywhere.
//   none       keep every layer's input and saved tensors until backward
//   selective  as none, minus what layers mark recomputable (GPT attention
//              probabilities), which backward recomputes
//   every:K    keep the input of every K-th layer of the stage only (layers
//              0, K, 2K, ...); backward re-runs the forward of each K-layer
//              segment just before its backward
//   full       keep only the stage input; backward re-runs the whole stage
// K counts the executor's layers, not partition units: a GPT unit is one
// layer (embedding, block, head), an MLP unit two (its Linear, then its
// activation; the model's last Linear has none). UnitLayerMap carries that
// mapping for the planner. Recomputed forwards are bitwise the originals, so
// gradients are identical under every policy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"

namespace pt {

struct RecomputePolicy {
  enum class Kind { None, Selective, Every, Full };
  Kind kind = Kind::None;
  size_t every = 1;  // K of every:K, in layers

  std::string name() const;  // "none", "selective", "every:3", "full"
  // Whether forward keeps the input of layer `index` (of the stage's layers).
  bool keeps_input(size_t index) const;
  // Whether forward keeps the layers' saved tensors (none, selective).
  bool keeps_saved() const { return kind == Kind::None || kind == Kind::Selective; }
  // Start of the recompute segment that holds layer `index`.
  size_t segment_start(size_t index) const;
  // "none" | "selective" | "every:K" (K >= 1) | "full"; else an InputError
  // naming the text (the planner's entry: no deck key to name).
  static RecomputePolicy parse(const std::string& text);
};

// The deck's entry: as RecomputePolicy::parse, the error naming `where` (the
// deck key) and every accepted setting of it, "auto" included.
RecomputePolicy parse_recompute_policy(const std::string& text, const std::string& where);
// True for the forms above and "auto" (decided at run time by a probe).
bool is_recompute_setting(const std::string& text);
// Whether a setting is "auto": the one place that name is compared.
bool is_auto_recompute(const std::string& setting);
// Whether pipeline.recompute or any entry of recompute_stages is "auto".
bool any_auto_recompute(const PipelineConfig& pipeline);

// Where the layers of a run of partition units sit, for every:K: unit u of
// the run holds `layers[u]` executor layers; its first layer takes the
// unit's input, its later ones (an MLP's activation) a tensor of the unit's
// output size.
class UnitLayerMap {
 public:
  explicit UnitLayerMap(std::vector<int64_t> layers_per_unit);
  size_t units() const { return prefix_.size() - 1; }
  // Layers of units [first, end).
  size_t layers(size_t first, size_t end) const { return prefix_[end] - prefix_[first]; }
  // The unit of layer `layer` counted from the first layer of unit `first`,
  // and whether that layer is the unit's first (it takes the unit's input).
  size_t unit_of(size_t first, size_t layer, bool& first_layer) const;

 private:
  std::vector<size_t> prefix_;  // prefix_[u] = layers of units [0, u)
};

}  // namespace pt
