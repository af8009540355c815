// Issue 27's protocol for the edit proposers (placer/edit_proposer.h), at equal evaluations.
//
//   edit_bench pretrain DIR [ITERATIONS PROBLEMS ROUNDS]   (setup::Pretrain into DIR)
//   edit_bench heldout MODEL_FILE SEEDS BUDGETS CONFIG...
//     For every config (the held-out set, bench/RESULTS.md), its warm starts (every baseline)
//     judged first, then refinement from the best of them, once per arm and seed: uniform edits,
//     the hand-written estimate, the group-level schedule (the critical-path control), the
//     learned scorer of MODEL_FILE (learning online from the run's own judgements). BUDGETS
//     ("64,512") are simulator evaluations, the warm starts included; the best step time within
//     each budget is read off one run per arm and seed. Prints per config and budget each arm's
//     median over seeds; then each arm's geometric mean relative to uniform, the learned arm
//     against the better non-learned arm, win/tie/loss (0.5% band).
//   edit_bench validate MODEL_FILE SEEDS BUDGETS PROBLEMS MAX_GROUPS
//     The same on generated problems of another seed than any pretraining's (batches 32, 128,
//     512; MAX_GROUPS groups): where variants are compared, never on the held-out set.
//   edit_bench fit PROBLEMS MAX_GROUPS
//     How well each hand-written estimate orders candidates 1-4 random edits from the best warm
//     start of each validation problem: Spearman's correlation with the simulator, overall and
//     within 5% of the start (EDIT_BENCH_DEBUG=1 prints candidates and their transfers).
//   EDIT_BENCH_SCREENING: edits drawn per edit judged (default 4). EDIT_BENCH_GROUPS,
//   EDIT_BENCH_MAX_BLOCKS, EDIT_BENCH_BATCHES: the pretraining corpus's variants.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <map>
#include <random>
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
  search::ScheduleCosts schedule_costs;
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
  search::EstimateScorer estimate, scheduled(true);
  std::unique_ptr<search::EditModel> learned;
  search::EditGuide guide;
  guide.seconds_per_byte = p.seconds_per_byte;
  guide.schedule_costs = p.schedule_costs;
  guide.screening = Screening();
  if (arm == search::EditProposal::kEstimate) guide.scorer = &estimate;
  if (arm == search::EditProposal::kSchedule) guide.scorer = &scheduled;
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

// The arms, in the order of their columns: the non-learned ones first, the learned one last.
constexpr std::array<search::EditProposal, 4> kArms = {
    search::EditProposal::kUniform, search::EditProposal::kEstimate,
    search::EditProposal::kSchedule, search::EditProposal::kLearned};
constexpr size_t kLearnedArm = kArms.size() - 1;
using ArmTimes = std::array<double, kArms.size()>;

// Per problem and budget, each arm's median step time over the seeds.
struct Tally {
  std::vector<std::string> problems;
  std::map<int, std::vector<ArmTimes>> medians;  // [budget][problem][arm]
};

// Every arm on `p`, `seeds` seeds; prints its table and adds to `tally`.
void Compare(const Problem& p, const std::string& model_file, int seeds,
             const std::vector<int>& budgets, Tally& tally) {
  const int max_budget = *std::max_element(budgets.begin(), budgets.end());
  double baseline = kInfinity;
  for (const graph::EvaluationResult& r : p.evaluator->Evaluate(p.starts)) {
    if (r.valid) baseline = std::min(baseline, r.step_seconds);
  }
  fmt::print("\n{} ({} groups, {} warm starts, best of them {:.3f} ms)\n", p.name,
             p.evaluator->num_groups(), p.starts.size(), baseline * 1e3);
  std::vector<std::vector<std::vector<double>>> curves(kArms.size());  // [arm][seed]
  for (int seed = 1; seed <= seeds; ++seed) {
    for (size_t arm = 0; arm < kArms.size(); ++arm) {
      curves[arm].push_back(
          Run(p, kArms[arm], model_file, static_cast<uint64_t>(seed), max_budget));
    }
  }
  fmt::print("{:>6}", "E");
  for (search::EditProposal arm : kArms) fmt::print(" {:>12}", search::EditProposalName(arm));
  for (size_t arm = 1; arm < kArms.size(); ++arm) {
    fmt::print(" {:>10}", fmt::format("{:.8}/unif", search::EditProposalName(kArms[arm])));
  }
  fmt::print("   (ms)\n");
  for (int budget : budgets) {
    ArmTimes median{};
    for (size_t arm = 0; arm < kArms.size(); ++arm) {
      std::vector<double> at;
      for (const auto& c : curves[arm]) at.push_back(At(c, budget));
      median[arm] = runtime::Median(at);
    }
    tally.medians[budget].push_back(median);
    fmt::print("{:>6}", budget);
    for (double m : median) fmt::print(" {:>12.3f}", m * 1e3);
    for (size_t arm = 1; arm < kArms.size(); ++arm)
      fmt::print(" {:>10.3f}", median[arm] / median[0]);
    fmt::print("\n");
  }
  tally.problems.push_back(p.name);
  std::fflush(stdout);
}

// The protocol's summary: each arm's geometric mean (over problems) of its median relative to
// uniform refinement's; the best non-learned arm is the one with the lowest geometric mean; the
// learned arm against it per problem (win, tie, loss with a 0.5% band) and at its worst.
void Summarise(const Tally& tally, int seeds, const std::vector<int>& budgets) {
  fmt::print(
      "\nover {} problems, {} seeds each (medians over seeds), geometric means relative to "
      "uniform edits:\n",
      tally.problems.size(), seeds);
  fmt::print("{:>6}", "E");
  for (size_t arm = 1; arm < kArms.size(); ++arm) {
    fmt::print(" {:>10}", search::EditProposalName(kArms[arm]));
  }
  fmt::print(" {:>16} {:>16} {:>14} {:>8}\n", "best non-learned", "learned/best-NL", "win/tie/loss",
             "worst");
  for (int budget : budgets) {
    const auto& rows = tally.medians.at(budget);
    auto geomean = [&](size_t arm) {
      double sum = 0;
      for (const auto& m : rows) sum += std::log(m[arm] / m[0]);
      return std::exp(sum / static_cast<double>(rows.size()));
    };
    size_t best = 0;
    for (size_t arm = 1; arm < kLearnedArm; ++arm) {
      if (geomean(arm) < geomean(best)) best = arm;
    }
    std::array<int, 3> w{};
    double worst = 0;
    for (const auto& m : rows) {
      const double r = m[kLearnedArm] / m[best];
      ++w[r < 0.995 ? 0 : r <= 1.005 ? 1 : 2];
      worst = std::max(worst, r);
    }
    fmt::print("{:>6}", budget);
    for (size_t arm = 1; arm < kArms.size(); ++arm) fmt::print(" {:>10.3f}", geomean(arm));
    fmt::print(" {:>16} {:>16.3f} {:>14} {:>8.3f}\n", search::EditProposalName(kArms[best]),
               geomean(kLearnedArm) / geomean(best), fmt::format("{}/{}/{}", w[0], w[1], w[2]),
               worst);
  }
}

// How well each hand-written estimate orders candidates a few random edits away from the best
// warm start: Spearman's correlation of its predicted log change with the simulator's, over
// `samples` valid candidates.
void Fit(const Problem& p, int samples) {
  const std::vector<graph::EvaluationResult> judged = p.evaluator->Evaluate(p.starts);
  size_t first = 0;
  for (size_t i = 1; i < judged.size(); ++i) {
    if (judged[i].valid &&
        (!judged[first].valid || judged[i].step_seconds < judged[first].step_seconds)) {
      first = i;
    }
  }
  const search::Judgement now = search::JudgementOf(judged[first]);
  search::EditEstimator estimator(p.evaluator->space(), *p.features, p.seconds_per_byte,
                                  p.schedule_costs);
  estimator.SetCurrent(p.starts[first], now.seconds, now.busy);
  search::Refiner refiner(p.evaluator->space(), *p.features, {}, 7);
  std::mt19937_64 rng(11);
  std::vector<search::Candidate> candidates;
  std::vector<search::EditKind> kinds;
  for (int i = 0; i < 2 * samples; ++i) {
    search::Candidate c = p.starts[first];
    const int edits = std::uniform_int_distribution<int>(1, 4)(rng);
    search::EditKind kind = search::EditKind::kMoveGroup;
    for (int e = 0; e < edits; ++e) {
      kind = static_cast<search::EditKind>(
          std::uniform_int_distribution<int>(0, search::kEditKinds - 1)(rng));
      c = refiner.Apply(kind, c, now.busy);
    }
    candidates.push_back(c);
    kinds.push_back(kind);
  }
  const std::vector<graph::EvaluationResult> results = p.evaluator->Evaluate(candidates);
  std::vector<double> truth, estimate, schedule;
  for (size_t i = 0; i < candidates.size() && static_cast<int>(truth.size()) < samples; ++i) {
    if (!results[i].valid) continue;
    const search::EditFeatureRow row = estimator.Features(candidates[i], kinds[i]);
    truth.push_back(std::log(results[i].step_seconds / now.seconds));
    estimate.push_back(search::EditEstimator::EstimatedLogChange(row));
    schedule.push_back(search::EditEstimator::ScheduledLogChange(row));
    if (std::getenv("EDIT_BENCH_DEBUG") != nullptr && truth.size() <= 25) {
      fmt::print("  {} -> {}: truth {:+.3f} estimate {:+.3f} schedule {:+.3f}\n",
                 search::FormatCandidate(p.starts[first]).substr(0, 12),
                 search::FormatCandidate(candidates[i]).substr(0, 40), truth.back(),
                 estimate.back(), schedule.back());
      if (truth.back() > 0.05) {
        for (const graph::TransferStats& t : results[i].transfers) {
          fmt::print("      {}->{}: {} bytes in {} copies, {:.3f} ms\n", t.from, t.to, t.bytes,
                     t.count, t.seconds * 1e3);
        }
        for (const graph::DeviceStats& d : results[i].devices) {
          fmt::print("      busy {:.3f} ms\n", d.busy_seconds * 1e3);
        }
        fmt::print(
            "      step {:.3f} ms (start {:.3f} ms), typical {:.3g} s/B, {:.3g} s/copy, {:.3g} "
            "s/op\n",
            results[i].step_seconds * 1e3, now.seconds * 1e3, p.seconds_per_byte,
            p.schedule_costs.seconds_per_copy, p.schedule_costs.seconds_per_op);
      }
    }
  }
  // The same among the candidates within 5% of the start: where refinement's choices lie.
  std::vector<double> near_truth, near_estimate, near_schedule;
  int improving = 0, improving_in_top = 0;
  std::vector<double> sorted_schedule = schedule;
  std::sort(sorted_schedule.begin(), sorted_schedule.end());
  const double quartile = sorted_schedule[sorted_schedule.size() / 4];
  for (size_t i = 0; i < truth.size(); ++i) {
    if (truth[i] < -1e-4) {
      ++improving;
      if (schedule[i] <= quartile) ++improving_in_top;
    }
    if (std::abs(truth[i]) > 0.05) continue;
    near_truth.push_back(truth[i]);
    near_estimate.push_back(estimate[i]);
    near_schedule.push_back(schedule[i]);
  }
  fmt::print(
      "{}: {} valid of {}, Spearman with the simulator: estimate {:.3f}, schedule {:.3f}; "
      "within 5%: {} of them, estimate {:.3f}, schedule {:.3f}; {} improve, {} of them in "
      "the schedule's best quarter\n",
      p.name, truth.size(), candidates.size(), runtime::Spearman(truth, estimate),
      runtime::Spearman(truth, schedule), near_truth.size(),
      near_truth.size() > 2 ? runtime::Spearman(near_truth, near_estimate) : 0.0,
      near_truth.size() > 2 ? runtime::Spearman(near_truth, near_schedule) : 0.0, improving,
      improving_in_top);
  std::fflush(stdout);
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
    const setup::PretrainOptions o = setup::ValidationProblems(std::stoi(argv[6]));
    Tally tally;
    for (int i = 0; i < problems; ++i) {
      const setup::CorpusProblem corpus = setup::CorpusProblemFor(o, 0, i);
      const setup::CorpusInstance instance(corpus, o);
      Compare({corpus.Describe(), instance.problem->evaluator.get(), &instance.problem->features,
               instance.starts, instance.seconds_per_byte, instance.schedule_costs},
              model_file, seeds, budgets, tally);
    }
    Summarise(tally, seeds, budgets);
    return 0;
  }
  if (argc >= 4 && std::string(argv[1]) == "fit") {
    const setup::PretrainOptions o = setup::ValidationProblems(std::stoi(argv[3]));
    for (int i = 0; i < std::stoi(argv[2]); ++i) {
      const setup::CorpusProblem corpus = setup::CorpusProblemFor(o, 0, i);
      const setup::CorpusInstance instance(corpus, o);
      Fit({corpus.Describe(), instance.problem->evaluator.get(), &instance.problem->features,
           instance.starts, instance.seconds_per_byte, instance.schedule_costs},
          200);
    }
    return 0;
  }
  if (argc < 6 || std::string(argv[1]) != "heldout") {
    std::cerr << "usage: edit_bench pretrain DIR [ITERATIONS PROBLEMS ROUNDS]\n"
                 "       edit_bench heldout MODEL_FILE SEEDS BUDGETS CONFIG...\n"
                 "       edit_bench validate MODEL_FILE SEEDS BUDGETS PROBLEMS MAX_GROUPS\n"
                 "       edit_bench fit PROBLEMS MAX_GROUPS\n";
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
    Compare({argv[a], s->simulated.get(), &s->features, starts, problem.seconds_per_byte,
             problem.schedule_costs},
            model_file, seeds, budgets, tally);
  }
  Summarise(tally, seeds, budgets);
  return 0;
}
