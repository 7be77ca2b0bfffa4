// grid_setup.hpp: the driver's data-parallel steps around a P x D process
// grid (docs/data-parallel.md): every replica takes one partition, and the
// replicas agree on the outcome of a checkpoint load.
#pragma once

#include <cstdint>
#include <vector>

#include "pipetrain/runtime/grid.hpp"

namespace pt {

// Each pipeline profiled itself, but the replicas of a stage must hold the
// same units (their gradient buckets match), so every replica takes replica
// 0's `counts` (units per stage): returned. Collective over the grid; at
// D = 1 `counts` as given.
std::vector<int64_t> share_partition(const ProcessGrid& grid, std::vector<int64_t> counts);

// Every replica's pipeline learned the outcome `ok` of a checkpoint load; a
// replica that failed where the others did not fails them all (InputError).
// Collective over the grid's world; nothing at D = 1.
void agree_across_replicas(const ProcessGrid& grid, bool ok);

}  // namespace pt
