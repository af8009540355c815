// Issue 27's protocol for the edit proposers (placer/edit_proposer.h), at equal evaluations.
//
//   edit_bench pretrain DIR [ITERATIONS PROBLEMS ROUNDS]   (setup::Pretrain into DIR)
//   edit_bench heldout MODEL_FILE SEEDS BUDGETS CONFIG...
//     For every config (the held-out set, bench/RESULTS.md), its warm starts (every baseline)
//     judged first, then refinement from the best of them, once per arm and seed: uniform edits,
//     the hand-written estimate, the learned scorer of MODEL_FILE (learning online from the run's
//     own judgements). BUDGETS ("64,512") are simulator evaluations, the warm starts included;
//     the best step time within each budget is read off one run per arm and seed. Prints per
//     config and budget each arm's median over seeds; then each arm's geometric mean relative to
//     uniform, the learned arm against the better non-learned arm, win/tie/loss (0.5% band).
//   edit_bench validate MODEL_FILE SEEDS BUDGETS PROBLEMS MAX_GROUPS
//     The same on generated problems of another seed than any pretraining's (batches 32, 128,
//     512; MAX_GROUPS groups): where variants are compared, never on the held-out set.
//   EDIT_BENCH_SCREENING: edits drawn per edit judged (default 4). EDIT_BENCH_GROUPS,
//   EDIT_BENCH_MAX_BLOCKS, EDIT_BENCH_BATCHES: the pretraining corpus's variants.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "bench/arguments.h"
#include "placer/config/config.h"
#include "placer/edit_model.h"
#include "placer/refiner.h"
#include "placer/setup/portable_float.h"
#include "placer/setup/pretraining.h"
#include "placer/setup/search_setup.h"
#include "placer/setup/simulated_problem.h"
#include "runtime/statistics.h"

namespace {

using namespace placer;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

// What one arm searches.
struct Problem {
  std::string name;
  const search::CandidateEvaluator* evaluator = nullptr;
  const graph::GroupFeatures* features = nullptr;
  std::vector<search::Candidate> starts;
  double seconds_per_byte = 0;
};

int Screening() {
  const char* text = std::getenv("EDIT_BENCH_SCREENING");
  return text != nullptr ? std::stoi(text) : search::EditGuide{}.screening;
}

// Best step time after each evaluation, over one refinement run.
std::vector<double> Run(const Problem& p, search::EditProposal arm, const std::string& model_file,
                        uint64_t seed, int max_evaluations) {
  const search::CandidateEvaluator& evaluator = *p.evaluator;
  std::map<std::string, search::Judgement> cache;
  std::vector<double> best_after;  // [k]: best after k + 1 evaluations
  double best = kInfinity;
  auto judge = [&](const std::vector<search::Candidate>& batch) {
    std::vector<search::Candidate> fresh;
    std::set<std::string> keys;
    for (const search::Candidate& c : batch) {
      if (cache.count(KeyOf(c)) == 0 && keys.insert(KeyOf(c)).second &&
          static_cast<int>(best_after.size() + fresh.size()) < max_evaluations) {
        fresh.push_back(c);
      }
    }
    const std::vector<graph::EvaluationResult> results = evaluator.Evaluate(fresh);
    for (size_t i = 0; i < fresh.size(); ++i) {
      search::Judgement j = search::JudgementOf(results[i]);
      best = std::min(best, j.seconds);
      best_after.push_back(best);
      cache[KeyOf(fresh[i])] = std::move(j);
    }
    std::vector<search::Judgement> out;
    for (const search::Candidate& c : batch) {
      auto it = cache.find(KeyOf(c));
      out.push_back(it != cache.end() ? it->second : search::Judgement{kInfinity, {}});
    }
    return out;
  };
  const std::vector<search::Candidate>& starts = p.starts;
  const std::vector<search::Judgement> judged = judge(starts);
  size_t first = 0;
  for (size_t i = 1; i < judged.size(); ++i) {
    if (judged[i].seconds < judged[first].seconds) first = i;
  }
  search::Refiner refiner(evaluator.space(), *p.features, {}, seed);
  search::EstimateScorer estimate;
  std::unique_ptr<search::EditModel> learned;
  search::EditGuide guide;
  guide.seconds_per_byte = p.seconds_per_byte;
  guide.screening = Screening();
  if (arm == search::EditProposal::kEstimate) guide.scorer = &estimate;
  if (arm == search::EditProposal::kLearned) {
    learned = search::EditModel::Load(model_file);
    guide.scorer = learned.get();
  }
  refiner.SetGuide(guide);
  refiner.Run(starts[first], judged[first], 1 << 20, judge,
              [&] { return static_cast<int>(best_after.size()) >= max_evaluations; });
  if (std::getenv("EDIT_BENCH_DEBUG") != nullptr) {
    fmt::print(stderr, "arm {} seed {}: {} evaluations, best {:.4f} ms (start {:.4f} ms)\n",
               search::EditProposalName(arm), seed, best_after.size(), best * 1e3,
               judged[first].seconds * 1e3);
  }
  return best_after;
}

double At(const std::vector<double>& best_after, int budget) {
  if (best_after.empty()) return kInfinity;
  return best_after[static_cast<size_t>(std::min<int>(budget, static_cast<int>(best_after.size())) -
                                        1)];
}

// Per problem and budget, each arm's median step time over the seeds.
struct Tally {
  std::vector<std::string> problems;
  std::map<int, std::vector<std::array<double, 3>>> medians;  // [budget][problem][arm]
};

// Every arm on `p`, `seeds` seeds; prints its table and adds to `tally`.
void Compare(const Problem& p, const std::string& model_file, int seeds,
             const std::vector<int>& budgets, Tally& tally) {
  const int max_budget = *std::max_element(budgets.begin(), budgets.end());
  const std::vector<search::EditProposal> arms = {search::EditProposal::kUniform,
                                                  search::EditProposal::kEstimate,
                                                  search::EditProposal::kLearned};
  double baseline = kInfinity;
  for (const graph::EvaluationResult& r : p.evaluator->Evaluate(p.starts)) {
    if (r.valid) baseline = std::min(baseline, r.step_seconds);
  }
  fmt::print("\n{} ({} groups, {} warm starts, best of them {:.3f} ms)\n", p.name,
             p.evaluator->num_groups(), p.starts.size(), baseline * 1e3);
  std::vector<std::vector<std::vector<double>>> curves(arms.size());  // [arm][seed]
  for (int seed = 1; seed <= seeds; ++seed) {
    for (size_t arm = 0; arm < arms.size(); ++arm) {
      curves[arm].push_back(Run(p, arms[arm], model_file, static_cast<uint64_t>(seed), max_budget));
    }
  }
  fmt::print("{:>6} {:>12} {:>12} {:>12} {:>10} {:>10}\n", "E", "uniform ms", "estimate ms",
             "learned ms", "E/uniform", "L/uniform");
  for (int budget : budgets) {
    std::array<double, 3> median{};
    for (size_t arm = 0; arm < arms.size(); ++arm) {
      std::vector<double> at;
      for (const auto& c : curves[arm]) at.push_back(At(c, budget));
      median[arm] = runtime::Median(at);
    }
    tally.medians[budget].push_back(median);
    fmt::print("{:>6} {:>12.3f} {:>12.3f} {:>12.3f} {:>10.3f} {:>10.3f}\n", budget, median[0] * 1e3,
               median[1] * 1e3, median[2] * 1e3, median[1] / median[0], median[2] / median[0]);
  }
  tally.problems.push_back(p.name);
  std::fflush(stdout);
}

// The protocol's summary: each arm's geometric mean (over problems) of its median relative to
// uniform refinement's; the best non-learned arm is the one with the lower geometric mean; the
// learned arm against it per problem (win, tie, loss with a 0.5% band) and at its worst.
void Summarise(const Tally& tally, int seeds, const std::vector<int>& budgets) {
  fmt::print("\nover {} problems, {} seeds each (medians over seeds):\n", tally.problems.size(),
             seeds);
  fmt::print("{:>6} {:>18} {:>18} {:>14} {:>20} {:>14} {:>8}\n", "E", "estimate/uniform",
             "learned/uniform", "best non-learned", "learned/best-NL", "win/tie/loss", "worst");
  for (int budget : budgets) {
    const auto& rows = tally.medians.at(budget);
    auto geomean = [&](size_t arm) {
      double sum = 0;
      for (const auto& m : rows) sum += std::log(m[arm] / m[0]);
      return std::exp(sum / static_cast<double>(rows.size()));
    };
    const double estimate = geomean(1), learned = geomean(2);
    const size_t best = estimate < 1 ? 1 : 0;
    std::array<int, 3> w{};
    double worst = 0;
    for (const auto& m : rows) {
      const double r = m[2] / m[best];
      ++w[r < 0.995 ? 0 : r <= 1.005 ? 1 : 2];
      worst = std::max(worst, r);
    }
    fmt::print("{:>6} {:>18.3f} {:>18.3f} {:>14} {:>20.3f} {:>14} {:>8.3f}\n", budget, estimate,
               learned, best == 1 ? "estimate" : "uniform", learned / (best == 1 ? estimate : 1.0),
               fmt::format("{}/{}/{}", w[0], w[1], w[2]), worst);
  }
}

}  // namespace

int main(int argc, char** argv) {
  placer::setup::UsePortableFloatKernels();  // its pretraining: the same file on every host
  if (argc >= 3 && std::string(argv[1]) == "pretrain") {
    setup::PretrainOptions o;
    if (argc > 3) o.iterations = std::stoi(argv[3]);
    if (argc > 4) o.problems_per_iteration = std::stoi(argv[4]);
    if (argc > 5) o.refine_rounds = std::stoi(argv[5]);
    // Corpus variants, for trying them against the validation problems (never the held-out set).
    if (const char* groups = std::getenv("EDIT_BENCH_GROUPS")) o.max_groups = std::stoi(groups);
    if (const char* blocks = std::getenv("EDIT_BENCH_MAX_BLOCKS")) o.max_blocks = std::stoi(blocks);
    if (const char* batches = std::getenv("EDIT_BENCH_BATCHES")) {
      o.batches.clear();
      for (int b : bench::IntList(batches)) o.batches.push_back(b);
    }
    setup::Pretrain(o, argv[2], std::cout);
    return 0;
  }
  if (argc >= 7 && std::string(argv[1]) == "validate") {
    const std::string model_file = argv[2];
    const int seeds = std::stoi(argv[3]);
    const std::vector<int> budgets = bench::IntList(argv[4]);
    const int problems = std::stoi(argv[5]);
    setup::PretrainOptions o;
    o.seed = 1'000'003;  // never a pretraining seed of the shipped command
    o.max_groups = std::stoi(argv[6]);
    o.max_blocks = 4 * o.max_groups;
    o.min_blocks = o.max_groups / 2;
    o.batches = {32, 128, 512};
    Tally tally;
    for (int i = 0; i < problems; ++i) {
      const setup::CorpusProblem corpus = setup::CorpusProblemFor(o, 0, i);
      const setup::CorpusInstance instance(corpus, o);
      Compare({corpus.Describe(), instance.problem->evaluator.get(), &instance.problem->features,
               instance.starts, instance.seconds_per_byte},
              model_file, seeds, budgets, tally);
    }
    Summarise(tally, seeds, budgets);
    return 0;
  }
  if (argc < 6 || std::string(argv[1]) != "heldout") {
    std::cerr << "usage: edit_bench pretrain DIR [ITERATIONS PROBLEMS ROUNDS]\n"
                 "       edit_bench heldout MODEL_FILE SEEDS BUDGETS CONFIG...\n"
                 "       edit_bench validate MODEL_FILE SEEDS BUDGETS PROBLEMS MAX_GROUPS\n";
    return 2;
  }
  const std::string model_file = argv[2];
  const int seeds = std::stoi(argv[3]);
  const std::vector<int> budgets = bench::IntList(argv[4]);
  Tally tally;
  for (int a = 5; a < argc; ++a) {
    std::ostringstream quiet;
    const auto s = setup::BuildSearchSetup(config::LoadConfig(argv[a]), quiet);
    const search::SearchProblem problem = s->Problem();
    std::vector<search::Candidate> starts;
    for (const search::NamedCandidate& w : problem.warm_starts) starts.push_back(w.candidate);
    Compare({argv[a], s->simulated.get(), &s->features, starts, problem.seconds_per_byte},
            model_file, seeds, budgets, tally);
  }
  Summarise(tally, seeds, budgets);
  return 0;
}
