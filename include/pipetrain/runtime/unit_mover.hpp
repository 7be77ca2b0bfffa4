// unit_mover.hpp: partition units moved between the ranks of a running
// pipeline (dynamic rebalancing, docs/rebalance.md).
//
// A unit that changes stage is sent by its old rank and received by its new
// one, tensor by tensor (param_state: value, then the optimizer state), all
// posted at once and each waited for with a timed wait naming the move.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "pipetrain/model/model.hpp"

namespace pt {

struct MoveTotals {
  int64_t tensors_sent = 0;
  double bytes_sent = 0.0;
};

// Collective over `comm` (one stage per rank): the units of `leaving` (what
// rebuild_stage left of this rank's old stage) that change stage from
// `from` to `to` are sent, those arriving in `next` received (units that
// stay are in `next` already). `units`: the model's partition units.
MoveTotals exchange_units(StageModel& leaving, StageModel& next, const std::vector<int64_t>& from,
                          const std::vector<int64_t>& to, int64_t units, MPI_Comm comm);

// "[4, 12]": units per stage, for messages.
std::string counts_text(const std::vector<int64_t>& counts);

}  // namespace pt
