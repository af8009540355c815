#include "cli/search_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <atomic>
#include <csignal>
#include <iostream>

#include "graph/placement.h"
#include "placer/run_directory.h"
#include "placer/search.h"
#include "placer/setup/search_setup.h"
#include "placer/setup/verdict.h"
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
  const search::SearchOptions& s = config.search.options;
  std::cout << fmt::format(
      "placer search: {} ({} groups: {}), devices {}, replica counts {}, micro-batch counts {}, "
      "{} evaluator{}; budget {} policy steps x {} samples, {} evaluations, {:.0f} s; outputs in "
      "{}{}\n",
      config.model.name(), setup->grouping.num_groups(), setup->grouping_name,
      fmt::join(setup->names, ", "), fmt::join(space.replica_counts(), "/"),
      fmt::join(space.micro_batch_counts(), "/"), graph::ToString(config.search.evaluator),
      setup->measured ? " (learning on the profiled simulator, then measuring side by side)" : "",
      s.use_policy ? s.policy_steps : 0, s.learner.samples_per_step, s.max_evaluations,
      s.max_wall_seconds, config.output.directory.string(), c.resume ? " (resuming)" : "");
  std::cout << setup::DescribeSetup(*setup) << '\n';
  if (s.edit_proposal != search::EditProposal::kUniform) {
    std::cout << fmt::format(
        "refinement edits: {}{}, {} drawn per edit judged\n",
        search::EditProposalName(s.edit_proposal),
        s.edit_model_file.empty() ? "" : " (" + s.edit_model_file.string() + ")", s.edit_screening);
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

  // The answer: the search's best few candidates and every baseline, judged again side by side.
  const setup::SearchClose closing =
      setup::CloseSearch(*setup, outcome, config.output.directory, std::cout);
  std::cout << '\n' << closing.table;
  graph::WriteFileAtomically(config.output.directory / "summary.md",
                             setup::SearchSummary(*setup, outcome, closing));
  if (const std::string cluster = setup::DescribeCluster(*setup); !cluster.empty()) {
    std::cout << '\n' << cluster << '\n';
  }
  std::cout << '\n' << runtime::DescribePeakMemory() << '\n';
  std::cout << "written: " << (config.output.directory / "summary.md").string() << ", "
            << (config.output.directory / "best_placement.yaml").string() << '\n';
  return kExitOk;
}

}  // namespace placer::cli
