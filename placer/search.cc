#include "placer/search.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <unordered_map>

#include "placer/budget_split.h"
#include "placer/edit_model.h"
#include "placer/run_directory.h"

namespace placer::search {
namespace {

using Clock = std::chrono::steady_clock;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

nlohmann::json ToJson(const RankedCandidate& c) {
  return {
      {"candidate", FormatCandidate(c.candidate)}, {"seconds", c.seconds}, {"origin", c.origin}};
}

struct Verdict {
  bool valid = false;
  double seconds = 0;
  std::string reason;
  std::vector<double> busy;  // per device; empty when restored from the log
};

// The loop's state and its moves; the RunDirectory writes what it reports.
class Loop {
 public:
  Loop(const SearchProblem& problem, const SearchOptions& options, RunDirectory* dir)
      : p_(problem),
        o_(options),
        dir_(dir),
        evaluator_(*problem.evaluator),
        learner_(problem.features, evaluator_.space(), options.policy, options.learner,
                 options.seed),
        refiner_(evaluator_.space(), problem.features, options.refiner, options.seed),
        earned_split_(options.earned_split, options.seed) {
    if (options.edit_proposal == EditProposal::kUniform) return;
    if (options.edit_proposal == EditProposal::kEstimate ||
        options.edit_proposal == EditProposal::kSchedule) {
      scorer_ = std::make_unique<EstimateScorer>(options.edit_proposal == EditProposal::kSchedule);
    } else {
      scorer_ = EditModel::Load(options.edit_model_file);
    }
    refiner_.SetGuide({.scorer = scorer_.get(),
                       .screening = options.edit_screening,
                       .seconds_per_byte = problem.seconds_per_byte,
                       .schedule_costs = problem.schedule_costs});
  }

  SearchOutcome Run();

 private:
  double Elapsed() const {
    return elapsed_before_ + std::chrono::duration<double>(Clock::now() - start_).count();
  }
  bool OutOfEvaluations() const { return evaluations_ >= o_.max_evaluations; }
  // The policy's share of the wall time ends here; the rest is the final refinement's.
  // (The earned split has no final refinement of its own.)
  double PolicyDeadline() const {
    return o_.use_refinement && !Earned() ? (1 - o_.final_refine_share) * o_.max_wall_seconds
                                          : o_.max_wall_seconds;
  }
  bool Earned() const {
    return o_.budget_split == BudgetSplit::kEarned && o_.use_policy && o_.use_refinement;
  }
  bool StopRequested() const { return o_.stop_requested != nullptr && o_.stop_requested->load(); }
  double RewardFor(const Verdict& v) const {
    return RewardOf(v.valid ? v.seconds : o_.failing_step_seconds);
  }

  // Judges `batch` (duplicates and known candidates from the cache), logs every row, keeps the
  // elite. `origins` names warm starts (empty otherwise).
  std::vector<Verdict> Judge(const std::vector<Candidate>& batch, const std::string& phase,
                             const std::vector<std::string>& origins = {});
  void Consider(const Candidate& candidate, const Verdict& verdict, const std::string& origin);
  std::optional<Candidate> Incumbent() const {
    return elite_.empty() ? std::nullopt : std::optional(elite_.front().candidate);
  }
  // Imitation of the elite until `options` are met or the search's clock reaches `deadline`.
  void ImitateElite(const ImitationOptions& options, double deadline);
  void WarmStart();
  void PolicyStep();
  // With the earned split: the next episode's kind, when the budgets leave a choice.
  EpisodeKind NextEpisode() const;
  void RunEpisodes();
  void Refine(const Candidate& start, int rounds, double deadline);
  Judgement JudgementOf(const Verdict& verdict) const;
  // The verdict of a candidate judged before, with its device times.
  const Verdict& Known(const Candidate& candidate);
  void Report(const std::string& phase, double mean_seconds, const UpdateStats& stats);
  void SaveCheckpoint();
  void Restore();

  const SearchProblem& p_;
  const SearchOptions& o_;
  RunDirectory* dir_;
  const CandidateEvaluator& evaluator_;
  Learner learner_;
  Refiner refiner_;
  std::unique_ptr<EditScorer> scorer_;  // null: uniform edits
  Clock::time_point start_ = Clock::now();

  // Saved with checkpoints (the cache is rebuilt from the log).
  std::unordered_map<std::string, Verdict> cache_;
  int step_ = 0;  // policy steps
  int reports_ = 0;
  int evaluations_ = 0;
  double elapsed_before_ = 0;
  bool warm_started_ = false;
  int final_rounds_ = 0;
  std::vector<RankedCandidate> elite_;
  std::vector<CurvePoint> curve_;
  // The best the policy sampled since the last refinement slice: that slice's start.
  std::optional<RankedCandidate> recent_;
  EarnedSplit earned_split_;
  // Seconds per unit of group work and per byte (PolicyNetwork::SetMachine), from the warm starts.
  std::pair<double, double> machine_{0, 0};
};

std::vector<Verdict> Loop::Judge(const std::vector<Candidate>& batch, const std::string& phase,
                                 const std::vector<std::string>& origins) {
  std::vector<Verdict> verdicts(batch.size());
  std::vector<bool> cached(batch.size(), true);
  std::vector<Candidate> fresh;
  std::set<std::string> fresh_keys;  // a candidate twice in one batch is judged once
  for (size_t k = 0; k < batch.size(); ++k) {
    const std::string key = KeyOf(batch[k]);
    if (cache_.count(key) == 0 && fresh_keys.insert(key).second) {
      fresh.push_back(batch[k]);
      cached[k] = false;
    }
  }
  if (!fresh.empty()) {
    std::vector<graph::EvaluationResult> results = evaluator_.Evaluate(fresh);
    evaluations_ += static_cast<int>(fresh.size());
    for (size_t j = 0; j < fresh.size(); ++j) {
      Verdict& v = cache_[KeyOf(fresh[j])];
      v = {results[j].valid, AsLogged(results[j].step_seconds), results[j].invalid_reason, {}};
      for (const graph::DeviceStats& d : results[j].devices) v.busy.push_back(d.busy_seconds);
    }
  }
  for (size_t k = 0; k < batch.size(); ++k) {
    verdicts[k] = cache_.at(KeyOf(batch[k]));
    const std::string origin = k < origins.size() ? origins[k] : "";
    Consider(batch[k], verdicts[k], origin.empty() ? phase : origin);
    // Refinement re-proposes known candidates often; only its new ones are worth a row.
    if (dir_ != nullptr && (!cached[k] || phase != "refinement")) {
      dir_->Log({.step = phase == "warm start" ? -1 : step_,
                 .phase = phase,
                 .sample = static_cast<int>(k),
                 .origin = origin,
                 .candidate = batch[k],
                 .valid = verdicts[k].valid,
                 .seconds = verdicts[k].seconds,
                 .reward = RewardFor(verdicts[k]),
                 .cached = cached[k],
                 .reason = verdicts[k].reason});
    }
  }
  return verdicts;
}

void Loop::Consider(const Candidate& candidate, const Verdict& v, const std::string& origin) {
  if (!v.valid) return;
  const std::string key = KeyOf(candidate);
  for (const RankedCandidate& e : elite_) {
    if (KeyOf(e.candidate) == key) return;
  }
  if (static_cast<int>(elite_.size()) >= o_.elite_size && v.seconds >= elite_.back().seconds) {
    return;
  }
  RankedCandidate entry{candidate, v.seconds, origin};
  auto at = std::upper_bound(elite_.begin(), elite_.end(), v.seconds,
                             [](double s, const RankedCandidate& e) { return s < e.seconds; });
  elite_.insert(at, std::move(entry));
  if (static_cast<int>(elite_.size()) > o_.elite_size) elite_.pop_back();
}

void Loop::ImitateElite(const ImitationOptions& options, double deadline) {
  if (elite_.empty()) return;
  // Weights fall with the distance to the best: a candidate 5% slower counts e^-1 as much.
  std::vector<Candidate> targets;
  std::vector<double> weights;
  for (const RankedCandidate& e : elite_) {
    targets.push_back(e.candidate);
    weights.push_back(std::exp(-(e.seconds / elite_.front().seconds - 1) / 0.05));
  }
  // (Within the earned split's episodes a stop waits for the episode's end, as in Refine.)
  const bool stoppable = !Earned() || !warm_started_;
  learner_.Imitate(targets, weights, Incumbent(), options,
                   [&] { return Elapsed() >= deadline || (stoppable && StopRequested()); });
  learner_.ResetOptimizer();  // the imitation's moments must not push the next PPO steps
}

void Loop::WarmStart() {
  std::vector<Candidate> batch;
  std::vector<std::string> names;
  for (const NamedCandidate& w : p_.warm_starts) {
    batch.push_back(w.candidate);
    names.push_back(w.name);
  }
  if (!batch.empty()) {
    const std::vector<Verdict> verdicts = Judge(batch, "warm start", names);
    // The machine as the policy sees it: from the fastest valid warm start's busy times.
    const Verdict* best = nullptr;
    for (const Verdict& v : verdicts) {
      if (v.valid && !v.busy.empty() && (best == nullptr || v.seconds < best->seconds)) best = &v;
    }
    if (best != nullptr) {
      machine_ = {SecondsPerWork(p_.features, best->busy), p_.seconds_per_byte};
      learner_.SetMachine(machine_.first, machine_.second);
    }
  }
  // On a slow or busy machine supervised steps can take seconds: imitation must not eat the
  // budget the policy needs to learn from its own samples.
  if (o_.use_policy) {
    ImitateElite(o_.warm_start_imitation, o_.warm_start_imitation_share * o_.max_wall_seconds);
  }
  warm_started_ = true;
}

void Loop::PolicyStep() {
  const std::optional<Candidate> incumbent = Incumbent();
  Batch batch = learner_.Sample(incumbent);
  const std::vector<Verdict> verdicts = Judge(batch.candidates, "policy");
  std::vector<double> rewards;
  double mean_seconds = 0;
  for (size_t k = 0; k < verdicts.size(); ++k) {
    const Verdict& v = verdicts[k];
    rewards.push_back(RewardFor(v));
    mean_seconds +=
        (v.valid ? v.seconds : o_.failing_step_seconds) / static_cast<double>(verdicts.size());
    if (v.valid && (!recent_ || v.seconds < recent_->seconds)) {
      recent_ = RankedCandidate{batch.candidates[k], v.seconds, "policy"};
    }
  }
  const UpdateStats stats = learner_.Update(batch, rewards);
  ++step_;
  if (o_.self_imitation_every > 0 && step_ % o_.self_imitation_every == 0) {
    ImitateElite(o_.self_imitation, PolicyDeadline());
  }
  Report("policy", mean_seconds, stats);
  if (o_.use_refinement && o_.refine_every > 0 && step_ % o_.refine_every == 0 && recent_) {
    const RankedCandidate seed = *recent_;
    recent_.reset();
    Refine(seed.candidate, o_.refine_rounds, kInfinity);
  }
}

EpisodeKind Loop::NextEpisode() const {
  if (step_ >= o_.policy_steps) return EpisodeKind::kRefinement;
  // Refinement's episodes count against final_refine_rounds, and need a valid start.
  if (final_rounds_ >= o_.final_refine_rounds || elite_.empty()) return EpisodeKind::kPolicy;
  return earned_split_.Next();
}

void Loop::RunEpisodes() {
  while ((step_ < o_.policy_steps || final_rounds_ < o_.final_refine_rounds) &&
         !OutOfEvaluations() && Elapsed() < o_.max_wall_seconds) {
    const EpisodeKind kind = NextEpisode();
    if (kind == EpisodeKind::kRefinement && elite_.empty()) return;  // nothing to refine from
    const double best_before = elite_.empty() ? kInfinity : elite_.front().seconds;
    const int evaluations_before = evaluations_;
    if (kind == EpisodeKind::kPolicy) {
      // Steps up to and including the next one that ends in a refinement slice.
      do {
        PolicyStep();
      } while (step_ % std::max(o_.refine_every, 1) != 0 && step_ < o_.policy_steps &&
               !OutOfEvaluations() && Elapsed() < o_.max_wall_seconds);
    } else {
      const int rounds = std::min(o_.refine_rounds, o_.final_refine_rounds - final_rounds_);
      Refine(elite_.front().candidate, rounds, o_.max_wall_seconds);
      final_rounds_ += rounds;
      Report("refinement", elite_.front().seconds, {});
    }
    earned_split_.Credit(kind, best_before, elite_.empty() ? kInfinity : elite_.front().seconds,
                         evaluations_ - evaluations_before);
    SaveCheckpoint();
    if (StopRequested()) return;
  }
}

Judgement Loop::JudgementOf(const Verdict& v) const {
  return {v.valid ? v.seconds : kInfinity, v.busy};
}

const Verdict& Loop::Known(const Candidate& candidate) {
  Verdict& v = cache_.at(KeyOf(candidate));
  if (v.valid && v.busy.empty()) {
    // Restored from the log, which keeps no device times: judged again, neither counted nor
    // logged (the simulator gives the same answer), so that a resumed search goes on exactly as
    // an uninterrupted one.
    for (const graph::DeviceStats& d :
         evaluator_.Evaluate(std::span(&candidate, 1)).front().devices) {
      v.busy.push_back(d.busy_seconds);
    }
  }
  return v;
}

void Loop::Refine(const Candidate& start, int rounds, double deadline) {
  JudgeBatch judge = [&](const std::vector<Candidate>& batch) {
    Judge(batch, "refinement");
    std::vector<Judgement> judged;
    for (const Candidate& c : batch) judged.push_back(JudgementOf(Known(c)));
    return judged;
  };
  // The earned split's episodes end whole (a stop is honoured between them), so that a resumed
  // search goes on exactly as an uninterrupted one.
  const bool stoppable = !Earned();
  refiner_.Run(start, JudgementOf(Known(start)), rounds, judge, [&] {
    return OutOfEvaluations() || Elapsed() >= deadline || (stoppable && StopRequested());
  });
}

void Loop::Report(const std::string& phase, double mean_seconds, const UpdateStats& stats) {
  ++reports_;
  const double best = elite_.empty() ? kInfinity : elite_.front().seconds;
  curve_.push_back({step_, evaluations_, Elapsed(), best, mean_seconds});
  if (dir_ == nullptr) return;
  dir_->StepDone({.report = reports_,
                  .step = step_,
                  .max_steps = o_.use_policy ? o_.policy_steps : 0,
                  .evaluations = evaluations_,
                  .wall_seconds = Elapsed(),
                  .max_wall_seconds = o_.max_wall_seconds,
                  .best_seconds = best,
                  .mean_seconds = mean_seconds,
                  .entropy = stats.mean_entropy,
                  .clipped_fraction = stats.clipped_fraction,
                  .phase = phase});
}

void Loop::SaveCheckpoint() {
  if (dir_ == nullptr) return;
  nlohmann::json elite = nlohmann::json::array();
  for (const RankedCandidate& e : elite_) elite.push_back(ToJson(e));
  nlohmann::json curve = nlohmann::json::array();
  for (const CurvePoint& c : curve_) {
    curve.push_back({c.step, c.evaluations, c.wall_seconds,
                     std::isfinite(c.best_seconds) ? c.best_seconds : -1.0, c.mean_seconds});
  }
  nlohmann::json state = {{"step", step_},
                          {"reports", reports_},
                          {"evaluations", evaluations_},
                          {"elapsed_seconds", Elapsed()},
                          {"warm_started", warm_started_},
                          {"final_rounds", final_rounds_},
                          {"earned_split", earned_split_.SaveState()},
                          {"machine", {machine_.first, machine_.second}},
                          {"elite", elite},
                          {"recent", recent_ ? ToJson(*recent_) : nlohmann::json()},
                          {"curve", curve},
                          {"refiner", refiner_.SaveState()},
                          {"edit_scorer", scorer_ ? scorer_->SaveState() : std::string()}};
  dir_->Checkpoint(learner_, std::move(state),
                   elite_.empty() ? std::nullopt : std::optional(elite_.front()));
}

void Loop::Restore() {
  RunDirectory::Resumed resumed = dir_->Resume(learner_);
  const nlohmann::json& s = resumed.state;
  step_ = s.at("step");
  reports_ = s.at("reports");
  evaluations_ = s.at("evaluations");
  elapsed_before_ = s.at("elapsed_seconds");
  warm_started_ = s.at("warm_started");
  final_rounds_ = s.at("final_rounds");
  if (s.contains("earned_split")) earned_split_.LoadState(s.at("earned_split"));
  if (s.contains("machine")) {
    machine_ = {s.at("machine").at(0).get<double>(), s.at("machine").at(1).get<double>()};
    learner_.SetMachine(machine_.first, machine_.second);
  }
  for (const auto& e : s.at("elite")) {
    elite_.push_back({ParseCandidate(e.at("candidate")), e.at("seconds"), e.at("origin")});
  }
  if (!s.at("recent").is_null()) {
    const nlohmann::json& r = s.at("recent");
    recent_ = RankedCandidate{ParseCandidate(r.at("candidate")), r.at("seconds"), r.at("origin")};
  }
  for (const auto& c : s.at("curve")) {
    const double best = c[3];
    curve_.push_back({c[0], c[1], c[2], best < 0 ? kInfinity : best, c[4]});
  }
  refiner_.LoadState(s.at("refiner"));
  if (scorer_ && s.contains("edit_scorer")) scorer_->LoadState(s.at("edit_scorer"));
  for (const LogRow& row : resumed.rows) {
    cache_[KeyOf(row.candidate)] = {row.valid, row.seconds, row.reason, {}};
  }
}

SearchOutcome Loop::Run() {
  if (dir_ != nullptr && dir_->resuming()) Restore();
  start_ = Clock::now();
  SearchOutcome outcome;
  auto finish = [&](bool interrupted) {
    SaveCheckpoint();
    if (dir_ != nullptr) dir_->EndProgress();
    outcome.interrupted = interrupted;
    outcome.steps = step_;
    outcome.evaluations = evaluations_;
    outcome.wall_seconds = Elapsed();
    outcome.curve = curve_;
    outcome.elite = elite_;
    outcome.found_valid = !elite_.empty();
    if (outcome.found_valid) outcome.best = elite_.front();
    return outcome;
  };
  if (!warm_started_) {
    WarmStart();
    SaveCheckpoint();
    if (StopRequested()) return finish(true);
  }
  if (Earned()) {
    RunEpisodes();
    if (StopRequested()) return finish(true);
  }
  while (!Earned() && o_.use_policy && step_ < o_.policy_steps && !OutOfEvaluations() &&
         Elapsed() < PolicyDeadline()) {
    PolicyStep();
    if (o_.checkpoint_every > 0 && step_ % o_.checkpoint_every == 0) SaveCheckpoint();
    if (StopRequested()) return finish(true);
  }
  // The final refinement, from the best, in chunks that end at checkpoints.
  constexpr int kChunk = 10;
  while (o_.use_refinement && !elite_.empty() && final_rounds_ < o_.final_refine_rounds &&
         !OutOfEvaluations() && Elapsed() < o_.max_wall_seconds) {
    const int rounds = std::min(kChunk, o_.final_refine_rounds - final_rounds_);
    const RankedCandidate from = elite_.front();
    Refine(from.candidate, rounds, o_.max_wall_seconds);
    final_rounds_ += rounds;
    Report("refinement", elite_.front().seconds, {});
    SaveCheckpoint();
    if (StopRequested()) return finish(true);
  }
  return finish(false);
}

}  // namespace

SearchOutcome RunSearch(const SearchProblem& problem, const SearchOptions& options,
                        RunDirectory* run_dir) {
  if (problem.evaluator == nullptr) throw std::invalid_argument("the search needs an evaluator");
  return Loop(problem, options, run_dir).Run();
}

SearchOutcome RandomSearch(const CandidateEvaluator& evaluator, int evaluations, uint64_t seed,
                           int batch_size) {
  const ActionSpace& space = evaluator.space();
  std::mt19937_64 rng(seed);
  // Per step shape (a replica count, with M micro-batches and a schedule for pipelines): the
  // options its replica count allows.
  const std::vector<StepShape>& shapes = space.shapes();
  std::vector<std::vector<int>> allowed(shapes.size());
  for (size_t s = 0; s < shapes.size(); ++s) {
    for (int o = 0; o < space.num_options(); ++o) {
      if (space.Allowed(o, shapes[s].replicas)) allowed[s].push_back(o);
    }
  }
  // The number of distinct candidates, as long as it is small enough to matter.
  double space_size = 0;
  for (const auto& options : allowed) {
    space_size += std::pow(static_cast<double>(options.size()), evaluator.num_groups());
  }
  const int budget = static_cast<int>(std::min<double>(evaluations, space_size));
  std::set<std::string> seen;
  SearchOutcome outcome;
  outcome.best.seconds = kInfinity;
  const auto start = Clock::now();
  while (outcome.evaluations < budget) {
    std::vector<Candidate> batch;
    while (static_cast<int>(batch.size()) < std::min(batch_size, budget - outcome.evaluations)) {
      const size_t s = std::uniform_int_distribution<size_t>(0, shapes.size() - 1)(rng);
      Candidate c = space.WithShape(
          {shapes[s].replicas, std::vector<int>(static_cast<size_t>(evaluator.num_groups()))},
          shapes[s]);
      for (int& o : c.options) {
        o = allowed[s][std::uniform_int_distribution<size_t>(0, allowed[s].size() - 1)(rng)];
      }
      if (seen.insert(KeyOf(c)).second) batch.push_back(std::move(c));
    }
    const std::vector<graph::EvaluationResult> results = evaluator.Evaluate(batch);
    for (size_t k = 0; k < batch.size(); ++k) {
      ++outcome.evaluations;
      if (results[k].valid && results[k].step_seconds < outcome.best.seconds) {
        outcome.best = {batch[k], results[k].step_seconds, "random"};
      }
      outcome.curve.push_back({outcome.evaluations, outcome.evaluations,
                               std::chrono::duration<double>(Clock::now() - start).count(),
                               outcome.best.seconds,
                               results[k].valid ? results[k].step_seconds : 0});
    }
  }
  outcome.found_valid = std::isfinite(outcome.best.seconds);
  if (outcome.found_valid) outcome.elite = {outcome.best};
  outcome.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

SearchOutcome PolicyZeroShot(const SearchProblem& problem, const SearchOptions& options) {
  const CandidateEvaluator& evaluator = *problem.evaluator;
  const auto start = Clock::now();
  Learner learner(problem.features, evaluator.space(), options.policy, options.learner,
                  options.seed);
  std::vector<Candidate> starts;
  for (const NamedCandidate& w : problem.warm_starts) starts.push_back(w.candidate);
  const graph::EvaluationResult* fastest = nullptr;
  const std::vector<graph::EvaluationResult> judged = evaluator.Evaluate(starts);
  for (const graph::EvaluationResult& r : judged) {
    if (r.valid && !r.devices.empty() && (!fastest || r.step_seconds < fastest->step_seconds)) {
      fastest = &r;
    }
  }
  if (fastest != nullptr) {
    std::vector<double> busy;
    for (const graph::DeviceStats& d : fastest->devices) busy.push_back(d.busy_seconds);
    learner.SetMachine(SecondsPerWork(problem.features, busy), problem.seconds_per_byte);
  }
  const Candidate answer = learner.Greedy(std::nullopt);
  const graph::EvaluationResult result = evaluator.Evaluate(std::span(&answer, 1)).front();
  SearchOutcome outcome;
  outcome.evaluations = 1;
  outcome.found_valid = result.valid;
  outcome.best = {answer, result.valid ? result.step_seconds : kInfinity, "policy zero-shot"};
  if (outcome.found_valid) outcome.elite = {outcome.best};
  outcome.wall_seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return outcome;
}

}  // namespace placer::search
