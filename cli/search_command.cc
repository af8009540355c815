#include "cli/search_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <cmath>
#include <csignal>
#include <iostream>
#include <limits>
#include <sstream>

#include "placer/run_directory.h"
#include "placer/search.h"
#include "placer/setup/model_factory.h"
#include "placer/setup/search_setup.h"
#include "placer/setup/verdict.h"
#include "placer/verifier.h"
#include "runtime/process_memory.h"

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

// A row of the closing table: a judged candidate (its index among those judged side by side), or
// a baseline without a placement and why.
struct Row {
  std::string method;
  std::optional<size_t> judged;
  std::string error;
};

std::string Spread(const std::vector<double>& rounds) {
  std::vector<double> valid;
  for (double s : rounds) {
    if (std::isfinite(s)) valid.push_back(s);
  }
  if (valid.size() < 2) return "";
  const auto [low, high] = std::minmax_element(valid.begin(), valid.end());
  return fmt::format("{:.2f}-{:.2f}", *low * 1e3, *high * 1e3);
}

// One line per row: step time (the geometric mean of its rounds), the range of its rounds, its
// step time over data parallelism's and over the best single device's with their 95% intervals
// (paired by round), and whether it is the fastest or tied with it.
std::string SummaryTable(const std::vector<Row>& rows, const search::SideBySideVerdict& verdict,
                         const std::vector<setup::ReferenceRatios>& ratios) {
  std::ostringstream out;
  out << fmt::format("| {:<44} | {:>11} | {:>15} | {:>22} | {:>22} | {:<7} |\n", "placement",
                     "step time", "rounds (ms)", "time / data parallel", "time / best single",
                     "tie");
  out << fmt::format("|{:-<46}|{:->13}|{:->17}|{:->24}|{:->24}|{:-<9}|\n", "", ":", ":", ":", ":",
                     "");
  for (const Row& row : rows) {
    const graph::EvaluationResult* r = row.judged ? &verdict.results[*row.judged].result : nullptr;
    if (r != nullptr && r->valid) {
      const size_t i = *row.judged;
      out << fmt::format("| {:<44} | {:>8.3f} ms | {:>15} | {:>22} | {:>22} | {:<7} |\n",
                         row.method, r->step_seconds * 1e3,
                         Spread(verdict.results[i].round_seconds),
                         search::FormatRatio(ratios[i].to_data_parallel),
                         search::FormatRatio(ratios[i].to_best_single), setup::TieMark(verdict, i));
    } else {
      const std::string reason = r != nullptr ? r->invalid_reason : row.error;
      out << fmt::format("| {:<44} | {:>11} | {:<89} |\n", row.method, "invalid",
                         reason.substr(0, 89));
    }
  }
  return out.str();
}

}  // namespace

int RunSearchCommand(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  if (!c.output_directory.empty()) config.output.directory = c.output_directory;
  if (config.model.replicas > 1) {
    std::cout << fmt::format(
        "note: model.replicas ({}) is for evaluate, train and profile; the search chooses the "
        "replica count itself (search.replicas)\n",
        config.model.replicas);
  }
  // Held until the command returns: the answer and summary.md are written under it too.
  const std::unique_ptr<search::RunLock> lock =
      setup::LockOutputDirectory(config.output.directory, std::cout);
  try {
    search::RunDirectory::CheckUsable(config.output.directory, c.resume);
  } catch (const search::RunDirectoryError& error) {
    throw InputError(error.what());
  }
  std::unique_ptr<setup::SearchSetup> setup = setup::BuildSearchSetup(config, std::cout);
  const search::ActionSpace& space = setup->simulated->space();
  const config::SearchConfig& s = config.search;
  std::cout << fmt::format(
      "placer search: {} ({} groups: {}), devices {}, replica counts {}, micro-batch counts {}, "
      "{} evaluator{}; budget {} policy steps x {} samples, {} evaluations, {:.0f} s; outputs in "
      "{}{}\n",
      config.model.name(), setup->grouping.num_groups(), setup->grouping_name,
      fmt::join(setup->names, ", "), fmt::join(space.replica_counts(), "/"),
      fmt::join(space.micro_batch_counts(), "/"), config::ToString(s.evaluator),
      setup->measured ? " (learning on the profiled simulator, then measuring side by side)" : "",
      s.policy ? s.policy_steps : 0, s.samples_per_step, s.max_evaluations, s.max_wall_seconds,
      config.output.directory.string(), c.resume ? " (resuming)" : "");
  std::cout << setup::DescribeSetup(*setup) << '\n';
  if (s.edit_proposer != "uniform") {
    std::cout << fmt::format("refinement edits: {}{}, {} drawn per edit judged\n", s.edit_proposer,
                             s.edit_model.empty() ? "" : " (" + s.edit_model.string() + ")",
                             s.edit_screening);
  }
  for (const std::string& note : setup::SetupNotes(*setup, c.config_path)) {
    std::cout << "note: " << note << '\n';
  }

  std::unique_ptr<search::RunDirectory> dir;
  try {
    dir = std::make_unique<search::RunDirectory>(
        config.output.directory, c.resume, setup::RunIdentityFor(*setup), setup->simulated.get(),
        /*progress=*/true);
  } catch (const search::RunDirectoryError& error) {
    throw InputError(error.what());
  }
  search::SearchOptions options = setup::SearchOptionsFor(*setup);
  options.stop_requested = &g_stop_requested;
  const search::SearchProblem problem = setup->Problem();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  search::SearchOutcome outcome;
  try {
    outcome = search::RunSearch(problem, options, dir.get());
  } catch (const search::RunDirectoryError& error) {
    throw InputError(error.what());
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

  // The answer: the search's best few candidates and every baseline, judged again side by side
  // by the config's evaluator (measured: interleaved rounds, compared round by round); the
  // fastest of them all, or the simplest of the rows statistically tied with it.
  std::vector<search::Candidate> candidates;
  std::vector<std::string> learned_names;
  const size_t learned = std::min<size_t>(
      outcome.elite.size(), static_cast<size_t>(setup->measured ? s.verify_candidates : 1));
  for (size_t k = 0; k < learned; ++k) {
    candidates.push_back(outcome.elite[k].candidate);
    learned_names.push_back(outcome.elite[k].origin);
  }
  for (const setup::Baseline& b : setup->baselines) {
    if (b.candidate) candidates.push_back(*b.candidate);
  }
  // The warm starts that are not baselines of their own: baselines copied onto idle devices, and
  // with a measured judge the pipeline baseline's stages at every micro-batch count (it may prefer
  // one the simulator ranked lower).
  const std::vector<search::NamedCandidate> derived = setup::DerivedWarmStarts(*setup);
  for (const search::NamedCandidate& warm : derived) candidates.push_back(warm.candidate);
  // Each row's role: the baselines that are a single device or data parallelism are the simple
  // answers a tied row gives way to; a learned candidate that is one of them takes its role.
  std::vector<std::string> methods;
  std::vector<search::Role> roles;
  for (size_t k = 0; k < learned; ++k) {
    methods.push_back(fmt::format("candidate {} (found by {})", k + 1, learned_names[k]));
    roles.push_back({});
  }
  for (const setup::Baseline& b : setup->baselines) {
    if (!b.candidate) continue;
    methods.push_back(b.name);
    roles.push_back({setup::SimplicityOf(b.name)});
  }
  for (const search::NamedCandidate& warm : derived) {
    methods.push_back("warm start: " + warm.name);
    roles.push_back({});
  }
  const setup::ClosingVerdict closing = setup::JudgeSideBySide(
      setup->judge(), candidates, roles, setup::RoundOptionsFor(*setup), std::cout);
  const search::SideBySideVerdict& verdict = closing.verdict;
  const std::vector<setup::ReferenceRatios>& ratios = closing.ratios;

  std::vector<Row> rows;
  size_t next = 0;
  for (size_t k = 0; k < learned; ++k, ++next) rows.push_back({methods[next], next, ""});
  for (const setup::Baseline& b : setup->baselines) {
    if (b.candidate) {
      rows.push_back({b.name, next++, ""});
    } else {
      rows.push_back({b.name, std::nullopt, b.error});
    }
  }
  for (size_t k = 0; k < derived.size(); ++k, ++next) rows.push_back({methods[next], next, ""});
  if (verdict.answer) {
    const size_t answer = *verdict.answer;
    rows.insert(rows.begin(), Row{fmt::format("learned: {}", methods[answer]), answer, ""});
    const search::Candidate& best = candidates[answer];
    const search::ReplicatedModel& model = setup->judge().model(best);
    search::WriteBestPlacement(config.output.directory, model.graph,
                               setup->judge().PlacementOf(best), best.replicas, config.model.name(),
                               verdict.results[answer].result.step_seconds, setup->judge().name());
  }
  const std::string table =
      SummaryTable(rows, verdict, ratios) + '\n' + setup::DescribeAnswer(methods, verdict, ratios);
  std::cout << '\n' << table;
  const std::string summary = fmt::format(
      "# placer search: {}\n\nDevices: {}. Evaluator: {}. Replica counts searched: {}. {} policy "
      "steps, {} evaluations, {:.1f} s of search (and {:.1f} s of set-up: models, {}baselines).\n"
      "The first row is the answer: of the rows below, all judged again at the end of the run "
      "side by side in the same rounds ({} round{} at most, the most for the rows tied with the "
      "fastest; 'step time' is the geometric mean of a row's rounds, 'rounds' their range), the "
      "fastest (paired round by round with data parallelism), or the simplest (single device, "
      "then data parallelism) of the rows whose step time over the fastest's has a 95% interval "
      "(a bootstrap of the rounds) that contains 1. The ratios to data parallelism and to the "
      "best single device pair each round with theirs.\n\n{}\nBest "
      "placement: best_placement.yaml (also .pb, .pbtxt). Log: "
      "search.csv. Curves: TensorBoard (events.out.tfevents.*).\n",
      config.model.name(), fmt::join(setup->names, ", "), setup->judge().name(),
      fmt::join(space.replica_counts(), ", "), outcome.steps, outcome.evaluations,
      outcome.wall_seconds, setup->setup_seconds, setup->measured ? "profiles, " : "",
      verdict.rounds, verdict.rounds == 1 ? "" : "s", table);
  graph::WriteFileAtomically(config.output.directory / "summary.md", summary);
  if (const std::string cluster = setup::DescribeCluster(*setup); !cluster.empty()) {
    std::cout << '\n' << cluster << '\n';
  }
  std::cout << '\n' << runtime::DescribePeakMemory() << '\n';
  std::cout << "written: " << (config.output.directory / "summary.md").string() << ", "
            << (config.output.directory / "best_placement.yaml").string() << '\n';
  return kExitOk;
}

}  // namespace placer::cli
