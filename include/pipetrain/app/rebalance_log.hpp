// rebalance_log.hpp: the driver's side of dynamic rebalancing: the check
// after each step, its line in the log and its values in the step's record
// (docs/rebalance.md).
#pragma once

#include <cstdint>

#include "pipetrain/base/deck.hpp"
#include "pipetrain/runtime/trainer.hpp"

namespace pt {

// Collective: Trainer::rebalance_after(step); on rank 0, one line for a
// move, or for a check over the threshold that did not move and why. Sets
// rec.rebalance_ratio and rec.rebalance_predicted_ratio. Returns whether
// units moved (the same on every rank).
bool rebalance_after_step(int rank, const Deck& deck, Trainer& trainer, int64_t step,
                          StepRecord& rec);

}  // namespace pt
