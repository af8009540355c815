// `placer compare`'s rows: every baseline, the learned search and its ablations (the policy alone,
// refinement alone, and refinement with another edit proposer), random search with the learned
// search's evaluations, and the pipeline row, all produced first and then judged side by side by
// the config's evaluator, with the report's answer and pictures. The CLI prints and writes it.
#pragma once

#include <filesystem>
#include <iosfwd>

#include "placer/report.h"
#include "placer/setup/search_setup.h"

namespace placer::setup {

// Runs the searches and judges every row; says on `log` what it runs as it goes. Traces and
// pictures' files go to `directory`.
search::ComparisonReport CompareMethods(const SearchSetup& setup,
                                        const std::filesystem::path& directory, std::ostream& log);

}  // namespace placer::setup
