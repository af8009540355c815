#include "placer/setup/verdict.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>

#include "placer/run_directory.h"

namespace placer::setup {
namespace {

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
                         const std::vector<ReferenceRatios>& ratios) {
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
                         search::FormatRatio(ratios[i].to_best_single), TieMark(verdict, i));
    } else {
      const std::string reason = r != nullptr ? r->invalid_reason : row.error;
      out << fmt::format("| {:<44} | {:>11} | {:<89} |\n", row.method, "invalid",
                         reason.substr(0, 89));
    }
  }
  return out.str();
}

}  // namespace

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
  // A row that may not answer (compare's ablations) can beat every row that may: said, not
  // called a tie.
  if (verdict.tied[i] && search::Classify(verdict.to_fastest[i]) == search::Versus::kFaster) {
    return "faster";
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
  std::ostringstream faster;
  for (size_t i = 0; i < methods.size(); ++i) {
    const std::string mark = TieMark(verdict, i);
    if (mark == "tied") others_tied.insert(verdict.placement[i]);
    if (mark == "faster") {
      faster << fmt::format(
          "faster than the answer, but a row that may not answer: {}, {:.3f} ms against {:.3f} ms "
          "({})\n",
          methods[i], verdict.results[i].result.step_seconds * 1e3,
          verdict.results[fastest].result.step_seconds * 1e3,
          search::FormatRatio(verdict.to_fastest[i]));
    }
  }
  const bool all = faster.str().empty();
  const std::string the_fastest = all ? "the fastest" : "the fastest of the rows that may answer";
  const std::string the_others = all ? "every other placement" : "every other that may answer";
  if (TieMark(verdict, answer) != "fastest") {
    const search::PairedRatio& r = verdict.to_fastest[answer];
    out << fmt::format(
        "answer: {}, tied with the fastest, {}, within [{:.3f}, {:.3f}] (its step time over the "
        "fastest's, {:.3f}; {}); the simpler is chosen\n",
        name, methods[fastest], r.low, r.high, r.ratio, rounds);
  } else if (!others_tied.empty()) {
    out << fmt::format(
        "answer: {}, {}; {} other placement{} tied with it (marked), none simpler "
        "({})\n",
        name, the_fastest, others_tied.size(), others_tied.size() == 1 ? " is" : "s are", rounds);
  } else if (verdict.rounds == 1) {
    out << fmt::format("answer: {}, {}; {} is slower (1 round)\n", name, the_fastest, the_others);
  } else {
    out << fmt::format("answer: {}, {}; {} is reliably slower ({})\n", name, the_fastest,
                       the_others, rounds);
  }
  out << faster.str();
  const search::PairedRatio& dp = ratios[answer].to_data_parallel;
  if (dp.rounds == 0) {
    out << "answer vs data parallelism: - (no valid data-parallel row)\n";
  } else {
    out << fmt::format("answer vs data parallelism: {}: {}\n", search::FormatRatio(dp),
                       search::ToString(search::Classify(dp)));
  }
  return out.str();
}

SearchClose CloseSearch(const SearchSetup& setup, const search::SearchOutcome& outcome,
                        const std::filesystem::path& directory, std::ostream& log) {
  // The answer: the search's best few candidates and every baseline, judged again side by side
  // by the config's evaluator (measured: interleaved rounds, compared round by round); the
  // fastest of them all, or the simplest of the rows statistically tied with it.
  std::vector<search::Candidate> candidates;
  std::vector<std::string> learned_names;
  const size_t learned = std::min<size_t>(
      outcome.elite.size(),
      static_cast<size_t>(setup.measured ? setup.config.search.verify_candidates : 1));
  for (size_t k = 0; k < learned; ++k) {
    candidates.push_back(outcome.elite[k].candidate);
    learned_names.push_back(outcome.elite[k].origin);
  }
  for (const Baseline& b : setup.baselines) {
    if (b.candidate) candidates.push_back(*b.candidate);
  }
  // The warm starts that are not baselines of their own: baselines copied onto idle devices, and
  // with a measured judge the pipeline baseline's stages at every micro-batch count (it may prefer
  // one the simulator ranked lower).
  const std::vector<search::NamedCandidate> derived = DerivedWarmStarts(setup);
  for (const search::NamedCandidate& warm : derived) candidates.push_back(warm.candidate);
  // Each row's role: the baselines that are a single device or data parallelism are the simple
  // answers a tied row gives way to; a learned candidate that is one of them takes its role.
  std::vector<std::string> methods;
  std::vector<search::Role> roles;
  for (size_t k = 0; k < learned; ++k) {
    methods.push_back(fmt::format("candidate {} (found by {})", k + 1, learned_names[k]));
    roles.push_back({});
  }
  for (const Baseline& b : setup.baselines) {
    if (!b.candidate) continue;
    methods.push_back(b.name);
    roles.push_back({SimplicityOf(b.name)});
  }
  for (const search::NamedCandidate& warm : derived) {
    methods.push_back("warm start: " + warm.name);
    roles.push_back({});
  }
  const ClosingVerdict closing =
      JudgeSideBySide(setup.judge(), candidates, roles, RoundOptionsFor(setup), log);
  const search::SideBySideVerdict& verdict = closing.verdict;
  const std::vector<ReferenceRatios>& ratios = closing.ratios;

  std::vector<Row> rows;
  size_t next = 0;
  for (size_t k = 0; k < learned; ++k, ++next) rows.push_back({methods[next], next, ""});
  for (const Baseline& b : setup.baselines) {
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
    const search::ReplicatedModel& model = setup.judge().model(best);
    search::WriteBestPlacement(directory, model.graph, setup.judge().PlacementOf(best), best,
                               setup.config.model.name(),
                               verdict.results[answer].result.step_seconds, setup.judge().name());
  }
  return {SummaryTable(rows, verdict, ratios) + '\n' + DescribeAnswer(methods, verdict, ratios),
          verdict.rounds};
}

std::string SearchSummary(const SearchSetup& setup, const search::SearchOutcome& outcome,
                          const SearchClose& closing) {
  return fmt::format(
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
      setup.config.model.name(), fmt::join(setup.names, ", "), setup.judge().name(),
      fmt::join(setup.simulated->space().replica_counts(), ", "), outcome.steps,
      outcome.evaluations, outcome.wall_seconds, setup.setup_seconds,
      setup.measured ? "profiles, " : "", closing.rounds, closing.rounds == 1 ? "" : "s",
      closing.table);
}

}  // namespace placer::setup
