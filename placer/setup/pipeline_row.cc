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

PipelineRow PipelineRowFor(const SearchSetup& setup, const std::filesystem::path& directory) {
  const config::Config& config = setup.config;
  const int64_t batch = config.model.batch_size;
  PipelineRow out;
  std::vector<int> counts;
  // M copies of the step are built and simulated per count: a bound on their size keeps the row
  // to seconds on the largest models (NMT with 8 layers: 52k ops, so M <= 4). It is the search's
  // bound of before (the search's own is lower: it builds each M in its planning time).
  constexpr int64_t kMaxOps = 250'000;
  for (int m = 1; m <= 32; m *= 2) {
    if (batch % m != 0) continue;
    if (m > 1 && int64_t{m} * setup.base().num_ops() > kMaxOps) {
      out.log.push_back(fmt::format("pipeline: M = {} left out: {} x {} ops is over {}", m, m,
                                    setup.base().num_ops(), kMaxOps));
      continue;
    }
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
  try {
    result = baselines::PipelineBaseline(setup.base(), ForwardBuilderFor(config), batch,
                                         config.model.learning_rate, setup.devices,
                                         *setup.costs.front(), counts);
  } catch (const std::exception& e) {
    row.invalid_reason = e.what();
    return out;
  }
  row.seconds_to_produce = clock.Seconds();
  int used = 0;
  for (size_t s = 0; s < result.stages.stage_end.size(); ++s) {
    const int begin = s == 0 ? 0 : result.stages.stage_end[s - 1];
    if (result.stages.stage_end[s] > begin) ++used;
  }
  for (const baselines::PipelineTrial& t : result.trials) {
    out.log.push_back(fmt::format(
        "pipeline: {} stages, M = {}, {}: {}", used, t.micro_batches, graph::ToString(t.schedule),
        t.result.valid ? fmt::format("{:.3f} ms", t.result.step_seconds * 1e3)
                       : t.result.invalid_reason));
  }
  row.evaluations = static_cast<int>(result.trials.size());
  if (result.best < 0) {
    row.invalid_reason = result.trials.empty() ? "no micro-batch count to try"
                                               : result.trials.front().result.invalid_reason;
    return out;
  }
  const baselines::PipelineTrial& best = result.trials[static_cast<size_t>(result.best)];
  row.valid = true;
  row.method =
      fmt::format("pipeline (M = {}, {})", best.micro_batches, graph::ToString(best.schedule));
  row.step_seconds = best.result.step_seconds;
  for (const graph::DeviceStats& d : best.result.devices) {
    row.peak_memory_bytes.push_back(d.peak_memory_bytes);
  }
  row.placement =
      fmt::format("{} contiguous stages, {} micro-batches of {} rows, {}", used, best.micro_batches,
                  batch / best.micro_batches, graph::ToString(best.schedule));

  // The picture: the fastest trial's simulated schedule, and each group on its stage's device.
  const graph::MicroBatchedGraph mb = graph::BuildMicroBatched(
      ForwardBuilderFor(config), batch, best.micro_batches, config.model.learning_rate);
  const sim::Simulator simulator(mb.graph, setup.devices, *setup.costs.front());
  sim::SimulationResult traced = simulator.Simulate(
      graph::PlaceMicroBatches(mb, setup.base(), result.stages.placement, best.schedule),
      /*record_trace=*/true);
  search::PlacementPicture picture{.method = row.method,
                                   .description = row.placement,
                                   .devices = setup.names,
                                   .step_seconds = traced.step_seconds,
                                   .source = "simulated"};
  const std::string file = "trace_pipeline.simulated.json";
  runtime::WriteChromeTrace(directory / file, traced.trace, "placer compare: " + row.method);
  picture.trace_files.push_back(file);
  picture.schedule = std::move(traced.trace);
  for (const std::vector<graph::OpId>& members : setup.grouping.members) {
    if (members.empty()) continue;
    picture.layers.push_back(
        {.label = setup.base().op(members.front()).name,
         .ops = static_cast<int>(members.size()),
         .devices = {result.stages.placement.device_of_op[static_cast<size_t>(members.front())]}});
  }
  out.picture = std::move(picture);
  return out;
}

}  // namespace placer::setup
