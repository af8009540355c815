#include "placer/setup/megatron_row.h"

#include <fmt/format.h>

#include <exception>

#include "placer/baselines/megatron.h"
#include "placer/baselines/problem.h"

namespace placer::setup {

MegatronRow MegatronRowFor(const SearchSetup& setup) {
  const config::Config& config = setup.config;
  MegatronRow out;
  search::ReportRow& row = out.row;
  row.kind = search::ReportRow::Kind::kBaseline;
  row.method = "Megatron-style (tensor x pipeline x data parallel)";
  // As the pipeline row's: the shapes' steps are built and simulated whole, and a bound on their
  // size keeps the row to seconds on the largest models.
  constexpr int64_t kMaxOps = 250'000;
  baselines::Stopwatch clock;
  baselines::MegatronBaselineResult result;
  try {
    result = baselines::MegatronBaseline(
        setup.base(), setup.steps->forward(), config.model.batch_size, config.model.learning_rate,
        setup.devices, *setup.costs.front(), config.simulation.gpus_per_host, kMaxOps, &out.log);
  } catch (const std::exception& e) {
    row.invalid_reason = e.what();
    return out;
  }
  row.seconds_to_produce = clock.Seconds();
  row.evaluations = static_cast<int>(result.trials.size());
  if (result.best < 0) {
    row.invalid_reason = result.trials.empty() ? "no tensor x pipeline x data parallel shape to try"
                                               : result.trials.front().result.invalid_reason;
    return out;
  }
  const baselines::MegatronTrial& best = result.trials[static_cast<size_t>(result.best)];
  row.valid = true;
  row.method = best.pipeline_stages == 1
                   ? fmt::format("Megatron-style (TP {} x DP {})", best.tensor_ways, best.replicas)
                   : fmt::format("Megatron-style (TP {} x PP {} x DP {}, M = {})", best.tensor_ways,
                                 best.pipeline_stages, best.replicas, best.micro_batches);
  row.step_seconds = best.result.step_seconds;
  for (const graph::DeviceStats& d : best.result.devices) {
    row.peak_memory_bytes.push_back(d.peak_memory_bytes);
  }
  const bool pipelined = best.pipeline_stages > 1;
  const std::string stages =
      pipelined ? fmt::format("; {} pipeline stages of about equal work, {} micro-batches, 1f1b",
                              best.pipeline_stages, best.micro_batches)
                : "";
  const std::string replicas =
      best.replicas == 1 ? "" : fmt::format("; {} data-parallel replicas", best.replicas);
  row.placement =
      best.tensor_ways == 1
          ? fmt::format("no layer split (data parallelism over {} devices)", best.replicas)
          : fmt::format(
                "attention and MLP blocks split {} ways ({} row-parallel sums), the rest on each "
                "{}'s first device{}{}",
                best.tensor_ways, best.partial_sums, pipelined ? "stage" : "replica", stages,
                replicas);
  return out;
}

}  // namespace placer::setup
