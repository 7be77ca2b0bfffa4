// profile_command.hpp: the `profile` command of the pipetrain executable.
#pragma once

#include <mpi.h>

#include <string>

#include "pipetrain/app/command_line.hpp"
#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/base/deck.hpp"
#include "pipetrain/runtime/profiler.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

// The deck's BLAS threads for a run of `planned_ranks` ranks on this node
// (when more than the ranks measuring now): cores / planned ranks.
BlasThreadsChoice profile_blas_threads(const Deck& deck, MPI_Comm comm, int planned_ranks);
// `base` with the compute set-up's hooks (device memory statistics, the
// transport, the kernels' description): every profile a command or run takes.
ProfileOptions options_on(const ComputeResources& compute, ProfileOptions base);
// The same, with the command line's --reps.
ProfileOptions options_for(const CommandLine& cli, const ComputeResources& compute,
                           ProfileOptions base);

// Collective over comm: profiles the deck's model (runtime/profiler.hpp);
// rank 0 writes the profile file and prints its table. Returns the exit
// status. `blas_note` is what select_blas_kernel said before MPI_Init.
int run_profile(MPI_Comm comm, const CommandLine& cli, const Deck& deck,
                const std::string& blas_note);

// Collective over comm: `pipetrain plan` (src/app/plan_command.cpp).
int run_plan(MPI_Comm comm, const CommandLine& cli, const Deck& deck, const std::string& blas_note);

}  // namespace pt
