#include "placer/setup/verdict.h"

#include <fmt/format.h>

#include <ostream>
#include <set>
#include <sstream>

namespace placer::setup {

References FindReferences(const std::vector<search::Role>& roles,
                          const search::SideBySideVerdict& verdict) {
  References refs;
  for (size_t i = 0; i < roles.size() && i < verdict.results.size(); ++i) {
    const graph::EvaluationResult& r = verdict.results[i].result;
    if (!r.valid) continue;
    if (roles[i].simplicity == search::Simplicity::kDataParallel && !refs.data_parallel) {
      refs.data_parallel = i;
    }
    if (roles[i].simplicity == search::Simplicity::kSingleDevice &&
        (!refs.best_single ||
         r.step_seconds < verdict.results[*refs.best_single].result.step_seconds)) {
      refs.best_single = i;
    }
  }
  return refs;
}

std::vector<ReferenceRatios> RatiosToReferences(const References& refs,
                                                const search::SideBySideVerdict& verdict) {
  std::vector<ReferenceRatios> ratios(verdict.results.size());
  for (size_t i = 0; i < verdict.results.size(); ++i) {
    const std::vector<double>& rounds = verdict.results[i].round_seconds;
    if (refs.data_parallel) {
      ratios[i].to_data_parallel =
          search::CompareRounds(rounds, verdict.results[*refs.data_parallel].round_seconds);
    }
    if (refs.best_single) {
      ratios[i].to_best_single =
          search::CompareRounds(rounds, verdict.results[*refs.best_single].round_seconds);
    }
  }
  return ratios;
}

ClosingVerdict JudgeSideBySide(const search::CandidateEvaluator& judge,
                               const std::vector<search::Candidate>& candidates,
                               const std::vector<search::Role>& roles,
                               const search::RoundOptions& options, std::ostream& log) {
  log << fmt::format("judging {} placements side by side ({})\n", candidates.size(),
                     options.max_rounds <= 1
                         ? std::string("1 round")
                         : fmt::format("{} rounds, up to {} for the rows tied with the fastest",
                                       options.min_rounds, options.max_rounds))
      << std::flush;
  ClosingVerdict closing{search::SideBySide(judge, candidates, roles, options), {}};
  closing.ratios = RatiosToReferences(FindReferences(roles, closing.verdict), closing.verdict);
  return closing;
}

std::string TieMark(const search::SideBySideVerdict& verdict, size_t i) {
  if (verdict.fastest && verdict.placement[i] == verdict.placement[*verdict.fastest]) {
    return "fastest";  // the fastest itself, or a row of the same placement
  }
  return verdict.tied[i] ? "tied" : "";
}

std::string DescribeAnswer(const std::vector<std::string>& methods,
                           const search::SideBySideVerdict& verdict,
                           const std::vector<ReferenceRatios>& ratios,
                           const std::string& answer_name) {
  if (!verdict.answer || !verdict.fastest) return "answer: none (no valid placement)\n";
  const size_t answer = *verdict.answer;
  const std::string& name = answer_name.empty() ? methods[answer] : answer_name;
  const size_t fastest = *verdict.fastest;
  const auto rounds = fmt::format("{} round{}", verdict.rounds, verdict.rounds == 1 ? "" : "s");
  std::ostringstream out;
  std::set<size_t> others_tied;  // placements, not rows: a placement may have several rows
  for (size_t i = 0; i < methods.size(); ++i) {
    if (verdict.tied[i] && TieMark(verdict, i) != "fastest")
      others_tied.insert(verdict.placement[i]);
  }
  if (TieMark(verdict, answer) != "fastest") {
    const search::PairedRatio& r = verdict.to_fastest[answer];
    out << fmt::format(
        "answer: {}, tied with the fastest, {}, within [{:.3f}, {:.3f}] (its step time over the "
        "fastest's, {:.3f}; {}); the simpler is chosen\n",
        name, methods[fastest], r.low, r.high, r.ratio, rounds);
  } else if (!others_tied.empty()) {
    out << fmt::format(
        "answer: {}, the fastest; {} other placement{} tied with it (marked), none simpler ({})\n",
        name, others_tied.size(), others_tied.size() == 1 ? " is" : "s are", rounds);
  } else if (verdict.rounds == 1) {
    out << fmt::format("answer: {}, the fastest; every other placement is slower (1 round)\n",
                       name);
  } else {
    out << fmt::format("answer: {}, the fastest; every other placement is reliably slower ({})\n",
                       name, rounds);
  }
  const search::PairedRatio& dp = ratios[answer].to_data_parallel;
  if (dp.rounds == 0) {
    out << "answer vs data parallelism: - (no valid data-parallel row)\n";
  } else {
    out << fmt::format("answer vs data parallelism: {}: {}\n", search::FormatRatio(dp),
                       search::ToString(search::Classify(dp)));
  }
  return out.str();
}

}  // namespace placer::setup
