// Turns the model section of a config into the training-step graph.
#pragma once

#include "config/config.h"
#include "graph/data_parallel.h"
#include "graph/ir.h"

namespace placer::cli {

// Builds and validates the configured model. Throws config::ConfigError (pointing at
// model.builtin) for unknown models and graph::GraphError for inconsistent sizes.
graph::Graph BuildModel(const config::Config& config);

// The configured model's forward ops and loss for any batch (data-parallel shards, evaluation).
graph::ForwardBuilder ForwardBuilderFor(const config::Config& config);

}  // namespace placer::cli
