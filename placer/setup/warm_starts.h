// The search's warm starts from a set-up's baselines: every single device, data parallelism, the
// expert and every algorithm; each of them scaled out over the replica counts; the pipeline
// baseline's contiguous stages at every micro-batch count and schedule of the space; and every
// tensor-parallel shape of the space with each group's shards on their own devices.
#pragma once

#include "placer/action_space.h"
#include "placer/setup/search_setup.h"

namespace placer::setup {

// Fills `s.baselines`, `s.scaled_out` and `s.pipelined` (with notes on what was skipped and why).
void AddWarmStarts(SearchSetup& s, const search::ActionSpace& space);

}  // namespace placer::setup
