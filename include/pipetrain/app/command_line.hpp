// command_line.hpp: the pipetrain command line, parsed (CLI11, in
// src/app/command_line.cpp only).
#pragma once

#include <string>
#include <vector>

namespace pt {

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
