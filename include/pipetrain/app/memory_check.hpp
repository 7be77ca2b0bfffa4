// memory_check.hpp: before a run builds anything, the bytes its stages hold
// from start to end (parameters with their gradients and optimizer state,
// counted from the model's widths: model.hpp, persistent_state_bytes)
// against the memory there is, so that a model too large for the job is
// refused with its figures and keys instead of failing part-way through
// building its stages, or being killed by the kernel's OOM killer.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "pipetrain/app/compute_setup.hpp"
#include "pipetrain/base/deck.hpp"
#include "pipetrain/runtime/grid.hpp"

namespace pt {

// The memory a rank draws from: its node's host memory, which the node's
// ranks share (the CPU backend), or its GPU's, its own (CUDA). `checked`
// false: not known, or shared in a way the checks do not model (ranks that
// share a GPU), and the checks pass.
struct MemoryOnHand {
  bool checked = false;
  bool per_node = true;   // shared by the node's ranks; else this rank's alone
  double bytes = 0.0;     // available now
  std::string source;     // "host memory available (MemAvailable)", "GPU memory free (cudaMemGetInfo)"
};

// This rank's: MemAvailable of /proc/meminfo on the CPU; the device's free
// memory on a GPU of its own (ComputeResources::free_device_memory).
MemoryOnHand memory_on_hand(const ComputeResources& compute);

// Collective over `world`, before a training run's profile builds anything:
// the memory of the whole job (every node's, or GPU's, summed) against the
// persistent state of `copies` copies of the model (the run's data-parallel
// replicas). InputError on every rank, with the same message, when it
// cannot fit.
void check_model_fits_job(const Deck& deck, int64_t copies, MPI_Comm world, const MemoryOnHand& on_hand);

// Collective over `comm`, before `profile` (or `plan` measuring) builds a
// unit: each rank builds, one at a time, every stage of the uniform
// partition over comm's ranks (the stage chains), so each node (or GPU)
// needs its ranks times the largest of those stages. InputError on every
// rank when one cannot hold that.
void check_profile_fits(const Deck& deck, MPI_Comm comm, const MemoryOnHand& on_hand);

// Collective over grid.world(), before the stages are built: the persistent
// state of the stages each node (or GPU) holds under `partition` (units per
// stage; empty: uniform) against its memory. InputError on every rank,
// naming the node or rank with the least room, when one cannot hold its stages.
void check_stages_fit(const Deck& deck, const std::vector<int64_t>& partition, const ProcessGrid& grid,
                      const MemoryOnHand& on_hand);

// `validate` of a deck whose pipeline.partition = "balanced" partitions
// within pipeline.memory_budget_mb: InputError when the budget is below what
// the largest stage of every contiguous partition over `stages` stages holds
// for its parameters alone (the least of it over all partitions), so no
// partition can meet it whatever its activations (train refuses it after
// its profile; validate measures nothing).
void check_budget_holds_parameters(const Deck& deck, int stages);

// One line for `validate`: the model's parameters and each stage's persistent
// state under `partition` (units per stage).
std::string persistent_state_summary(const Deck& deck, const std::vector<int64_t>& units_per_stage);

}  // namespace pt
