// `placer search`: the learned placement search on a config, with its final comparison.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "config/config.h"
#include "graph/grouping.h"
#include "placer/search.h"
#include "runtime/device.h"
#include "runtime/evaluator.h"
#include "runtime/sim/cost_model.h"

namespace placer::cli {

int RunSearchCommand(const Commands& commands);

// The configured evaluator (measured, or simulated with `costs`, which must outlive it).
std::unique_ptr<runtime::Evaluator> MakeEvaluator(const config::Config& config,
                                                  const graph::Graph& graph,
                                                  const runtime::DeviceSet& devices,
                                                  const sim::CostModel& costs);

// The groups the policy places, as search.grouping and search.max_groups say, and their name in
// messages and checkpoints ("coarsen, max_groups 256"). With a shipped expert placement for the
// model (read over `devices`), coarsening keeps its device classes apart while it can.
graph::GroupingOptions GroupingOptionsFor(const config::Config& config, const graph::Graph& graph,
                                          const std::vector<std::string>& devices);
std::string GroupingName(const config::Config& config);

// Search settings from the config, with warm starts (every device alone, and data parallelism
// when the model is replicated); the caller sets resume, progress and the stop flag.
search::SearchOptions SearchOptionsFor(const config::Config& config, const graph::Graph& graph,
                                       const graph::Grouping& grouping,
                                       const std::vector<std::string>& names);

}  // namespace placer::cli
