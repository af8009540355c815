// The graph policy (placer/graph_policy.h) pretrained across generated graphs, and its first
// answer on models it never saw (issue 27's zero-shot row).
//
//   graph_policy_bench pretrain DIR PROBLEMS ITERATIONS ROUNDS EPOCHS
//     PretrainPolicy on PROBLEMS generated problems (placer/setup/pretraining.h's corpus: the
//     five generated families, 10-120 blocks, 2/4/8 simulated GPUs, PCIe or NVLink, one host or
//     two, batches 32-512); writes DIR/graph_policy.pt.
//   graph_policy_bench zeroshot POLICY CONFIG...
//     Per config (its model, machine and every baseline): the best baseline row; the policy's
//     greedy answer (E = 1, with the machine scale taken from the best baseline's judgement, as
//     the search takes it from its best warm start), pretrained and untrained; their ratios and
//     geometric means.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/utils.h>

#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include "placer/config/config.h"
#include "placer/graph_policy.h"
#include "placer/refiner.h"
#include "placer/setup/policy_pretraining.h"
#include "placer/setup/search_setup.h"

namespace {

using namespace placer;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

int Pretrain(int argc, char** argv) {
  if (argc != 7) return 2;
  setup::PretrainOptions corpus;
  corpus.batches = {32, 64, 128, 256, 512};
  setup::PolicyPretrainOptions o;
  o.policy.kind = search::PolicyKind::kGraph;
  o.iterations = std::stoi(argv[4]);
  o.refine_rounds = std::stoi(argv[5]);
  o.epochs = std::stoi(argv[6]);
  const auto problems = setup::GeneratedPolicyCorpus(corpus, std::stoi(argv[3]));
  setup::PretrainPolicy(problems, o, argv[2], std::cout);
  return 0;
}

double GreedySeconds(search::GraphPolicyImpl& policy, const search::SearchProblem& problem,
                     const std::vector<double>& busy) {
  policy.Bind(problem.features, problem.evaluator->space());
  policy.SetMachine(search::SecondsPerWork(problem.features, busy), problem.seconds_per_byte);
  at::Generator generator = at::detail::createCPUGenerator(1);
  const search::Candidate greedy = policy.Sample(1, std::nullopt, generator, true).candidates[0];
  const std::vector<search::Candidate> batch = {greedy};
  return search::JudgementOf(problem.evaluator->Evaluate(batch)[0]).seconds;
}

int ZeroShot(int argc, char** argv) {
  if (argc < 4) return 2;
  search::PolicyOptions options;
  options.kind = search::PolicyKind::kGraph;
  search::GraphPolicyImpl pretrained(options);
  pretrained.LoadWeights(argv[2]);
  torch::manual_seed(1);
  search::GraphPolicyImpl untrained(options);
  fmt::print("{:<44} {:>13} {:>13} {:>13} {:>9} {:>9}\n", "config", "best baseline", "zero-shot",
             "untrained", "ratio", "untr.");
  double log_sum = 0, log_untrained = 0;
  int n = 0;
  for (int a = 3; a < argc; ++a) {
    std::ostringstream quiet;
    const auto s = setup::BuildSearchSetup(config::LoadConfig(argv[a]), quiet);
    const search::SearchProblem problem = s->Problem();
    std::vector<search::Candidate> starts;
    for (const search::NamedCandidate& w : problem.warm_starts) starts.push_back(w.candidate);
    double best = kInfinity;
    std::vector<double> busy;
    for (const graph::EvaluationResult& r : problem.evaluator->Evaluate(starts)) {
      const search::Judgement j = search::JudgementOf(r);
      if (j.seconds < best) {
        best = j.seconds;
        busy = j.busy;
      }
    }
    const double zero_shot = GreedySeconds(pretrained, problem, busy);
    const double control = GreedySeconds(untrained, problem, busy);
    log_sum += std::log(zero_shot / best);
    log_untrained += std::log(control / best);
    ++n;
    fmt::print("{:<44} {:>10.3f} ms {:>10.3f} ms {:>10.3f} ms {:>9.3f} {:>9.3f}\n", argv[a],
               best * 1e3, zero_shot * 1e3, control * 1e3, zero_shot / best, control / best);
    std::fflush(stdout);
  }
  fmt::print("geometric mean of zero-shot / best baseline: {:.3f} (untrained {:.3f})\n",
             std::exp(log_sum / n), std::exp(log_untrained / n));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  int rc = 2;
  if (mode == "pretrain") rc = Pretrain(argc, argv);
  if (mode == "zeroshot") rc = ZeroShot(argc, argv);
  if (rc == 2) {
    fmt::print(stderr,
               "usage: graph_policy_bench pretrain DIR PROBLEMS ITERATIONS ROUNDS EPOCHS\n"
               "       graph_policy_bench zeroshot POLICY CONFIG...\n");
  }
  return rc;
}
