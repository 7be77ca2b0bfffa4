// recompute.hpp: activation recomputation policies (the GPipe trade of
// compute for memory), chosen per stage.
//   none       keep every layer's input and saved tensors until backward
//   selective  as none, minus what layers mark recomputable (GPT attention
//              probabilities), which backward recomputes
//   every:k    keep the input of every k-th layer only; backward re-runs the
//              forward of each k-layer segment just before its backward
//   full       keep only the stage input; backward re-runs the whole stage
// Recomputed forwards are bitwise the originals, so gradients are identical.
#pragma once

#include <cstddef>
#include <string>

namespace pt {

struct RecomputePolicy {
  enum class Kind { None, Selective, Every, Full };
  Kind kind = Kind::None;
  size_t every = 1;  // k of every:k

  std::string name() const;
  // Whether forward keeps the input of layer `index` (of the stage's layers).
  bool keeps_input(size_t index) const;
  // Whether forward keeps the layers' saved tensors (none, selective).
  bool keeps_saved() const { return kind == Kind::None || kind == Kind::Selective; }
  // Start of the recompute segment that holds layer `index`.
  size_t segment_start(size_t index) const;
};

// "none" | "selective" | "every:K" (K >= 1) | "full"; anything else gives
// an InputError naming `where` (the deck key) and the accepted forms.
RecomputePolicy parse_recompute_policy(const std::string& text, const std::string& where);
// True for the forms above and "auto".
bool is_recompute_setting(const std::string& text);

}  // namespace pt
