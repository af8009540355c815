#include "placer/setup/report_pictures.h"

#include <algorithm>

#include "placer/setup/model_factory.h"
#include "runtime/measured_evaluator.h"
#include "runtime/sim/simulated_evaluator.h"
#include "runtime/trace.h"

namespace placer::setup {
namespace {

// The groups in the model's order (each by its first op's topological position), each with the
// devices its option spreads its replicas over.
std::vector<search::LayerCell> LayersOf(const SearchSetup& setup,
                                        const search::Candidate& candidate) {
  const graph::Graph& base = setup.base();
  std::vector<int> rank(static_cast<size_t>(base.num_ops()));
  int position = 0;
  for (graph::OpId op : base.TopologicalOrder()) rank[static_cast<size_t>(op)] = position++;
  auto first_rank = [&](int group) {
    int least = static_cast<int>(rank.size());
    for (graph::OpId op : setup.grouping.members[static_cast<size_t>(group)]) {
      least = std::min(least, rank[static_cast<size_t>(op)]);
    }
    return least;
  };
  std::vector<int> groups(static_cast<size_t>(setup.grouping.num_groups()));
  for (size_t g = 0; g < groups.size(); ++g) groups[g] = static_cast<int>(g);
  std::stable_sort(groups.begin(), groups.end(),
                   [&](int a, int b) { return first_rank(a) < first_rank(b); });
  const search::ActionSpace& space = setup.simulated->space();
  std::vector<search::LayerCell> layers;
  for (int g : groups) {
    const std::vector<graph::OpId>& members = setup.grouping.members[static_cast<size_t>(g)];
    const search::ParallelOption& option =
        space.options()[static_cast<size_t>(candidate.options[static_cast<size_t>(g)])];
    search::LayerCell cell{.label = members.empty() ? "" : base.op(members.front()).name,
                           .ops = static_cast<int>(members.size())};
    for (int k = 0; k < option.width; ++k) {
      cell.devices.push_back(option.first_device + k * option.stride);
    }
    layers.push_back(std::move(cell));
  }
  return layers;
}

}  // namespace

search::PlacementPicture PictureOf(const SearchSetup& setup, const std::string& method,
                                   const search::Candidate& candidate,
                                   const std::filesystem::path& directory,
                                   const std::string& file_stem) {
  const search::CandidateEvaluator& simulated = *setup.simulated;
  search::PlacementPicture picture{
      .method = method,
      .description = search::Summarise(simulated.space(), candidate, setup.names),
      .devices = setup.names,
      .layers = LayersOf(setup, candidate)};
  const search::ReplicatedModel& model = simulated.model(candidate);
  const graph::Placement placement = simulated.PlacementOf(candidate);
  const auto& simulator =
      dynamic_cast<const sim::SimulatedEvaluator&>(
          simulated.evaluator(candidate.replicas, candidate.micro_batches, candidate.tensor_ways))
          .simulator();
  sim::SimulationResult predicted = simulator.Simulate(placement, /*record_trace=*/true);
  if (predicted.valid) {
    const std::string file = file_stem + ".simulated.json";
    runtime::WriteChromeTrace(directory / file, predicted.trace,
                              "placer compare: " + method + " (simulated)");
    picture.trace_files.push_back(file);
    picture.schedule = std::move(predicted.trace);
    picture.step_seconds = predicted.step_seconds;
    picture.source = setup.measured ? "simulated with the profiled costs" : "simulated";
  } else {
    picture.source = "simulated: invalid: " + predicted.invalid_reason;
  }
  if (setup.measured) {
    runtime::MeasurementOptions options = MeasurementOptionsFor(setup.config);
    options.record_trace = true;
    runtime::MeasuredEvaluator measured(model.graph, setup.devices, options);
    graph::EvaluationResult ran = measured.Evaluate(placement);
    if (ran.valid) {
      const std::string file = file_stem + ".json";
      runtime::WriteChromeTrace(directory / file, ran.trace, "placer compare: " + method);
      picture.trace_files.insert(picture.trace_files.begin(), file);
      picture.schedule = std::move(ran.trace);
      picture.step_seconds = ran.step_seconds;
      picture.source = "measured: the median step of a run of its own, its last timed step drawn";
    } else {
      picture.source += "; its own measured run failed: " + ran.invalid_reason;
    }
  }
  return picture;
}

}  // namespace placer::setup
