// profile_command.hpp: the `profile` command of the pipetrain executable.
#pragma once

#include <mpi.h>

#include <string>

#include "pipetrain/app/command_line.hpp"
#include "pipetrain/base/deck.hpp"

namespace pt {

// Collective over comm: profiles the deck's model (runtime/profiler.hpp);
// rank 0 writes the profile file and prints its table. Returns the exit
// status. `blas_note` is what select_blas_kernel said before MPI_Init.
int run_profile(MPI_Comm comm, const CommandLine& cli, const Deck& deck,
                const std::string& blas_note);

}  // namespace pt
