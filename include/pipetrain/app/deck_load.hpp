// deck_load.hpp: the deck every command runs, agreed on by every rank.
#pragma once

#include "pipetrain/app/command_line.hpp"
#include "pipetrain/app/run_state.hpp"
#include "pipetrain/base/deck.hpp"

namespace pt {

// Collective over w.comm. Rank 0 parses cli.deck_path with cli.overrides,
// resolves the layout on the job's ranks (pipeline.auto choosing the grid:
// accepted when one grid passes), validates the schedule, checks the data
// files, prepares the output directory (train) and broadcasts the resolved
// deck; every rank returns it in `deck`. Returns false, after rank 0 printed
// the message, when the deck is bad (on every rank).
bool load_deck(const World& w, const CommandLine& cli, Deck& deck);

}  // namespace pt
