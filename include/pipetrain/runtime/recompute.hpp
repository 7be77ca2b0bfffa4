// recompute.hpp: the runtime's name for the recomputation policies, which
// are defined once, with their parser, in schedule/recompute.hpp (shared
// with the planner).
#pragma once

#include "pipetrain/schedule/recompute.hpp"
