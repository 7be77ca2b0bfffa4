// deck_load.cpp: the start of every command: rank 0 reads the deck, checks
// its layout on the job's ranks (with the schedule's validator) and its data
// files, prepares the output directory, and broadcasts the resolved deck or
// the error text, so every rank agrees on the outcome before anything runs
// (app/deck_load.hpp).
#include "pipetrain/app/deck_load.hpp"

#include <cstdio>
#include <string>
#include <vector>

#include "pipetrain/app/auto_plan.hpp"
#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/base/error.hpp"
#include "pipetrain/base/timed_wait.hpp"
#include "pipetrain/io/data_files.hpp"
#include "pipetrain/io/deck_io.hpp"
#include "pipetrain/io/metrics.hpp"
#include "pipetrain/runtime/data_set_config.hpp"
#include "pipetrain/runtime/run_builder.hpp"

namespace pt {

namespace {

// Rank 0's text reaches every rank; `ok` says whether it is a deck or an error.
std::string broadcast_text(const World& w, std::string text, bool& ok) {
  long long header[2] = {ok ? 1 : 0, static_cast<long long>(text.size())};
  timed_bcast(header, 2, MPI_LONG_LONG, 0, w.comm, "the deck broadcast from rank 0");
  ok = header[0] == 1;
  text.resize(static_cast<size_t>(header[1]));
  timed_bcast(text.data(), static_cast<int>(header[1]), MPI_CHAR, 0, w.comm,
              "the deck broadcast from rank 0");
  return text;
}

// Checks the data files. Image files are read whole. Token files are
// checked, then the files that glob patterns and lists named are written
// into the deck, in reading order: every rank, the run's deck.resolved.toml
// and its checkpoints see the same list (a resume warns when the list it
// finds differs, checkpoint-format.md).
void check_data_files(Deck& deck) {
  if (deck.data.type == DataKind::ImageFiles) return check_image_files(data_set_config_for(deck));
  if (deck.data.type != DataKind::Hdf5) return;
  const DataSetConfig config = data_set_config_for(deck);
  check_token_data(config);
  auto resolve = [&](Split split, std::string& one, std::vector<std::string>& list) {
    if (one.empty() && list.empty()) return;
    const std::vector<TokenFileRef> files = token_files(config, split);
    if (list.empty() && files.size() == 1 && files[0].path == one) return;  // one file, as written
    list.clear();
    for (const TokenFileRef& f : files) list.push_back(f.path);
    one.clear();
  };
  resolve(Split::Train, deck.data.path, deck.data.path_list);
  resolve(Split::Eval, deck.data.eval_path, deck.data.eval_path_list);
}

// The deck's layout on `ranks`, checked with its schedule's validator. When
// pipeline.auto chooses the grid (auto_chooses_grid) the deck is accepted if
// one grid of the ranks passes (the first failure is reported if none does),
// and the run starts as one pipeline of every rank (D = 1), on which auto
// profiles; it splits the grid it chooses (grid_to_run).
DeckLayout checked_layout(const Deck& deck, int ranks) {
  const auto check = [&](const Deck& d) {
    const DeckLayout layout = resolve_deck_layout(d, ranks);
    validate_schedule(schedule_for_deck(d, layout.pipeline_ranks),
                      comm_semantics_of(d.pipeline.transport, d.training.device));
    return layout;
  };
  if (!deck.pipeline.auto_plan || !auto_chooses_grid(deck, ranks)) return check(deck);
  Deck at = deck;
  for (int replicas = ranks; replicas >= 2; --replicas) {
    if (ranks % replicas != 0) continue;
    at.data_parallel.replicas = replicas;
    try {
      check(at);
      return DeckLayout{ranks, 1};
    } catch (const InputError&) {
    }
  }
  at.data_parallel.replicas = 1;
  check(at);  // no grid passed: the one-pipeline message
  return DeckLayout{ranks, 1};
}

}  // namespace

bool load_deck(const World& w, const CommandLine& cli, Deck& deck) {
  std::string text;
  bool ok = true;
  if (w.rank == 0) {
    try {
      deck = parse_deck_file(cli.deck_path, cli.overrides, warn);  // old key names: one notice each
      set_wait_limit(deck.pipeline.timeout_s);  // the others learn it from the broadcast
      // `plan` without a D or a stage count weighs every P x D grid of the
      // ranks, each checked by the planner; everything else runs one grid.
      const bool every_grid = cli.command == "plan" && !deck.pipeline.auto_plan &&
                              deck.pipeline.stages == 0 && deck.data_parallel.replicas == 0;
      // `sample` runs one stage per rank, whatever the deck's layout, and reads no data.
      const bool sample = cli.command == "sample";
      if (!every_grid && !sample) {
        const DeckLayout layout = checked_layout(deck, cli.ranks > 0 ? cli.ranks : w.size);
        deck.data_parallel.replicas = layout.data_parallel;  // resolved: every rank and the outputs see D
      }
      // `plan --device` neither reads data nor computes: it plans on a description.
      const bool runs_here = !(cli.command == "plan" && !cli.device.empty());
      if (runs_here && !sample) check_data_files(deck);
      if (runs_here && deck.training.device == DeviceKind::Cuda && !cuda_available_in_build())
        throw InputError(deck.where("training.device") +
                         " = \"cuda\": this build has no CUDA backend; build with `make cuda` "
                         "(cmake -DPIPETRAIN_CUDA=ON) and run build-cuda/pipetrain");
      if (cli.command == "train" && cli.resume.empty()) {
        const std::string moved = set_aside_earlier_run(deck);
        if (!moved.empty()) warn(moved);
      }
      if (cli.command == "train") prepare_output_directories(deck);
      if (cli.command == "profile") prepare_profile_output(deck, cli.out);
      text = deck_to_toml(deck);
    } catch (const InputError& e) {
      ok = false;
      text = e.what();
      std::fprintf(stderr, "pipetrain: error: %s\n", e.what());
    }
  }
  text = broadcast_text(w, text, ok);
  if (ok && w.rank != 0) deck = parse_deck_text(text, cli.deck_path + " (resolved)", {});
  return ok;
}

}  // namespace pt
