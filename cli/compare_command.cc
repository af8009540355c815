#include "cli/compare_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/model_factory.h"
#include "cli/search_command.h"
#include "cli/side_by_side.h"
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
  search::ReportRow row{std::move(method),  r.valid, r.invalid_reason, r.step_seconds,
                        seconds_to_produce, {}};
  for (const runtime::DeviceStats& d : r.devices)
    row.peak_memory_bytes.push_back(d.peak_memory_bytes);
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
  graph::Grouping grouping = graph::MakeGrouping(model, GroupingOptionsFor(config, model, names));
  search::ComparisonReport report;
  report.model =
      config.model.name() +
      (config.model.replicas > 1 ? fmt::format(" x {} replicas", config.model.replicas) : "");
  report.devices = names;
  report.evaluator = evaluator->name();
  report.lower_bound_seconds =
      sim::SimulatedEvaluator(model, devices, *costs).lower_bound().seconds;
  std::cout << fmt::format("placer compare: {} ({} groups: {}) on {}, {} evaluator\n", report.model,
                           grouping.num_groups(), GroupingName(config), fmt::join(names, ", "),
                           report.evaluator);

  // Every placement is produced first, then all are evaluated side by side.
  struct Pending {
    std::string method;
    double seconds_to_produce = 0;
    std::optional<size_t> index;  // into the side-by-side results; none when production failed
    std::string error;
  };
  std::vector<Pending> pending;
  SideBySide side_by_side;
  for (size_t d = 0; d < names.size(); ++d) {
    pending.push_back({"single device " + names[d], 0,
                       side_by_side.Add(*single_evaluator, graph::Placement::AllOn(
                                                               single, names, static_cast<int>(d))),
                       ""});
  }
  std::unique_ptr<runtime::Evaluator> dp_evaluator;
  std::optional<graph::DataParallelGraph> dp;
  if (names.size() > 1) {
    dp = BuildDataParallelOver(config, names);
    dp_evaluator = MakeEvaluator(config, dp->graph, devices, *costs);
    pending.push_back({fmt::format("data parallel ({})", fmt::join(dp->shard_sizes, "/")), 0,
                       side_by_side.Add(*dp_evaluator, dp->placement), ""});
  }
  const std::filesystem::path expert = ExpertFile(config);
  if (!expert.empty()) {
    try {
      pending.push_back(
          {"expert (" + expert.filename().string() + ")", 0,
           side_by_side.Add(*single_evaluator,
                            graph::ReadPlacementYaml(expert, single, names, ExpertFacts(config))),
           ""});
    } catch (const graph::PlacementError& error) {
      pending.push_back({"expert", 0, std::nullopt, error.what()});
    }
  }
  // Algorithms, on the model as configured (replicas included).
  baselines::PlacementProblem problem{&model, &grouping, devices, costs.get()};
  for (const std::string& name : baselines::BaselineNames()) {
    try {
      baselines::BaselineResult result = baselines::RunBaseline(name, problem);
      pending.push_back({result.algorithm, result.seconds_to_place,
                         side_by_side.Add(*evaluator, result.placement), ""});
    } catch (const baselines::BaselineError& error) {
      pending.push_back({name, 0, std::nullopt, error.what()});
    }
  }

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
  pending.push_back({fmt::format("learned ({} evaluations)", learned.evaluations),
                     learned.wall_seconds,
                     learned.found_valid ? std::optional(side_by_side.Add(*evaluator, learned.best))
                                         : std::nullopt,
                     "no valid placement found"});
  search::SearchOutcome random = search::RandomSearch(
      model, grouping, *evaluator, names, std::max(1, learned.evaluations), config.search.seed);
  report.random_curve = random.curve;
  pending.push_back(
      {fmt::format("random search ({} evaluations)", random.evaluations), random.wall_seconds,
       random.found_valid ? std::optional(side_by_side.Add(*evaluator, random.best)) : std::nullopt,
       "no valid placement found"});

  const int rounds = RoundsFor(*evaluator);
  std::cout << fmt::format("evaluating {} placements side by side, {} round{}\n", pending.size(),
                           rounds, rounds == 1 ? "" : "s");
  std::vector<runtime::EvaluationResult> results = side_by_side.Run(rounds);
  for (const Pending& p : pending) {
    report.rows.push_back(p.index ? RowOf(p.method, results[*p.index], p.seconds_to_produce)
                                  : InvalidRow(p.method, p.error, p.seconds_to_produce));
  }

  std::cout << '\n' << search::ReportTable(report);
  graph::WriteFileAtomically(config.output.directory / "report.md", search::ReportMarkdown(report));
  graph::WriteFileAtomically(config.output.directory / "report.html", search::ReportHtml(report));
  std::cout << "\nwritten: " << (config.output.directory / "report.md").string() << ", "
            << (config.output.directory / "report.html").string() << '\n';
  return kExitOk;
}

}  // namespace placer::cli
