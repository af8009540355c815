#include "placer/setup/comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <ostream>

#include "graph/micro_batches.h"
#include "placer/search.h"
#include "placer/setup/megatron_row.h"
#include "placer/setup/pipeline_row.h"
#include "placer/setup/report_pictures.h"
#include "placer/setup/verdict.h"
#include "placer/verifier.h"

namespace placer::setup {
namespace {

using Kind = search::ReportRow::Kind;

// A row to be judged side by side: a method and its candidate, or why it has none.
struct Pending {
  Kind kind = Kind::kBaseline;
  std::string method;
  std::optional<search::Candidate> candidate;
  std::string error;
  double seconds_to_produce = 0;
  int evaluations = 0;
  bool describe = false;         // the searches' rows say what they chose
  bool pipeline_stages = false;  // the pipeline baseline's stages at one of the search's shapes
};

search::ReportRow RowOf(const Pending& p, const search::SideBySideResult* judged,
                        const SearchSetup& setup) {
  search::ReportRow row{.kind = p.kind,
                        .method = p.method,
                        .seconds_to_produce = p.seconds_to_produce,
                        .evaluations = p.evaluations};
  if (judged == nullptr) {
    row.invalid_reason = p.error;
    return row;
  }
  const graph::EvaluationResult& r = judged->result;
  row.valid = r.valid;
  row.invalid_reason = r.invalid_reason;
  row.step_seconds = r.step_seconds;
  for (const graph::DeviceStats& d : r.devices)
    row.peak_memory_bytes.push_back(d.peak_memory_bytes);
  if (p.describe) {
    row.placement = search::Summarise(setup.simulated->space(), *p.candidate, setup.names);
    row.hybrid = search::IsHybrid(*p.candidate);
  }
  return row;
}

}  // namespace

search::ComparisonReport CompareMethods(const SearchSetup& setup,
                                        const std::filesystem::path& directory, std::ostream& log) {
  search::ComparisonReport report;
  report.model = setup.config.model.name();
  report.devices = setup.names;
  report.evaluator = setup.judge().name();
  report.lower_bound_seconds = setup.lower_bound_seconds;
  // Every placement is produced first, then all are judged side by side.
  std::vector<Pending> pending;
  for (const Baseline& b : setup.baselines) {
    pending.push_back({Kind::kBaseline, b.name, b.candidate, b.error, b.seconds_to_produce});
  }
  const search::SearchProblem problem = setup.Problem();
  // A search's planning time includes the set-up it needs: the models at every replica count,
  // the profiles (measured) and the baselines it starts from.
  const double baselines_seconds = setup.setup_seconds;
  const search::SearchOptions configured = SearchOptionsFor(setup);
  auto run = [&](const std::string& what, bool policy, bool refinement,
                 search::EditProposal edits) {
    search::SearchOptions options = configured;
    options.use_policy = policy;
    options.use_refinement = refinement;
    options.edit_proposal = edits;
    log << fmt::format("search: {}\n", what) << std::flush;
    return search::RunSearch(problem, options, nullptr);
  };
  // The searches: the policy with refinement (the answer), and, to show what each part adds,
  // the policy alone and refinement alone (from the best baseline), each with the same budget.
  const search::SearchOutcome learned =
      run("policy and refinement", setup.config.search.options.use_policy,
          setup.config.search.options.use_refinement, configured.edit_proposal);
  auto add_search = [&](Kind kind, const std::string& method,
                        const search::SearchOutcome& outcome) {
    pending.push_back({kind, method,
                       outcome.found_valid ? std::optional(outcome.best.candidate) : std::nullopt,
                       "no valid placement found", outcome.wall_seconds + baselines_seconds,
                       outcome.evaluations, true});
  };
  // Refinement alone draws its edits uniformly: with another proposer configured, a row of its
  // own shows what the proposer adds to the same refinement.
  const bool screened = configured.edit_proposal != search::EditProposal::kUniform;
  if (setup.config.search.options.use_policy) {
    // What the policy knows before this run teaches it anything: the learning's starting point.
    log << "search: the policy zero-shot\n" << std::flush;
    // Judged side by side even when invalid, so that its row says why (out of memory, ...).
    const search::SearchOutcome zero_shot = search::PolicyZeroShot(problem, configured);
    pending.push_back({Kind::kAblation, "policy zero-shot", zero_shot.best.candidate, "",
                       zero_shot.wall_seconds + baselines_seconds, zero_shot.evaluations, true});
  }
  if (setup.config.search.options.use_policy && setup.config.search.options.use_refinement) {
    add_search(Kind::kAblation, "policy alone",
               run("the policy alone", true, false, configured.edit_proposal));
    add_search(Kind::kAblation, "refinement alone",
               run("refinement alone", false, true, search::EditProposal::kUniform));
  }
  if (screened && setup.config.search.options.use_refinement) {
    const std::string name = fmt::format("refinement alone, {} edits",
                                         search::EditProposalName(configured.edit_proposal));
    add_search(Kind::kAblation, name, run(name, false, true, configured.edit_proposal));
  }
  const search::SearchOutcome random = search::RandomSearch(
      *setup.simulated, std::max(1, learned.evaluations), setup.config.search.options.seed);
  report.learned_curve = learned.curve;
  report.random_curve = random.curve;
  pending.push_back({Kind::kBaseline,
                     fmt::format("random search ({} evaluations)", random.evaluations),
                     random.found_valid ? std::optional(random.best.candidate) : std::nullopt,
                     "no valid placement found", random.wall_seconds, random.evaluations});
  // The search's answer. Judged by a measured evaluator, it is the fastest, side by side, of its
  // best few candidates and the baselines it started from (a simulator's favourite can lose on
  // the machine), or the simplest of those statistically tied with it; judged by the simulator,
  // its best candidate (or a simpler baseline exactly as fast).
  const size_t answers =
      setup.measured ? std::min<size_t>(learned.elite.size(),
                                        static_cast<size_t>(setup.config.search.verify_candidates))
                     : std::min<size_t>(learned.elite.size(), 1);
  const size_t first_answer = pending.size();
  for (size_t k = 0; k < answers; ++k) {
    pending.push_back({Kind::kLearned, "learned", learned.elite[k].candidate, "",
                       learned.wall_seconds + baselines_seconds, learned.evaluations, true});
  }
  if (setup.measured) {
    // The warm starts that are not rows of their own (baselines copied onto idle devices, the
    // pipeline baseline's stages at each micro-batch count).
    for (const search::NamedCandidate& warm : DerivedWarmStarts(setup)) {
      const bool stages = std::any_of(
          setup.pipelined.begin(), setup.pipelined.end(),
          [&](const search::NamedCandidate& p) { return p.candidate == warm.candidate; });
      pending.push_back({Kind::kLearned, warm.name, warm.candidate, "", 0, 0, true, stages});
    }
  }

  // Each row's role in the ranking: the answer is one of the learned rows or of the baselines the
  // search started from (random search and the ablations are not); single devices and data
  // parallelism are the simple answers a tied row gives way to.
  std::vector<search::Candidate> candidates;
  std::vector<std::optional<size_t>> slot;
  std::vector<search::Role> roles;
  std::vector<std::string> methods;
  for (size_t i = 0; i < pending.size(); ++i) {
    const Pending& p = pending[i];
    slot.push_back(p.candidate ? std::optional(candidates.size()) : std::nullopt);
    if (!p.candidate) continue;
    candidates.push_back(*p.candidate);
    methods.push_back(p.method);
    const bool starting_baseline = p.kind == Kind::kBaseline && i < setup.baselines.size();
    roles.push_back({starting_baseline ? SimplicityOf(p.method) : search::Simplicity::kOther,
                     starting_baseline || p.kind == Kind::kLearned});
  }
  const ClosingVerdict closing =
      JudgeSideBySide(setup.judge(), candidates, roles, RoundOptionsFor(setup), log);
  const search::SideBySideVerdict& verdict = closing.verdict;
  const std::vector<search::SideBySideResult>& judged = verdict.results;
  const std::vector<ReferenceRatios>& ratios = closing.ratios;
  auto row_of = [&](const Pending& p, std::optional<size_t> at) {
    search::ReportRow row = RowOf(p, at ? &judged[*at] : nullptr, setup);
    if (at) {
      row.to_data_parallel = ratios[*at].to_data_parallel;
      row.to_best_single = ratios[*at].to_best_single;
      row.tie = TieMark(verdict, *at);
    }
    return row;
  };

  // One learned row: the fastest of its candidates and of the warm starts (baselines with a
  // candidate, random search excluded: the search did not start from it), or the simplest of
  // those tied with it.
  std::optional<size_t> answer;
  for (size_t i = 0; i < pending.size(); ++i) {
    if (slot[i] && slot[i] == verdict.answer) answer = i;
  }
  for (size_t i = 0; i < first_answer; ++i) report.rows.push_back(row_of(pending[i], slot[i]));
  std::optional<search::PlacementPicture> pipeline_picture;
  std::vector<size_t> apart;  // rows of steps outside the search's space, not judged side by side
  // The pipeline baseline's row. Simulated, it tries micro-batch counts up to 32 on micro-batched
  // graphs of its own; measured, it is its stages at the search's micro-batch count and schedule
  // that measured fastest side by side above (measuring 1 to 32 afresh would cost minutes).
  if (setup.measured) {
    std::optional<size_t> fastest;
    for (size_t i = first_answer; i < pending.size(); ++i) {
      if (!pending[i].pipeline_stages || !judged[*slot[i]].result.valid) continue;
      if (!fastest ||
          judged[*slot[i]].result.step_seconds < judged[*slot[*fastest]].result.step_seconds) {
        fastest = i;
      }
    }
    Pending row{Kind::kBaseline,
                "pipeline (contiguous stages)",
                std::nullopt,
                setup.pipelined.empty()
                    ? "no micro-batch count in the search's space (search.micro_batches)"
                    : "none of its stages' micro-batch counts and schedules is valid here",
                0,
                0,
                true};
    std::optional<size_t> result;
    if (fastest) {
      const search::Candidate& stages = *pending[*fastest].candidate;
      row.method =
          fmt::format("pipeline ({}M = {}, {}, measured)",
                      stages.replicas == 1 ? "" : fmt::format("{} replicas, ", stages.replicas),
                      stages.micro_batches, graph::ToString(stages.schedule));
      row.candidate = pending[*fastest].candidate;
      result = slot[*fastest];
    }
    report.rows.push_back(row_of(row, result));
  } else {
    PipelineRow pipeline = PipelineRowFor(setup, directory);
    for (const std::string& line : pipeline.log) log << line << '\n';
    report.rows.push_back(std::move(pipeline.row));
    if (pipeline.picture) pipeline_picture = std::move(pipeline.picture);
    // The Megatron-style row: tensor x pipeline x data parallelism as a practitioner sets it. Its
    // sharded steps are simulated only (the executor runs them on CPU workers in tests; measuring
    // every shape afresh would cost minutes).
    MegatronRow megatron = MegatronRowFor(setup);
    for (const std::string& line : megatron.log) log << line << '\n';
    report.rows.push_back(std::move(megatron.row));
    apart = {report.rows.size() - 2, report.rows.size() - 1};
  }
  Pending learned_row{Kind::kLearned,
                      learned.found_valid ? "learned" : "learned (no valid placement found)",
                      std::nullopt,
                      "no valid placement found",
                      learned.wall_seconds + baselines_seconds,
                      learned.evaluations,
                      true};
  if (answer) {
    learned_row.candidate = pending[*answer].candidate;
    if (pending[*answer].method != "learned") {
      learned_row.method = fmt::format("learned (= {})", pending[*answer].method);
    }
  }
  report.rows.push_back(row_of(learned_row, answer ? slot[*answer] : std::nullopt));
  report.answer = DescribeAnswer(methods, verdict, ratios, learned_row.method);
  // The verdict judged the search's candidates and the baselines it started from; a grid row of
  // steps outside the search's space (the pipeline and Megatron-style grids, simulated apart) that
  // beats the answer is said, not hidden behind "the fastest".
  if (answer && judged[*slot[*answer]].result.valid) {
    const double answer_seconds = judged[*slot[*answer]].result.step_seconds;
    for (size_t i : apart) {
      const search::ReportRow& row = report.rows[i];
      if (!row.valid || !(row.step_seconds < answer_seconds)) continue;
      report.answer += fmt::format(
          "faster than the answer, outside the search's space (not judged side by side): {}, "
          "{:.3f} ms against {:.3f} ms ({:.3f})\n",
          row.method, row.step_seconds * 1e3, answer_seconds * 1e3,
          row.step_seconds / answer_seconds);
    }
  }

  // The report's pictures: the learned placement and the fastest baseline, their schedules and
  // the devices of their groups (placer/setup/report_pictures.h).
  std::optional<size_t> best_baseline;
  for (size_t i = 0; i < first_answer; ++i) {
    if (pending[i].kind != Kind::kBaseline || !slot[i] || !judged[*slot[i]].result.valid) continue;
    if (!best_baseline ||
        judged[*slot[i]].result.step_seconds < judged[*slot[*best_baseline]].result.step_seconds) {
      best_baseline = i;
    }
  }
  if (learned_row.candidate) {
    report.pictures.push_back(
        PictureOf(setup, learned_row.method, *learned_row.candidate, directory, "trace_learned"));
  }
  if (best_baseline) {
    report.pictures.push_back(PictureOf(setup, "best baseline: " + pending[*best_baseline].method,
                                        *pending[*best_baseline].candidate, directory,
                                        "trace_best_baseline"));
  }

  if (pipeline_picture) report.pictures.push_back(std::move(*pipeline_picture));

  return report;
}

}  // namespace placer::setup
