// The closing side-by-side in words, for `search` and `compare`: every row's step time over data
// parallelism's and over the best single device's (paired by round, with their intervals), the
// rows tied with the fastest, the answer with its tie stated, and `search`'s summary.md.
#pragma once

#include <filesystem>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "placer/paired_comparison.h"
#include "placer/search.h"
#include "placer/setup/search_setup.h"
#include "placer/verifier.h"

namespace placer::setup {

struct ReferenceRatios {
  search::PairedRatio to_data_parallel;  // rounds 0 when there is no valid data-parallel row
  search::PairedRatio to_best_single;
};

// The references among the candidates of `verdict`, by their roles: the (first) data-parallel
// row, and the valid single device with the lowest step time.
struct References {
  std::optional<size_t> data_parallel;
  std::optional<size_t> best_single;
};
References FindReferences(const std::vector<search::Role>& roles,
                          const search::SideBySideVerdict& verdict);

// Per candidate of `verdict`.
std::vector<ReferenceRatios> RatiosToReferences(const References& references,
                                                const search::SideBySideVerdict& verdict);

// The closing side-by-side and every row's ratios to the references.
struct ClosingVerdict {
  search::SideBySideVerdict verdict;
  std::vector<ReferenceRatios> ratios;
};

// Judges `candidates` side by side under `options`, saying on `log` how many and in how many
// rounds as it starts: what `search` and `compare` close with.
ClosingVerdict JudgeSideBySide(const search::CandidateEvaluator& judge,
                               const std::vector<search::Candidate>& candidates,
                               const std::vector<search::Role>& roles,
                               const search::RoundOptions& options, std::ostream& log);

// "fastest", "tied", "faster" (a row that may not answer, faster than every row that may) or ""
// for candidate i.
std::string TieMark(const search::SideBySideVerdict& verdict, size_t i);

// Lines saying what the answer is and why (`methods` names each candidate), e.g.
//   answer: data parallel (128/128), tied with the fastest, candidate 2 (found by policy), within
//   [0.981, 1.027] (its step time over the fastest's, 1.004); the simpler is chosen
//   answer vs data parallelism: 1.000 [1.000, 1.000]: tied
// The second line is what bench/lenet_search_repeat.py reads. `answer_name`: what the answer's
// row is called, when not its method (compare's "learned (= ...)").
std::string DescribeAnswer(const std::vector<std::string>& methods,
                           const search::SideBySideVerdict& verdict,
                           const std::vector<ReferenceRatios>& ratios,
                           const std::string& answer_name = "");

// `placer search`'s close: the search's best candidate (with a measured judge its best
// search.verify_candidates), every baseline and the warm starts derived from them, judged side by
// side by the config's evaluator; writes the answer's best_placement files into `directory` and
// returns the table of every row and the lines that say the answer.
struct SearchClose {
  std::string table;
  int rounds = 0;  // of the side-by-side judgement, at most
};
SearchClose CloseSearch(const SearchSetup& setup, const search::SearchOutcome& outcome,
                        const std::filesystem::path& directory, std::ostream& log);

// summary.md of a `placer search` run: what was searched and for how long, how the closing
// side-by-side chose the answer, its table (`closing`), and the files the run wrote.
std::string SearchSummary(const SearchSetup& setup, const search::SearchOutcome& outcome,
                          const SearchClose& closing);

}  // namespace placer::setup
