// deck_io.hpp: reading, checking and echoing input decks.
//
// All toml11 use is in src/io/deck_toml.cpp (the header compiles slowly).
// Every problem is a pt::InputError whose message names the file, the line,
// the key and what was expected, e.g.
//   inputs/mlp.toml:14: training.batch_size = 60 must be divisible by
//   pipeline.micro_batches = 8
#pragma once

#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"

namespace pt {

// Parses a deck file, applies "section.key=value" overrides (values in TOML
// syntax; a bare word is taken as a string), and checks keys, types, ranges
// and consistency. Does not check against the rank count.
Deck parse_deck_file(const std::string& path, const std::vector<std::string>& overrides);
// Same, from text; `source_name` is used in messages.
Deck parse_deck_text(const std::string& text, const std::string& source_name,
                     const std::vector<std::string>& overrides);

// Checks that need the world: the rank count resolved against `num_ranks`,
// the schedule's stages (ranks x stages per rank: interleaved
// virtual_stages, zb-v 2) with their partition units (MLP Linear layers, GPT
// blocks), the explicit partition, per-stage recompute, the schedule
// (generated or file). Returns the resolved number of ranks, the count
// schedule_for_deck takes.
int check_deck_layout(const Deck& deck, int num_ranks);

// The resolved deck as commented TOML; parse_deck_text of it gives the same Deck.
std::string deck_to_toml(const Deck& deck);

}  // namespace pt
