// command_line.hpp: the pipetrain command line, parsed (CLI11, in
// src/app/command_line.cpp only).
#pragma once

#include <string>
#include <vector>

namespace pt {

struct CommandLine {
  std::string command;                 // "train" | "validate" | "profile" | "help"
  std::string deck_path;
  std::vector<std::string> overrides;  // from --set section.key=value
  int ranks = 0;                       // validate, profile --ranks N (0 = MPI world size)
  bool print_schedule = false;         // validate --print-schedule
  std::string resume;                  // train --resume [PATH]: "" = no, "latest" or a path
  std::string out;                     // profile --out FILE ("" = <output.dir>/profile.h5)
  int reps = 0;                        // profile --reps K (0 = the profiler's default)
  std::string help_text;               // filled for "help"
};

// Throws InputError with a usage hint on any bad argument.
CommandLine parse_command_line(int argc, char** argv);

}  // namespace pt
