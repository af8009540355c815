#include "cli/compare_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <iostream>

#include "cli/model_factory.h"
#include "cli/search_command.h"
#include "graph/data_parallel.h"
#include "graph/grouping.h"
#include "placer/baselines/baselines.h"
#include "placer/report.h"
#include "placer/search.h"
#include "runtime/device.h"
#include "runtime/sim/simulated_evaluator.h"

namespace placer::cli {
namespace {

search::ReportRow RowOf(std::string method, const runtime::EvaluationResult& r,
                        double seconds_to_produce) {
  search::ReportRow row{std::move(method), r.valid, r.invalid_reason, r.step_seconds,
                        seconds_to_produce, {}};
  for (const runtime::DeviceStats& d : r.devices) row.peak_memory_bytes.push_back(d.peak_memory_bytes);
  return row;
}

search::ReportRow InvalidRow(std::string method, std::string reason, double seconds_to_produce) {
  return {std::move(method), false, std::move(reason), 0, seconds_to_produce, {}};
}

}  // namespace

int RunCompareCommand(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  graph::Graph model = BuildModel(config);
  graph::Graph single = BuildSingleModel(config);
  runtime::DeviceSet devices = runtime::ResolveDevices(config);
  const std::vector<std::string> names = runtime::DeviceNames(devices);
  std::unique_ptr<sim::CostModel> costs = CostModelFor(config);
  std::unique_ptr<runtime::Evaluator> evaluator = MakeEvaluator(config, model, devices, *costs);
  std::unique_ptr<runtime::Evaluator> single_evaluator =
      MakeEvaluator(config, single, devices, *costs);
  graph::Grouping grouping = graph::OpPerGroup(model);
  search::ComparisonReport report;
  report.model = config.model.builtin +
                 (config.model.replicas > 1 ? fmt::format(" x {} replicas", config.model.replicas)
                                            : "");
  report.devices = names;
  report.evaluator = evaluator->name();
  report.lower_bound_seconds =
      sim::SimulatedEvaluator(model, devices, *costs).lower_bound().seconds;
  std::cout << fmt::format("placer compare: {} on {}, {} evaluator\n", report.model,
                           fmt::join(names, ", "), report.evaluator);

  // Placements that need no search.
  for (size_t d = 0; d < names.size(); ++d) {
    report.rows.push_back(RowOf(
        "single device " + names[d],
        single_evaluator->Evaluate(graph::Placement::AllOn(single, names, static_cast<int>(d))), 0));
  }
  if (names.size() > 1) {
    graph::DataParallelGraph dp = graph::BuildDataParallel(
        ForwardBuilderFor(config), config.model.batch_size, names,
        std::vector<double>(names.size(), 1.0), config.model.learning_rate);
    std::unique_ptr<runtime::Evaluator> dp_evaluator = MakeEvaluator(config, dp.graph, devices, *costs);
    report.rows.push_back(RowOf(fmt::format("data parallel ({})", fmt::join(dp.shard_sizes, "/")),
                                dp_evaluator->Evaluate(dp.placement), 0));
  }
  std::filesystem::path expert =
      config.source.parent_path() / "experts" / (config.model.builtin + ".yaml");
  if (std::filesystem::exists(expert)) {
    try {
      report.rows.push_back(RowOf("expert (" + expert.filename().string() + ")",
                                  single_evaluator->Evaluate(
                                      graph::ReadPlacementYaml(expert, single, names)),
                                  0));
    } catch (const graph::PlacementError& error) {
      report.rows.push_back(InvalidRow("expert", error.what(), 0));
    }
  }
  // Algorithms, on the model as configured (replicas included).
  baselines::PlacementProblem problem{&model, &grouping, devices, costs.get()};
  for (const std::string& name : baselines::BaselineNames()) {
    std::cout << "  " << name << "..." << std::flush;
    try {
      baselines::BaselineResult result = baselines::RunBaseline(name, problem);
      report.rows.push_back(
          RowOf(result.algorithm, evaluator->Evaluate(result.placement), result.seconds_to_place));
    } catch (const baselines::BaselineError& error) {
      report.rows.push_back(InvalidRow(name, error.what(), 0));
    }
  }
  std::cout << '\n';

  // The learned search: continued from output.directory when a run is there (a finished one
  // returns at once), otherwise run now.
  search::SearchOptions options = SearchOptionsFor(config, model, grouping, names);
  options.resume = std::filesystem::exists(config.output.directory / "checkpoint.pt");
  options.progress = true;
  search::SearchOutcome learned;
  try {
    learned = search::RunSearch(model, grouping, *evaluator, names, options);
  } catch (const std::runtime_error& error) {
    throw InputError(error.what());
  }
  report.learned_curve = learned.curve;
  if (learned.found_valid) {
    report.rows.push_back(RowOf(fmt::format("learned ({} evaluations)", learned.evaluations),
                                evaluator->Evaluate(learned.best), learned.wall_seconds));
  } else {
    report.rows.push_back(InvalidRow("learned", "no valid placement found", learned.wall_seconds));
  }
  search::SearchOutcome random = search::RandomSearch(model, grouping, *evaluator, names,
                                                      std::max(1, learned.evaluations),
                                                      config.search.seed);
  report.random_curve = random.curve;
  if (random.found_valid) {
    report.rows.push_back(RowOf(fmt::format("random search ({} evaluations)", random.evaluations),
                                evaluator->Evaluate(random.best), random.wall_seconds));
  } else {
    report.rows.push_back(InvalidRow("random search", "no valid placement found", random.wall_seconds));
  }

  std::cout << '\n' << search::ReportTable(report);
  graph::WriteFileAtomically(config.output.directory / "report.md", search::ReportMarkdown(report));
  graph::WriteFileAtomically(config.output.directory / "report.html", search::ReportHtml(report));
  std::cout << "\nwritten: " << (config.output.directory / "report.md").string() << ", "
            << (config.output.directory / "report.html").string() << '\n';
  return kExitOk;
}

}  // namespace placer::cli
