#include "placer/setup/pipeline_row.h"

#include <fmt/format.h>

#include <exception>
#include <optional>

#include "graph/micro_batches.h"
#include "placer/baselines/pipeline.h"
#include "placer/baselines/problem.h"
#include "placer/setup/model_factory.h"
#include "runtime/sim/simulator.h"
#include "runtime/trace.h"

namespace placer::setup {

namespace {

// Stages of `stages` that hold forward ops.
int UsedStages(const baselines::StagePartition& stages) {
  int used = 0;
  for (size_t s = 0; s < stages.stage_end.size(); ++s) {
    const int begin = s == 0 ? 0 : stages.stage_end[s - 1];
    if (stages.stage_end[s] > begin) ++used;
  }
  return used;
}

// The grid's steps that the search built already: of several replicas or micro-batches they are
// the same graphs (graph::BuildReplicatedPipelines and BuildMicroBatched build both), so they are
// simulated where they are, not built a second time beside them (on the NMT a 4-replica step is
// about 300 MB). The one-replica step without micro-batches is not: the grid's names its ops
// "m0/<op>", the search's as the model does.
baselines::BuiltStep SearchStepsOf(const SearchSetup& setup) {
  return [&steps = *setup.steps](int replicas, int micro_batches) -> const graph::Graph* {
    if (replicas == 1 && micro_batches == 1) return nullptr;
    const search::ReplicatedModel* step = steps.Built({replicas, micro_batches});
    return step == nullptr ? nullptr : &step->graph;
  };
}

// "pipeline (M = 4, 1f1b)", "pipeline (2 replicas, M = 4, 1f1b)".
std::string MethodOf(const baselines::PipelineTrial& t) {
  const std::string replicas = t.replicas == 1 ? "" : fmt::format("{} replicas, ", t.replicas);
  return fmt::format("pipeline ({}M = {}, {})", replicas, t.micro_batches,
                     graph::ToString(t.schedule));
}

}  // namespace

PipelineRow PipelineRowFor(const SearchSetup& setup, const std::filesystem::path& directory) {
  const config::Config& config = setup.config;
  const int64_t batch = config.model.batch_size;
  PipelineRow out;
  std::vector<int> counts;
  for (int m = 1; m <= 32; m *= 2) {
    if (batch % m != 0) continue;
    if (std::optional<std::string> problem = BatchProblem(config, batch / m)) {
      out.log.push_back(fmt::format("pipeline: M = {} left out: {}", m, *problem));
      continue;
    }
    counts.push_back(m);
  }
  search::ReportRow& row = out.row;
  row.kind = search::ReportRow::Kind::kBaseline;
  row.method = "pipeline (contiguous stages)";
  baselines::Stopwatch clock;
  baselines::PipelineBaselineResult result;
  // R x M copies of the step are built and simulated per shape: a bound on their size keeps the
  // row to seconds on the largest models (NMT with 8 layers: 52k ops, so R x M <= 4). It is the
  // search's bound of before (the search's own is lower: it builds each shape in its planning
  // time).
  constexpr int64_t kMaxOps = 250'000;
  try {
    result =
        baselines::PipelineBaseline(setup.base(), setup.steps->forward(), batch,
                                    config.model.learning_rate, setup.devices, *setup.costs.front(),
                                    {.micro_batch_counts = counts,
                                     .replica_counts = setup.simulated->space().replica_counts(),
                                     .max_ops = kMaxOps,
                                     .built = SearchStepsOf(setup)},
                                    &out.log);
  } catch (const std::exception& e) {
    row.invalid_reason = e.what();
    return out;
  }
  row.seconds_to_produce = clock.Seconds();
  for (const baselines::PipelineTrial& t : result.trials) {
    const int used = UsedStages(result.StagesFor(t.replicas));
    out.log.push_back(fmt::format("pipeline: {}{} stages, M = {}, {}: {}",
                                  t.replicas == 1 ? "" : fmt::format("{} replicas x ", t.replicas),
                                  used, t.micro_batches, graph::ToString(t.schedule),
                                  t.result.valid
                                      ? fmt::format("{:.3f} ms", t.result.step_seconds * 1e3)
                                      : t.result.invalid_reason));
  }
  row.evaluations = static_cast<int>(result.trials.size());
  if (result.best < 0) {
    row.invalid_reason = result.trials.empty() ? "no micro-batch count to try"
                                               : result.trials.front().result.invalid_reason;
    return out;
  }
  const baselines::PipelineTrial& best = result.trials[static_cast<size_t>(result.best)];
  const int used = UsedStages(result.StagesFor(best.replicas));
  row.valid = true;
  row.method = MethodOf(best);
  row.step_seconds = best.result.step_seconds;
  for (const graph::DeviceStats& d : best.result.devices) {
    row.peak_memory_bytes.push_back(d.peak_memory_bytes);
  }
  const int64_t rows = batch / best.replicas / best.micro_batches;
  const std::string micro_batches =
      best.micro_batches == 1
          ? "no micro-batches"
          : fmt::format("{} micro-batches of {} rows{}, {}", best.micro_batches, rows,
                        best.replicas == 1 ? "" : " each", graph::ToString(best.schedule));
  row.placement =
      best.replicas == 1
          ? fmt::format("{} contiguous stages, {}", used, micro_batches)
          : fmt::format("{} replicas of {} contiguous stages (data parallel between them), {}",
                        best.replicas, used, micro_batches);

  // The picture: the fastest trial's simulated schedule, and each group on its stage's device in
  // every pipeline.
  const baselines::PipelineStep step =
      baselines::BuildPipelineStep(result, best, setup.base(), setup.steps->forward(), batch,
                                   config.model.learning_rate, setup.names, SearchStepsOf(setup));
  const sim::Simulator simulator(*step.graph, setup.devices, *setup.costs.front());
  sim::SimulationResult traced = simulator.Simulate(step.placement, /*record_trace=*/true);
  search::PlacementPicture picture{.method = row.method,
                                   .description = row.placement,
                                   .devices = setup.names,
                                   .step_seconds = traced.step_seconds,
                                   .source = "simulated"};
  const std::string file = "trace_pipeline.simulated.json";
  runtime::WriteChromeTrace(directory / file, traced.trace, "placer compare: " + row.method);
  picture.trace_files.push_back(file);
  picture.schedule = std::move(traced.trace);
  const graph::Placement& stages = result.StagesFor(best.replicas).placement;
  const int stride = static_cast<int>(setup.names.size()) / best.replicas;
  for (const std::vector<graph::OpId>& members : setup.grouping.members) {
    if (members.empty()) continue;
    const int stage = stages.device_of_op[static_cast<size_t>(members.front())];
    std::vector<int> devices;
    for (int r = 0; r < best.replicas; ++r) devices.push_back(stage + r * stride);
    picture.layers.push_back({.label = setup.base().op(members.front()).name,
                              .ops = static_cast<int>(members.size()),
                              .devices = std::move(devices)});
  }
  out.picture = std::move(picture);
  return out;
}

}  // namespace placer::setup
