#include "cli/compare_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "graph/placement.h"
#include "placer/report.h"
#include "placer/setup/comparison.h"
#include "placer/setup/search_setup.h"
#include "runtime/process_memory.h"

namespace placer::cli {

int RunCompareCommand(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  if (!c.output_directory.empty()) config.output.directory = c.output_directory;
  const std::unique_ptr<search::RunLock> lock =
      setup::LockOutputDirectory(config.output.directory, std::cout);
  std::unique_ptr<setup::SearchSetup> setup = setup::BuildSearchSetup(config, std::cout);
  const search::ActionSpace& space = setup->simulated->space();
  std::cout << fmt::format(
      "placer compare: {} ({} groups: {}) on {}, replica counts {}, {} evaluator{}; each search "
      "plans for {:.0f} s, set-up included\n",
      config.model.name(), setup->grouping.num_groups(), setup->grouping_name,
      fmt::join(setup->names, ", "), fmt::join(space.replica_counts(), "/"), setup->judge().name(),
      setup->measured ? " (searches learn on the profiled simulator)" : "",
      config.search.options.max_wall_seconds);
  std::cout << setup::DescribeSetup(*setup) << '\n';
  for (const std::string& note : setup::SetupNotes(*setup, c.config_path)) {
    std::cout << "note: " << note << '\n';
  }

  search::ComparisonReport report =
      setup::CompareMethods(*setup, config.output.directory, std::cout);
  std::cout << '\n' << search::ReportTable(report);
  graph::WriteFileAtomically(config.output.directory / "report.md", search::ReportMarkdown(report));
  graph::WriteFileAtomically(config.output.directory / "report.html", search::ReportHtml(report));
  graph::WriteFileAtomically(config.output.directory / "report.json", search::ReportJson(report));
  if (const std::string cluster = setup::DescribeCluster(*setup); !cluster.empty()) {
    std::cout << '\n' << cluster << '\n';
  }
  std::cout << '\n' << runtime::DescribePeakMemory() << '\n';
  std::cout << "written: " << (config.output.directory / "report.md").string() << ", "
            << (config.output.directory / "report.html").string() << ", "
            << (config.output.directory / "report.json").string() << '\n';
  return kExitOk;
}

}  // namespace placer::cli
