#include "placer/verifier.h"

#include <algorithm>
#include <map>

namespace placer::search {

int RoundsFor(const CandidateEvaluator& evaluator, int measured_rounds) {
  return evaluator.name() == "simulated" ? 1 : measured_rounds;
}

std::vector<SideBySideResult> SideBySide(const CandidateEvaluator& evaluator,
                                         const std::vector<Candidate>& candidates, int rounds) {
  std::vector<Candidate> distinct;
  std::vector<size_t> slot(candidates.size());
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < candidates.size(); ++i) {
    auto [it, inserted] = index.emplace(KeyOf(candidates[i]), distinct.size());
    if (inserted) distinct.push_back(candidates[i]);
    slot[i] = it->second;
  }
  std::vector<std::vector<runtime::EvaluationResult>> per_round(distinct.size());
  for (int round = 0; round < rounds; ++round) {
    if (rounds == 1) {
      // One round (a simulation): the whole batch at once.
      std::vector<runtime::EvaluationResult> results = evaluator.Evaluate(distinct);
      for (size_t i = 0; i < distinct.size(); ++i) per_round[i].push_back(std::move(results[i]));
      break;
    }
    // Measured: each round starts one further along, so that no candidate is always measured
    // first (right after the machine was idle) or always after the same one. Each run of
    // consecutive candidates with one replica count goes in one call, which a local evaluator
    // measures one by one in this order and a pool of workers all at once.
    std::vector<size_t> order;
    for (size_t j = 0; j < distinct.size(); ++j) {
      order.push_back((j + static_cast<size_t>(round)) % distinct.size());
    }
    for (size_t begin = 0; begin < order.size();) {
      size_t end = begin;
      std::vector<Candidate> run;
      while (end < order.size() &&
             distinct[order[end]].replicas == distinct[order[begin]].replicas) {
        run.push_back(distinct[order[end++]]);
      }
      std::vector<runtime::EvaluationResult> results = evaluator.Evaluate(run);
      for (size_t j = begin; j < end; ++j) {
        per_round[order[j]].push_back(std::move(results[j - begin]));
      }
      begin = end;
    }
  }
  std::vector<SideBySideResult> chosen(distinct.size());
  for (size_t i = 0; i < distinct.size(); ++i) {
    std::vector<runtime::EvaluationResult>& results = per_round[i];
    for (const runtime::EvaluationResult& r : results) {
      if (r.valid) chosen[i].round_seconds.push_back(r.step_seconds);
    }
    // Invalid rounds sort last; an invalid placement stays invalid.
    std::stable_sort(results.begin(), results.end(), [](const auto& a, const auto& b) {
      if (a.valid != b.valid) return a.valid;
      return a.step_seconds < b.step_seconds;
    });
    const auto valid = static_cast<size_t>(
        std::count_if(results.begin(), results.end(), [](const auto& r) { return r.valid; }));
    chosen[i].result = valid > 0 ? results[(valid - 1) / 2] : results.front();
  }
  std::vector<SideBySideResult> out;
  for (size_t i = 0; i < candidates.size(); ++i) out.push_back(chosen[slot[i]]);
  return out;
}

}  // namespace placer::search
