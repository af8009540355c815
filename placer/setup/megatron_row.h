// The Megatron-style baseline's row of `placer compare` (placer/baselines/megatron.h): what a
// practitioner configures by hand for a transformer, tensor-parallel size T within a host times
// data-parallel size R over the rest, at the shape with the shortest simulated step, and every
// shape it tried, for the log.
#pragma once

#include <string>
#include <vector>

#include "placer/report.h"
#include "placer/setup/search_setup.h"

namespace placer::setup {

struct MegatronRow {
  search::ReportRow row;
  std::vector<std::string> log;  // one line per shape tried or left out
};

// Simulated with the setup's cost model, hosts of `simulation.gpus_per_host` devices (0: one
// host). A shape whose step is over 250k ops, whose R does not divide the batch or whose model
// has no linear layer pair that splits T ways is left out, and the log says why.
MegatronRow MegatronRowFor(const SearchSetup& setup);

}  // namespace placer::setup
