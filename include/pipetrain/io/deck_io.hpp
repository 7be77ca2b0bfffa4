// deck_io.hpp: reading, checking and echoing input decks.
//
// All toml11 use is in src/io/deck_toml.cpp (the header compiles slowly).
// Every problem is a pt::InputError whose message names the file, the line,
// the key and what was expected, e.g.
//   inputs/mlp.toml:14: training.batch_size = 60 must be divisible by
//   pipeline.micro_batches = 8
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"

namespace pt {

// Receives one notice per old key name a deck or an override uses (the keys
// that moved out of [pipeline], docs/decks.md "Moved keys"), e.g.
//   inputs/x.toml:14: rebalance.every is now rebalance.every; the old name still works
// The driver prints them on rank 0; without one they are dropped (the
// resolved deck other ranks read, a deck stored in an older file).
using DeckNotice = std::function<void(const std::string&)>;

// Parses a deck file, applies "section.key=value" overrides (values in TOML
// syntax; a bare word is taken as a string), and checks keys, types, ranges
// and consistency. Does not check against the rank count. An old key name
// sets its new key and is reported to `notice` when it is read (before the
// value and consistency checks); one key written under both names in the
// file, or both in the overrides, is an InputError naming both places.
Deck parse_deck_file(const std::string& path, const std::vector<std::string>& overrides,
                     const DeckNotice& notice = {});
// Same, from text; `source_name` is used in messages.
Deck parse_deck_text(const std::string& text, const std::string& source_name,
                     const std::vector<std::string>& overrides, const DeckNotice& notice = {});

// Checks that need the world. The ranks form a grid of pipeline ranks x
// data_parallel.replicas D (docs/data-parallel.md): D divides
// `world_ranks` and the batch splits into D x micro_batches
// micro-batches. Then, for one pipeline of the grid: the rank count resolved,
// the schedule's stages (ranks x stages per rank: interleaved
// virtual_stages, zb-v 2) with their partition units (MLP Linear layers, GPT
// blocks), the explicit partition, per-stage recompute, the schedule
// (generated or file). Returns the resolved number of ranks, the count
// schedule_for_deck takes.
int check_deck_layout(const Deck& deck, int world_ranks);
struct DeckLayout {
  int pipeline_ranks = 1;  // ranks of one pipeline (stages / stages per rank)
  int data_parallel = 1;   // replicas D of the pipeline (resolved data_parallel.replicas)
};
DeckLayout resolve_deck_layout(const Deck& deck, int world_ranks);
// The checks of one pipeline of `num_ranks` ranks; `replicas` (D) only
// words the messages ("each of the D pipelines has ...").
int check_layout_of_pipeline(const Deck& deck, int num_ranks, int replicas = 1);

// The resolved deck as commented TOML; parse_deck_text of it gives the same Deck.
std::string deck_to_toml(const Deck& deck);

}  // namespace pt
