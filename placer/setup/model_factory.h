// Turns the model section of a config into the training-step graph.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/evaluator.h"
#include "graph/ir.h"
#include "placer/config/config.h"
#include "runtime/measured_evaluator.h"
#include "runtime/sim/cost_model.h"

namespace placer::setup {

// Builds and validates the configured model's training step: one replica on the whole batch (the
// steps of other shapes are StepCache's, step_cache.h). Throws config::ConfigError (pointing at
// model.builtin) for unknown models and graph::GraphError for inconsistent sizes.
graph::Graph BuildSingleModel(const config::Config& config);

// Whether the configured model can be built with `batch` rows (as one data-parallel shard or
// replica): nullopt when it can, otherwise why not. Built-in models take any batch; an ONNX
// export whose batch is baked into its shape constants takes only its own, and the reason is then
// the graph::BatchError message (naming the node, and how to export with a dynamic batch axis),
// which StepCache::Get throws for a step of such shards. Costs one load of the file for an ONNX
// model.
std::optional<std::string> BatchProblem(const config::Config& config, int64_t batch);

// What an expert placement file (configs/experts/<builtin>.yaml) may condition its variants on,
// besides the device count: the layer count of the recurrent and transformer models.
std::map<std::string, std::string> ExpertFacts(const config::Config& config);
// The hand-crafted placement shipped for the configured built-in model:
// <config's folder>/experts/<model>.yaml. Empty when there is none.
std::filesystem::path ExpertFile(const config::Config& config);

// How the measured evaluator runs, from the measurement section.
runtime::MeasurementOptions MeasurementOptionsFor(const config::Config& config);

// The Evaluator of `kind` (a row of graph::kEvaluatorKinds) for the training step `step` on
// `devices`: the one place that maps a kind to the code that judges, for the search's judge and
// `placer worker`'s. `costs` is called only by a kind that simulates; the evaluator refers to
// what it returns for as long as it lives.
std::unique_ptr<graph::Evaluator> MakeEvaluator(
    graph::EvaluatorKind kind, const graph::Graph& step, const graph::DeviceSet& devices,
    const config::Config& config, const std::function<const sim::CostModel&()>& costs);

// The configured model's forward ops and loss for any batch (data-parallel shards, evaluation).
graph::ForwardBuilder ForwardBuilderFor(const config::Config& config);

// The simulator's cost model: the profile named by simulation.profile, or the roofline model.
// A bad profile is an InputError naming the file.
std::unique_ptr<sim::CostModel> CostModelFor(const config::Config& config);

// What a simulation should say of `costs` (CostModelFor's) beyond its name, for `graph` on
// `devices`: without a profile, that the roofline model is not calibrated to this machine (and
// how far off it was on one) and how to calibrate it; with one, how many of the graph's ops it
// has no timing for (the roofline stands in for those). `config_path` and `data_parallel` make
// the suggested `placer profile` command line. Empty when there is nothing to say.
std::vector<std::string> CostModelNotes(const config::Config& config, const sim::CostModel& costs,
                                        const graph::Graph& graph, const graph::DeviceSet& devices,
                                        const std::string& config_path, bool data_parallel);

}  // namespace placer::setup
