// trace_io.hpp: writing <output.dir>/trace.h5 and reading it back (layout
// in docs/outputs.md).
#pragma once

#include <string>
#include <vector>

#include "pipetrain/schedule/schedule.hpp"
#include "pipetrain/runtime/trace.hpp"

namespace pt {

// Rank 0: every rank's events (in rank order, on rank 0's clock) as one
// compound, chunked dataset per rank under /events, with the resolved deck,
// the schedule and the clock-offset estimates as attributes. Written to a
// temporary name and renamed. `schedule` ran from step
// `schedule_first_step` on (pipeline.schedule_times = "measured" places it
// after the first steps); the steps before ran its unit-time placement.
void write_trace_file(const std::string& path, const std::string& resolved_deck,
                      const Schedule& schedule,
                      const std::vector<std::vector<TraceEvent>>& events_per_rank,
                      const ClockAlignment& clocks, int64_t schedule_first_step = 0);

// Every rank's events and the run's deck, as written above. One InputError
// naming the file and what was expected when it is not such a trace.
RunTrace read_trace_file(const std::string& path);

}  // namespace pt
