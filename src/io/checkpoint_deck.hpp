// checkpoint_deck.hpp: a checkpoint's resolved deck against the loading
// run's deck (private to src/io; checkpoint_deck.cpp).
#pragma once

#include <map>
#include <string>

#include "pipetrain/base/deck.hpp"

namespace pt::ckpt {

// "section.key" -> value text of the [model], [data] and [training] lines of
// a resolved deck.
std::map<std::string, std::string> deck_values(const std::string& text);
// ": it was saved with model.vocab_multiple = ..." when the padding differs, else "".
std::string padding_note(const std::string& saved_deck, const Deck& deck);
// "model.heads = 8 (--set model.heads=8), the checkpoint's 4, ...": the
// [model] keys a resume must keep that differ (all but model.attention and
// model.init_seed); "" when none.
std::string model_key_differences(const std::string& saved_deck, const Deck& deck);
// "training.lr = 0.01 (checkpoint: 0.001), ...": the [model], [data] and
// [training] values that differ (training.init_from aside), for a warning.
std::string deck_differences(const std::string& saved, const std::string& current);

}  // namespace pt::ckpt
