// Turns the model section of a config into the training-step graph.
#pragma once

#include <memory>

#include "config/config.h"
#include "graph/data_parallel.h"
#include "graph/ir.h"
#include "runtime/sim/cost_model.h"

namespace placer::cli {

// Builds and validates the configured model. Throws config::ConfigError (pointing at
// model.builtin) for unknown models and graph::GraphError for inconsistent sizes.
// With model.replicas = R > 1 this is the replicated training step (replica r's ops are named
// "r<r>/<op>"); BuildSingleModel always builds one replica on the whole batch.
graph::Graph BuildModel(const config::Config& config);
graph::Graph BuildSingleModel(const config::Config& config);

// The replicated training step of model.replicas replicas on even shards of the batch.
graph::DataParallelGraph BuildReplicated(const config::Config& config, int replicas);

// The configured model's forward ops and loss for any batch (data-parallel shards, evaluation).
graph::ForwardBuilder ForwardBuilderFor(const config::Config& config);

// The simulator's cost model: the profile named by simulation.profile, or the roofline model.
// A bad profile is an InputError naming the file.
std::unique_ptr<sim::CostModel> CostModelFor(const config::Config& config);

}  // namespace placer::cli
