// replica_check.hpp: data-parallel replicas that silently disagree
// (data_parallel.check_every; docs/reliability.md, "Replicas that disagree").
//
// Every replica of a stage applies the same update to the same parameters,
// so their values must stay bitwise equal. A silent data corruption on one
// GPU, or a nondeterministic kernel, breaks that without any error. The
// check compares, across the replicas of each stage, a digest of every
// parameter (tensor/payload_digest.hpp: an integer hash of the bits,
// computed where the parameter lives) and ends the run on a difference,
// naming the stage, the replicas and the first parameter that differs.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <vector>

#include "pipetrain/model/model.hpp"
#include "pipetrain/tensor/backend.hpp"

namespace pt {

// When the check runs: every `every` steps, and after every step a
// checkpoint follows (every checkpoint_every steps and the last step), so
// that a checkpoint never saves parameters the replicas disagree on. Never
// with one replica or every = 0. `step` is 0-based; the check follows it.
bool replica_check_due(int64_t step, int64_t every, int64_t checkpoint_every, int64_t steps,
                       int replicas);

// Collective over `replicas` (this rank's stages in every replica, rank r =
// replica r): throws Error naming the stage, the replicas and the first
// parameter (in stage and parameter order) whose digests differ. Returns
// the number of parameters compared.
int64_t check_replicas_agree(std::vector<StageModel>& stages, Backend& be, MPI_Comm replicas,
                             int64_t step);

// How many checks this process has run (tests prove the check ran by it).
int64_t& replica_checks_run();

// Fault injection (PIPETRAIN_TEST_CORRUPT_REPLICA): flips one bit (the top
// mantissa bit, which no later update rounds away) of the first element of
// this rank's last parameter.
void corrupt_one_parameter(std::vector<StageModel>& stages, Backend& be);

}  // namespace pt
