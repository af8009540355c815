#include "placer/verifier.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

namespace placer::search {

RoundOptions RoundsFor(const CandidateEvaluator& evaluator, RoundOptions measured) {
  if (evaluator.deterministic()) {
    measured.min_rounds = 1;
    measured.max_rounds = 1;
  }
  return measured;
}

SideBySideVerdict SideBySide(const CandidateEvaluator& evaluator,
                             const std::vector<Candidate>& candidates,
                             const std::vector<Role>& roles, const RoundOptions& options) {
  std::vector<Candidate> distinct;
  std::vector<size_t> slot(candidates.size());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto [it, inserted] = index.emplace(KeyOf(candidates[i]), distinct.size());
    if (inserted) distinct.push_back(candidates[i]);
    slot[i] = it->second;
  }
  // A distinct candidate's role: the simplest of its rows that may answer.
  std::vector<Entrant> entrants(distinct.size());
  for (Entrant& e : entrants) e.may_answer = false;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Role role = i < roles.size() ? roles[i] : Role{};
    Entrant& e = entrants[slot[i]];
    if (!role.may_answer) continue;
    e.simplicity = e.may_answer ? std::min(e.simplicity, role.simplicity) : role.simplicity;
    e.may_answer = true;
  }
  std::vector<std::vector<graph::EvaluationResult>> per_round(distinct.size());
  MeasureRound measure = [&](int round, const std::vector<size_t>& who) {
    std::vector<double> seconds(who.size(), std::numeric_limits<double>::quiet_NaN());
    auto keep = [&](size_t k, graph::EvaluationResult r) {
      if (r.valid) seconds[k] = r.step_seconds;
      per_round[who[k]].push_back(std::move(r));
    };
    if (options.max_rounds <= 1) {
      // One round (a simulation): the whole batch at once.
      std::vector<Candidate> batch;
      for (size_t i : who) batch.push_back(distinct[i]);
      std::vector<graph::EvaluationResult> results = evaluator.Evaluate(batch);
      for (size_t k = 0; k < who.size(); ++k) keep(k, std::move(results[k]));
      return seconds;
    }
    // Measured: each round starts one further along, so that no candidate is always measured
    // first (right after the machine was idle) or always after the same one. Each run of
    // consecutive candidates with one replica count goes in one call, which a local evaluator
    // measures one by one in this order and a pool of workers all at once.
    std::vector<size_t> order;
    for (size_t j = 0; j < who.size(); ++j) {
      order.push_back((j + static_cast<size_t>(round)) % who.size());
    }
    for (size_t begin = 0; begin < order.size();) {
      size_t end = begin;
      std::vector<Candidate> run;
      while (end < order.size() &&
             distinct[who[order[end]]].replicas == distinct[who[order[begin]]].replicas) {
        run.push_back(distinct[who[order[end++]]]);
      }
      std::vector<graph::EvaluationResult> results = evaluator.Evaluate(run);
      for (size_t j = begin; j < end; ++j) keep(order[j], std::move(results[j - begin]));
      begin = end;
    }
    return seconds;
  };
  int rounds = 0;
  const Standing standing = JudgeInRounds(entrants, options, measure, &rounds);

  std::vector<SideBySideResult> chosen(distinct.size());
  for (size_t i = 0; i < distinct.size(); ++i) {
    std::vector<graph::EvaluationResult>& results = per_round[i];
    chosen[i].round_seconds = entrants[i].rounds;
    // Invalid rounds sort last; an invalid placement stays invalid.
    std::stable_sort(results.begin(), results.end(), [](const auto& a, const auto& b) {
      if (a.valid != b.valid) return a.valid;
      return a.step_seconds < b.step_seconds;
    });
    const auto valid = static_cast<size_t>(
        std::count_if(results.begin(), results.end(), [](const auto& r) { return r.valid; }));
    chosen[i].result = valid > 0 ? results[(valid - 1) / 2] : results.front();
    if (valid > 0) chosen[i].result.step_seconds = GeometricMean(entrants[i].rounds);
  }
  SideBySideVerdict verdict;
  verdict.rounds = rounds;
  for (size_t i = 0; i < candidates.size(); ++i) {
    verdict.results.push_back(chosen[slot[i]]);
    verdict.tied.push_back(standing.tied[slot[i]]);
    verdict.to_fastest.push_back(standing.to_fastest[slot[i]]);
    verdict.placement.push_back(slot[i]);
  }
  // Rows of the fastest and of the answer: the first listed, and, for the answer, the first
  // with its distinct candidate's (simplest) role.
  for (size_t i = 0; i < candidates.size(); ++i) {
    const Role role = i < roles.size() ? roles[i] : Role{};
    if (!role.may_answer) continue;
    if (standing.fastest == slot[i] && !verdict.fastest) verdict.fastest = i;
    if (standing.answer == slot[i] && !verdict.answer &&
        role.simplicity == entrants[slot[i]].simplicity) {
      verdict.answer = i;
    }
  }
  return verdict;
}

}  // namespace placer::search
