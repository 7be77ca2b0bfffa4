// checkpoint_deck.cpp: a checkpoint's resolved deck (the manifest's `deck`
// attribute) against the deck of the run that loads it: which of its
// [model], [data] and [training] values differ, which [model] keys a resume
// must keep, and why vocabulary tables have other shapes.
#include "checkpoint_deck.hpp"

#include <sstream>

#include "pipetrain/io/deck_io.hpp"

namespace pt::ckpt {

// "section.key" -> value text of the [model], [data] and [training] lines of
// a resolved deck (a manifest's deck attribute).
std::map<std::string, std::string> deck_values(const std::string& text) {
  std::map<std::string, std::string> out;
  std::string section;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty() && line[0] == '[') section = line.substr(1, line.find(']') - 1);
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos || line[0] == '#') continue;
    if (section != "model" && section != "data" && section != "training") continue;
    std::string value = line.substr(eq + 3);
    value = value.substr(0, value.find(" #"));
    while (!value.empty() && value.back() == ' ') value.pop_back();
    out[section + "." + line.substr(0, eq)] = value;
  }
  return out;
}

// When the checkpoint was saved with another model.vocab_multiple than the
// deck's (absent: 1, no padding), why its vocabulary tables have other
// shapes; else "". A checkpoint is not re-padded on load: the padded rows
// are part of its shapes, and the deck must pad as it did.
std::string padding_note(const std::string& saved_deck, const Deck& deck) {
  const auto saved = deck_values(saved_deck);
  const auto it = saved.find("model.vocab_multiple");
  const std::string before = it == saved.end() ? "1" : it->second;
  const std::string now = std::to_string(deck.model.gpt.vocab_multiple);
  if (before == now) return "";
  return ": it was saved with model.vocab_multiple = " + before + ", the deck has " + now +
         "; a checkpoint loads only with the vocabulary padding it was saved with";
}

// A resume continues the model it saved: the [model] keys that change what
// it computes (model.heads, model.activation, ...) must be the checkpoint's
// even where every shape agrees. Only the attention kernels (the same
// function) and the initialisation seed (spent) may differ; a key the
// checkpoint's deck lacks (an older pipetrain's) is not compared.
std::string model_key_differences(const std::string& saved_deck, const Deck& deck) {
  const auto before = deck_values(saved_deck), now = deck_values(deck_to_toml(deck));
  std::string diff;
  for (const auto& [key, value] : now) {
    if (key.rfind("model.", 0) != 0 || key == "model.init_seed" || key == "model.attention") continue;
    const auto it = before.find(key);
    if (it == before.end() || it->second == value) continue;
    diff += (diff.empty() ? "" : ", ") + deck.described(key, value) + ", the checkpoint's " + it->second;
  }
  return diff;
}

std::string deck_differences(const std::string& saved, const std::string& current) {
  const auto before = deck_values(saved), now = deck_values(current);
  std::string diff;
  for (const auto& [key, value] : now) {
    auto it = before.find(key);
    if (key == "training.init_from" || it == before.end() || it->second == value) continue;
    diff += (diff.empty() ? "" : ", ") + key + " = " + value + " (checkpoint: " + it->second + ")";
  }
  return diff;
}


}  // namespace pt::ckpt
