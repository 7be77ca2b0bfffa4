// command_line.hpp: the pipetrain command line, parsed (CLI11, in
// src/app/command_line.cpp only).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace pt {

struct CommandLine {
  std::string command;                 // "train" | "validate" | "profile" | "plan" | "sample" | "help"
  std::string deck_path;
  std::vector<std::string> overrides;  // from --set section.key=value
  int ranks = 0;                       // validate, profile --ranks N (0 = MPI world size)
  bool print_schedule = false;         // validate --print-schedule
  std::string resume;                  // train --resume [PATH]: "" = no, "latest" or a path;
                                       // sample --resume PATH (default "latest")
  std::string out;                     // profile --out FILE ("" = <output.dir>/profile.h5)
  int reps = 0;                        // profile, plan --reps K (0 = the profiler's default)
  std::string profile_path;            // plan --profile FILE (profile.h5 or trace.h5; "" = measure)
  std::string device;                  // plan --device NAME ("" = the deck's own backend)
  std::vector<int> micro_batch_counts; // plan --micro-batches N,... (empty: every divisor)
  std::vector<std::string> schedules;  // plan --schedules a,b,... (empty: gpipe, 1f1b and the deck's)
  int top = 20;                        // plan --top K: rows of the ranked table printed
  std::string prompt;                  // sample --prompt TEXT ("" = "The", or token 0 without a tokenizer)
  int64_t tokens = 64;                 // sample --tokens N
  double temperature = 1.0;            // sample --temperature T (0 = greedy)
  int64_t top_k = 0;                   // sample --top-k K (0 = every token)
  uint64_t seed = 1;                   // sample --seed S
  std::string tokenizer;               // sample --tokenizer FILE|bytes ("" = the deck's)
  bool print_ids = false;              // sample --ids: token ids instead of text
  std::string help_text;               // filled for "help"
};

// Throws InputError with a usage hint on any bad argument.
CommandLine parse_command_line(int argc, char** argv);

}  // namespace pt
