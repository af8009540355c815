#include "cli/search_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <csignal>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "cli/model_factory.h"
#include "cli/side_by_side.h"
#include "graph/data_parallel.h"
#include "graph/grouping.h"
#include "graph/placement.h"
#include "placer/search.h"
#include "runtime/device.h"
#include "runtime/measured_evaluator.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulated_evaluator.h"

namespace placer::cli {
namespace {

std::atomic<bool> g_stop_requested{false};
std::atomic<int> g_signal{0};

// First SIGINT/SIGTERM: finish the current policy step, checkpoint, stop. A second one kills.
void OnSignal(int signal) {
  g_signal = signal;
  g_stop_requested = true;
  std::signal(signal, SIG_DFL);
}

}  // namespace

std::unique_ptr<runtime::Evaluator> MakeEvaluator(const config::Config& config,
                                                  const graph::Graph& graph,
                                                  const runtime::DeviceSet& devices,
                                                  const sim::CostModel& costs) {
  if (config.search.evaluator == "simulated") {
    return std::make_unique<sim::SimulatedEvaluator>(graph, devices, costs);
  }
  return std::make_unique<runtime::MeasuredEvaluator>(graph, devices,
                                                      MeasurementOptionsFor(config));
}

namespace {

struct Row {
  std::string method;
  runtime::EvaluationResult result;
};

std::string SummaryTable(const std::vector<Row>& rows, double reference_seconds) {
  std::ostringstream out;
  out << fmt::format("| {:<34} | {:>12} | {:>22} |\n", "placement", "step time",
                     "speed-up vs best single");
  out << fmt::format("|{:-<36}|{:->14}|{:->24}|\n", "", ":", ":");
  for (const Row& row : rows) {
    if (row.result.valid) {
      out << fmt::format("| {:<34} | {:>9.3f} ms | {:>21.3f}x |\n", row.method,
                         row.result.step_seconds * 1e3,
                         reference_seconds / row.result.step_seconds);
    } else {
      out << fmt::format("| {:<34} | {:>12} | {:>22} |\n", row.method, "invalid",
                         row.result.invalid_reason.substr(0, 22));
    }
  }
  return out.str();
}

}  // namespace

graph::GroupingOptions GroupingOptionsFor(const config::Config& config, const graph::Graph& graph,
                                          const std::vector<std::string>& devices) {
  std::optional<graph::GroupingMethod> method = graph::ParseGroupingMethod(config.search.grouping);
  if (!method) {  // the config loader accepts only known names
    throw InputError(fmt::format("unknown search.grouping '{}'", config.search.grouping));
  }
  graph::GroupingOptions options{*method, config.search.max_groups, {}};
  // Coarsening keeps the shipped expert placement expressible over the groups (the search starts
  // from it), by merging only ops the expert puts on one device while that is enough.
  if (const std::filesystem::path expert = ExpertFile(config);
      !expert.empty() && config.model.replicas == 1 && *method == graph::GroupingMethod::kCoarsen) {
    try {
      options.keep_apart =
          graph::ReadPlacementYaml(expert, graph, devices, ExpertFacts(config)).device_of_op;
    } catch (const graph::PlacementError&) {
    }
  }
  return options;
}

std::string GroupingName(const config::Config& config) {
  return config.search.grouping == "coarsen"
             ? fmt::format("coarsen, max_groups {}", config.search.max_groups)
             : config.search.grouping;
}

search::SearchOptions SearchOptionsFor(const config::Config& config, const graph::Graph& graph,
                                       const graph::Grouping& grouping,
                                       const std::vector<std::string>& names) {
  const config::SearchConfig& s = config.search;
  search::SearchOptions options;
  options.policy_steps = s.policy_steps;
  options.max_evaluations = s.max_evaluations;
  options.max_wall_seconds = s.max_wall_seconds;
  options.seed = s.seed;
  options.checkpoint_every = s.checkpoint_every;
  options.failing_step_seconds = s.failing_step_seconds;
  options.cache = s.cache;
  options.policy.hidden_size = s.hidden_size;
  options.policy.temperature = s.temperature;
  options.policy.tanh_clip = s.tanh_clip;
  options.reinforce.learning_rate = s.learning_rate;
  options.reinforce.entropy_weight = s.entropy_weight;
  options.reinforce.baseline_decay = s.baseline_decay;
  options.reinforce.samples_per_step = s.samples_per_step;
  options.run_dir = config.output.directory;
  options.model_name = config.model.name();
  options.grouping_name = GroupingName(config);
  // Start from the best of the obvious placements: every op on one device, (with replicas)
  // replica r on device r mod D, which is data parallelism, and the expert's placement.
  for (size_t d = 0; d < names.size(); ++d) {
    options.warm_start.push_back(
        std::vector<int>(static_cast<size_t>(grouping.num_groups()), static_cast<int>(d)));
  }
  if (config.model.replicas > 1) {
    // Groups hold one replica's ops as long as there are at least as many groups as replicas
    // (replicas share no forward op, and coarsening merges only connected groups then).
    std::vector<int> by_replica;
    for (const auto& members : grouping.members) {
      const std::string& name = graph.op(members.front()).name;  // "r<replica>/<op>"
      by_replica.push_back(std::stoi(name.substr(1, name.find('/') - 1)) %
                           static_cast<int>(names.size()));
    }
    options.warm_start.push_back(std::move(by_replica));
  }
  // And from the expert's hand-crafted placement, group by group, when one is shipped for this
  // model (it names the ops of one replica). A file that does not fit is `compare`'s to report.
  if (const std::filesystem::path expert = ExpertFile(config);
      !expert.empty() && config.model.replicas == 1) {
    try {
      options.warm_start.push_back(graph::GroupDevices(
          graph, grouping, graph::ReadPlacementYaml(expert, graph, names, ExpertFacts(config))));
    } catch (const graph::PlacementError&) {
    }
  }
  return options;
}

int RunSearchCommand(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  graph::Graph graph = BuildModel(config);
  runtime::DeviceSet devices = runtime::ResolveDevices(config);
  const std::vector<std::string> names = runtime::DeviceNames(devices);
  graph::Grouping grouping = graph::MakeGrouping(graph, GroupingOptionsFor(config, graph, names));
  std::unique_ptr<sim::CostModel> costs = CostModelFor(config);
  std::unique_ptr<runtime::Evaluator> evaluator = MakeEvaluator(config, graph, devices, *costs);

  search::SearchOptions options = SearchOptionsFor(config, graph, grouping, names);
  options.resume = c.resume;
  options.progress = true;
  options.stop_requested = &g_stop_requested;
  const config::SearchConfig& s = config.search;

  std::cout << fmt::format(
      "placer search: {}{} ({} groups: {}), devices {}, {} evaluator; budget {} policy steps x {} "
      "samples, {} evaluations, {:.0f} s; outputs in {}{}\n",
      config.model.name(),
      config.model.replicas > 1 ? fmt::format(" x {} replicas", config.model.replicas) : "",
      grouping.num_groups(), GroupingName(config), fmt::join(names, ", "), evaluator->name(),
      s.policy_steps, s.samples_per_step, s.max_evaluations, s.max_wall_seconds,
      config.output.directory.string(), c.resume ? " (resuming)" : "");
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  search::SearchOutcome outcome;
  try {
    outcome = search::RunSearch(graph, grouping, *evaluator, names, options);
  } catch (const std::runtime_error& error) {
    throw InputError(error.what());  // an unusable run directory or checkpoint
  }
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  if (outcome.interrupted) {
    std::cout << fmt::format(
        "interrupted after step {} ({} evaluations); checkpoint written. "
        "Continue with: placer search --config {} --resume\n",
        outcome.steps, outcome.evaluations, c.config_path);
    return 128 + g_signal.load();
  }
  std::cout << fmt::format("search done: {} policy steps, {} evaluations, {:.1f} s\n",
                           outcome.steps, outcome.evaluations, outcome.wall_seconds);

  // The comparison: every row evaluated now, side by side, by the same kind of evaluator.
  // Baselines run on the plain model: one replica on the whole batch.
  graph::Graph single = BuildSingleModel(config);
  std::unique_ptr<runtime::Evaluator> single_evaluator =
      MakeEvaluator(config, single, devices, *costs);
  std::optional<graph::DataParallelGraph> dp;
  std::unique_ptr<runtime::Evaluator> dp_evaluator;
  SideBySide side_by_side;
  std::vector<std::string> methods;
  for (size_t k = 0; k < outcome.top_candidates.size(); ++k) {
    side_by_side.Add(*evaluator,
                     graph::ToPlacement(graph, grouping, outcome.top_candidates[k], names));
    methods.push_back(fmt::format("learned, candidate {}", k + 1));
  }
  for (size_t d = 0; d < names.size(); ++d) {
    side_by_side.Add(*single_evaluator,
                     graph::Placement::AllOn(single, names, static_cast<int>(d)));
    methods.push_back("single device " + names[d]);
  }
  if (names.size() > 1) {
    dp = BuildDataParallelOver(config, names);
    dp_evaluator = MakeEvaluator(config, dp->graph, devices, *costs);
    side_by_side.Add(*dp_evaluator, dp->placement);
    methods.push_back(fmt::format("data parallel ({})", fmt::join(dp->shard_sizes, "/")));
  }
  std::vector<runtime::EvaluationResult> results = side_by_side.Run(RoundsFor(*evaluator));
  // The learned placement is the candidate fastest when measured side by side; it replaces the
  // best placement the search exported when the single measurements ranked another first.
  const size_t candidates = outcome.top_candidates.size();
  std::optional<size_t> winner;
  for (size_t k = 0; k < candidates; ++k) {
    if (results[k].valid && (!winner || results[k].step_seconds < results[*winner].step_seconds)) {
      winner = k;
    }
  }
  std::vector<Row> rows;
  if (winner) {
    rows.push_back({fmt::format("learned (best of {} re-measured)", candidates), results[*winner]});
    if (*winner != 0) {
      search::WriteBestPlacement(
          config.output.directory, graph,
          graph::ToPlacement(graph, grouping, outcome.top_candidates[*winner], names),
          config.model.name(), results[*winner].step_seconds, evaluator->name());
    }
  }
  double best_single = std::numeric_limits<double>::infinity();
  for (size_t i = candidates; i < results.size(); ++i) {
    if (methods[i].starts_with("single device") && results[i].valid) {
      best_single = std::min(best_single, results[i].step_seconds);
    }
    rows.push_back({methods[i], std::move(results[i])});
  }
  std::string table = SummaryTable(rows, best_single);
  std::cout << '\n' << table;
  std::string summary = fmt::format(
      "# placer search: {}\n\nDevices: {}. Evaluator: {}. {} policy steps, {} evaluations, "
      "{:.1f} s of search.\nEvery row below was evaluated again at the end of the run, by the "
      "same evaluator, side by side (the median of 3 rounds when measured).\n\n{}\nBest placement: "
      "best_placement.yaml (also .pb, .pbtxt). Log: "
      "search.csv. Curves: TensorBoard (events.out.tfevents.*).\n",
      config.model.name(), fmt::join(names, ", "), evaluator->name(), outcome.steps,
      outcome.evaluations, outcome.wall_seconds, table);
  graph::WriteFileAtomically(config.output.directory / "summary.md", summary);
  std::cout << "\nwritten: " << (config.output.directory / "summary.md").string() << ", "
            << (config.output.directory / "best_placement.yaml").string() << '\n';
  return kExitOk;
}

}  // namespace placer::cli
