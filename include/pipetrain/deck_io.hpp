// deck_io.hpp: reading, checking and echoing input decks, and the command line.
//
// All toml11 and CLI11 use is in src/io/deck_toml.cpp (those headers compile
// slowly). Every problem is a pt::InputError whose message names the file,
// the line, the key and what was expected, e.g.
//   inputs/mlp.toml:14: training.batch_size = 60 must be divisible by
//   pipeline.micro_batches = 8
#pragma once

#include <string>
#include <vector>

#include "pipetrain/deck.hpp"

namespace pt {

// Parses a deck file, applies "section.key=value" overrides (values in TOML
// syntax; a bare word is taken as a string), and checks keys, types, ranges
// and consistency. Does not check against the rank count.
Deck parse_deck_file(const std::string& path, const std::vector<std::string>& overrides);
// Same, from text; `source_name` is used in messages.
Deck parse_deck_text(const std::string& text, const std::string& source_name,
                     const std::vector<std::string>& overrides);

// Checks that need the world: the stage count resolved against `num_ranks`
// (one stage per rank), layers per stage, the explicit partition, the
// schedule file. Returns the resolved number of stages.
int check_deck_layout(const Deck& deck, int num_ranks);

// The resolved deck as commented TOML; parse_deck_text of it gives the same Deck.
std::string deck_to_toml(const Deck& deck);

struct CommandLine {
  std::string command;                 // "train" | "validate" | "help"
  std::string deck_path;
  std::vector<std::string> overrides;  // from --set section.key=value
  int ranks = 0;                       // validate --ranks N (0 = MPI world size)
  bool print_schedule = false;         // validate --print-schedule
  std::string resume;                  // train --resume [PATH]: "" = no, "latest" or a path
  std::string help_text;               // filled for "help"
};

// Throws InputError with a usage hint on any bad argument.
CommandLine parse_command_line(int argc, char** argv);

}  // namespace pt
