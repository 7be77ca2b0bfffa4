// checkpoint.hpp: HDF5 checkpoints that survive crashes, resume bit for bit
// and load at any stage count (layout in docs/checkpoint-format.md).
//
// A checkpoint is a directory <root>/step_<8 digits>/ holding one HDF5 file
// per writing stage (stage_<3 digits>.h5) and manifest.h5. Parameters are
// keyed by their global names ("unit3.linear.weight"), never by stage, so a
// checkpoint written by P stages loads at any P' and partition. It is written
// under <name>.tmp, fsync'ed, renamed, and only then does <root>/latest (a
// one-line text file, itself replaced atomically) name it.
//
// The files of one checkpoint are bound together: each save draws a random
// checkpoint_id that the manifest and every stage file record with the step,
// and the manifest lists every stage file's datasets with their CRC-32s. A
// load gets exactly what one save wrote, or is refused.
//
// Both entry points are collective over `comm` (one rank per stage, `params`
// this stage's parameters in global order). Every problem with a checkpoint
// being read is a pt::InputError carrying the same message on every rank.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/model/layers.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

// The format this pipetrain writes: 3, whose manifest checks itself
// (manifest_crc32). It reads 3 and 2 (the same without that check, whose
// manifest damage is found only through the stage files it misdescribes);
// version 1 (without the binding of files to the manifest) is refused with
// a message saying so.
constexpr int64_t kCheckpointFormatVersion = 3;
constexpr int64_t kOldestReadableCheckpointFormat = 2;

// output.checkpoint_dir, or <output.dir>/checkpoints when that is "".
std::string checkpoint_root(const Deck& deck);
// The directory the checkpoint of `steps_done` steps is written to:
// <checkpoint_root>/step_<steps_done, 8 digits>.
std::string checkpoint_dir(const Deck& deck, int64_t steps_done);
// True when `root` holds anything a resume from "latest" would try: a
// `latest` pointer or a step_* directory (good or not: a broken one is still
// refused by load_checkpoint, never silently skipped to step 0).
bool any_checkpoint_in(const std::string& root);

// Training counters beyond the step, the same on every rank: AdamW's update
// count (it differs from the step once fp16 steps were skipped) and the fp16
// loss scaler's state. A checkpoint without them (written by hand) loads as
// "updates = step, a fresh loss scaler".
struct TrainingCounters {
  int64_t optimizer_updates = -1;  // -1: equal to the step
  double loss_scale = 0.0;         // 0: no loss scaler state (fp32, bf16, tf32)
  int64_t loss_scale_run = 0;      // finite steps since the last overflow or growth
  int64_t skipped_steps = 0;       // fp16 steps skipped for overflow so far
};

// What a save did; the same on every rank.
struct CheckpointWrite {
  std::string path;      // the committed directory
  double bytes = 0.0;    // all stage files together
  double seconds = 0.0;  // wall time of the call: how long training was blocked
  uint32_t digest = 0;   // CRC-32 of every dataset's CRC-32 in global parameter
                         // order: equal digests = bitwise-equal model and optimizer
};

// Writes the state after `step` completed optimizer steps into
// <root>/step_<step>, points latest at it and keeps the newest
// output.checkpoint_keep (pruned in the background, see below).
// `resolved_deck` is stored verbatim. `partition`: the units per pipeline
// stage in use, which the manifest records (a rebalancing move changes
// them); empty = the deck's pipeline.partition.
// Fault hook PIPETRAIN_TEST_CRASH_IN_CHECKPOINT=<rank>:<step> kills that rank
// (SIGKILL) halfway through writing its stage file for that step.
CheckpointWrite save_checkpoint(const Deck& deck, const std::string& resolved_deck,
                                const std::vector<Param*>& params, int64_t step, MPI_Comm comm,
                                const TrainingCounters& counters = {},
                                const std::vector<int64_t>& partition = {});

// Waits until old checkpoints are deleted: a save hands that to a thread of
// rank 0 and returns (the next save and the end of the process wait for it).
void wait_for_checkpoint_pruning();

enum class LoadMode {
  Resume,       // weights, optimizer state and step
  WeightsOnly,  // weights only (training.init_from); training starts at step 0
};

// What a load did; the same on every rank.
struct CheckpointRead {
  std::string path;      // the checkpoint directory loaded
  int64_t step = 0;      // its completed steps: Resume continues at this 0-based step
  double bytes = 0.0;    // bytes read by all ranks
  double seconds = 0.0;  // wall time of the call
  TrainingCounters counters;  // Resume: the counters saved (optimizer_updates resolved)
  std::string deck_text;      // rank 0 only: the resolved deck the checkpoint stores
};

// `spec` is "latest" (the newest good checkpoint under checkpoint_root), a
// checkpoint directory, its manifest.h5, or a checkpoint root (its latest).
// With latest, a broken newest checkpoint (missing, truncated, corrupt or
// damaged file, or files not saved together) is skipped with a warning for
// the next older one; a path named explicitly is never replaced. Rank 0
// prints warnings.
CheckpointRead load_checkpoint(const std::string& spec, LoadMode mode, const Deck& deck,
                               const std::string& resolved_deck,
                               const std::vector<Param*>& params, MPI_Comm comm);

// The same for a trainer's whole state: its stage's parameters with their
// optimizer state, and the counters (AdamW's update count, the fp16 loss
// scaler), which a Resume load applies to the trainer. Prefer these.
CheckpointWrite save_checkpoint(const Deck& deck, const std::string& resolved_deck,
                                Trainer& trainer, int64_t step, MPI_Comm comm);
CheckpointRead load_checkpoint(const std::string& spec, LoadMode mode, const Deck& deck,
                               const std::string& resolved_deck, Trainer& trainer, MPI_Comm comm);

}  // namespace pt
