// metrics.hpp: the run's outputs on disk: the output directory, the resolved
// deck and <output.dir>/metrics.h5 (layout in docs/outputs.md).
//
// metrics.h5 is rewritten whole, to a temporary name then renamed, so a run
// killed at any moment leaves either the previous or the new file, never a
// half-written one. The driver flushes it before every checkpoint is
// published, so the file always holds every step of the newest checkpoint; a
// resumed run continues the same file (MetricsFile::continue_at).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "pipetrain/runtime/trainer.hpp"

namespace pt {

// Before step 0 of `train`: output.dir, and with checkpoints on the
// checkpoint directory, exist (made if missing) and take new files (a probe
// file is created and removed), and no directory stands where the run writes
// a file (metrics.h5, deck.resolved.toml, trace.h5, checkpoints' `latest`).
// One InputError naming the path and the deck key otherwise.
void prepare_output_directories(const Deck& deck);
// Before `pipetrain profile` measures: where the profile goes (`out`, or
// <output.dir>/profile.h5 when empty, output.dir made if missing) takes a new
// file. Returns the path; one InputError naming --out or output.dir otherwise.
std::string prepare_profile_output(const Deck& deck, const std::string& out);
// Before step 0 of a fresh `train` (no --resume): when the checkpoint
// directory holds checkpoints of an earlier run, they and that run's files
// in output.dir (metrics.h5, deck.resolved.toml, trace.h5, profile.h5) are
// moved to <output.dir>/previous_<UTC time>/ (checkpoints kept in
// output.checkpoint_dir go to <that dir>.previous_<UTC time>), so a fresh
// run never overwrites them and a later --resume cannot mix two runs.
// Returns the warning to print; "" when there was nothing to move.
std::string set_aside_earlier_run(const Deck& deck);
// Writes `text` to path via a temporary file, fsync and rename.
void write_file_atomic(const std::string& path, const std::string& text);

// What continuing metrics.h5 at a resume step found.
struct MetricsResume {
  std::string path;               // metrics.h5
  int64_t first_step = 0;         // the resume step S
  bool found = false;             // an earlier metrics.h5 was read
  std::string unreadable;         // why an earlier file could not be read ("" = none)
  std::string set_aside;          // where that unreadable file was moved
  int64_t kept = 0;               // its rows of steps < S, kept
  int64_t dropped = 0;            // its rows of steps >= S (redone now) and duplicates
  std::vector<int64_t> missing;   // steps < S in no row, as inclusive pairs first, last
  bool complete() const { return missing.empty(); }
  std::string message() const;    // one line saying what was kept, dropped or is missing
};

class MetricsFile {
 public:
  MetricsFile(std::string path, std::string resolved_deck);
  void set_attribute(const std::string& name, const std::string& value);
  void set_attribute(const std::string& name, const std::vector<int64_t>& values);
  void set_attribute(const std::string& name, double value);
  void set_attribute(const std::string& name, const std::vector<double>& values);
  // A run resumed at step `first_step` continues the history in the file:
  // one row per step < first_step is kept (those of later steps are redone
  // and dropped), the attribute resumed_at_steps gains first_step, and steps
  // before it that no row holds are recorded in the attribute missing_steps.
  // An unreadable file is moved aside (metrics.unreadable_<step>.h5).
  MetricsResume continue_at(int64_t first_step);
  void add_step(const StepRecord& rec, double samples_per_s);
  void write();  // atomic rewrite
  void flush();  // write() when something changed since the last write

 private:
  void load(const std::string& path);
  void keep_rows_before(int64_t first_step);

  std::string path_;
  std::string deck_;
  std::map<std::string, std::string> text_attrs_;
  std::map<std::string, std::vector<int64_t>> int_attrs_;
  std::map<std::string, double> float_attrs_;
  std::map<std::string, std::vector<double>> float_list_attrs_;
  std::vector<int64_t> step_;
  std::map<std::string, std::vector<double>> series_;  // loss, lr, grad_norm, ...
  // peak_bytes_<category>: per step, one value per stage (NaN pads the rows of
  // a run segment with fewer stages when written)
  std::map<std::string, std::vector<std::vector<double>>> stage_series_;
  bool dirty_ = true;
};

}  // namespace pt
