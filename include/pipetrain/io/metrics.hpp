// metrics.hpp: the run's outputs on disk: the output directory, the resolved
// deck and <output.dir>/metrics.h5 (layout in docs/outputs.md).
//
// metrics.h5 is rewritten whole, to a temporary name then renamed, so a run
// killed at any moment leaves either the previous or the new file, never a
// half-written one.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "pipetrain/runtime/trainer.hpp"

namespace pt {

// mkdir -p; InputError naming the path (and the deck key) when impossible.
void ensure_directory(const std::string& path, const std::string& deck_key);
// Writes `text` to path via a temporary file, fsync and rename.
void write_file_atomic(const std::string& path, const std::string& text);

class MetricsFile {
 public:
  MetricsFile(std::string path, std::string resolved_deck);
  void set_attribute(const std::string& name, const std::string& value);
  void set_attribute(const std::string& name, const std::vector<int64_t>& values);
  void set_attribute(const std::string& name, double value);
  void add_step(const StepRecord& rec, double samples_per_s);
  void write() const;  // atomic rewrite

 private:
  std::string path_;
  std::string deck_;
  std::map<std::string, std::string> text_attrs_;
  std::map<std::string, std::vector<int64_t>> int_attrs_;
  std::map<std::string, double> float_attrs_;
  std::vector<int64_t> step_;
  std::map<std::string, std::vector<double>> series_;  // loss, lr, grad_norm, ...
  // peak_bytes_<category>: per stage, one value per step
  std::map<std::string, std::vector<std::vector<double>>> stage_series_;
};

}  // namespace pt
