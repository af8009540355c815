// The graph policy (placer/graph_policy.h) pretrained across generated graphs, and its first
// answer on models it never saw (issue 27's zero-shot row).
//
//   graph_policy_bench pretrain DIR PROBLEMS ITERATIONS ROUNDS EPOCHS [MAX_GROUPS [pipelines]]
//     PretrainPolicy on PROBLEMS generated problems (placer/setup/pretraining.h's corpus: the
//     five generated families, 10-120 blocks, 2/4/8 simulated GPUs, PCIe or NVLink, one host or
//     two, batches 32-512; coarsened to MAX_GROUPS groups, 64 by default); writes
//     DIR/graph_policy.pt. With "pipelines", each problem's space has the search's default
//     micro-batch counts too.
//   graph_policy_bench validate POLICY PROBLEMS MAX_GROUPS [pipelines]
//     The same on generated problems of a seed no pretraining uses (up to 600 blocks, coarsened
//     to MAX_GROUPS groups): where the policy and its pretraining are tried, never on issue 27's
//     held-out set. Prints each answer's shape beside the best baseline's.
//   graph_policy_bench zeroshot POLICY CONFIG...
//     Per config (its model, machine and every baseline): the best baseline row; the policy's
//     greedy answer (E = 1, with the machine scale taken from the best baseline's judgement, as
//     the search takes it from its best warm start), pretrained and untrained; their ratios and
//     geometric means.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <torch/utils.h>

#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <memory>
#include <set>
#include <sstream>

#include "placer/config/config.h"
#include "placer/graph_policy.h"
#include "placer/refiner.h"
#include "placer/setup/policy_pretraining.h"
#include "placer/setup/portable_float.h"
#include "placer/setup/search_setup.h"
#include "placer/setup/simulated_problem.h"

namespace {

using namespace placer;
constexpr double kInfinity = std::numeric_limits<double>::infinity();

int Pretrain(int argc, char** argv) {
  if (argc < 7 || argc > 9) return 2;
  setup::PretrainOptions corpus;
  corpus.batches = {32, 64, 128, 256, 512};
  setup::PolicyPretrainOptions o;
  o.policy.kind = search::PolicyKind::kGraph;
  o.iterations = std::stoi(argv[4]);
  o.refine_rounds = std::stoi(argv[5]);
  o.epochs = std::stoi(argv[6]);
  if (argc >= 8) o.max_groups = std::stoi(argv[7]);
  const bool pipelines = argc == 9 && std::string(argv[8]) == "pipelines";
  const auto problems = setup::GeneratedPolicyCorpus(corpus, std::stoi(argv[3]), pipelines);
  setup::PretrainPolicy(problems, o, argv[2], std::cout);
  return 0;
}

double GreedySeconds(search::GraphPolicyImpl& policy, const search::SearchProblem& problem,
                     const std::vector<double>& busy, search::Candidate* answer) {
  policy.Bind(problem.features, problem.evaluator->space());
  policy.SetMachine(search::SecondsPerWork(problem.features, busy), problem.seconds_per_byte);
  at::Generator generator = at::detail::createCPUGenerator(1);
  const search::Candidate greedy = policy.Sample(1, std::nullopt, generator, true).candidates[0];
  if (answer != nullptr) *answer = greedy;
  const std::vector<search::Candidate> batch = {greedy};
  return search::JudgementOf(problem.evaluator->Evaluate(batch)[0]).seconds;
}

struct Tally {
  double log_pretrained = 0, log_untrained = 0;
  int n = 0;
};

void Row(const std::string& name, const search::SearchProblem& problem,
         search::GraphPolicyImpl& pretrained, search::GraphPolicyImpl& untrained, Tally& tally) {
  std::vector<search::Candidate> starts;
  for (const search::NamedCandidate& w : problem.warm_starts) starts.push_back(w.candidate);
  double best = kInfinity;
  std::vector<double> busy;
  size_t best_index = 0;
  const std::vector<graph::EvaluationResult> judged = problem.evaluator->Evaluate(starts);
  for (size_t i = 0; i < judged.size(); ++i) {
    const search::Judgement j = search::JudgementOf(judged[i]);
    if (j.seconds < best) {
      best = j.seconds;
      busy = j.busy;
      best_index = i;
    }
  }
  search::Candidate answer;
  const double zero_shot = GreedySeconds(pretrained, problem, busy, &answer);
  const double control = GreedySeconds(untrained, problem, busy, nullptr);
  tally.log_pretrained += std::log(zero_shot / best);
  tally.log_untrained += std::log(control / best);
  ++tally.n;
  fmt::print("{:<44} {:>10.3f} ms {:>10.3f} ms {:>10.3f} ms {:>9.3f} {:>9.3f}\n", name, best * 1e3,
             zero_shot * 1e3, control * 1e3, zero_shot / best, control / best);
  if (std::getenv("GRAPH_POLICY_BENCH_SHAPES") != nullptr) {
    const search::Candidate& b = starts[best_index];
    fmt::print("    best baseline {} (R {} M {}), zero-shot R {} M {}, {} distinct options\n",
               problem.warm_starts[best_index].name, b.replicas, b.micro_batches, answer.replicas,
               answer.micro_batches,
               std::set<int>(answer.options.begin(), answer.options.end()).size());
  }
  std::fflush(stdout);
}

void Header() {
  fmt::print("{:<44} {:>13} {:>13} {:>13} {:>9} {:>9}\n", "problem", "best baseline", "zero-shot",
             "untrained", "ratio", "untr.");
}

void Summary(const Tally& t) {
  fmt::print("geometric mean of zero-shot / best baseline: {:.3f} (untrained {:.3f})\n",
             std::exp(t.log_pretrained / t.n), std::exp(t.log_untrained / t.n));
}

struct Policies {
  explicit Policies(const char* file) {
    search::PolicyOptions options;
    options.kind = search::PolicyKind::kGraph;
    pretrained = std::make_unique<search::GraphPolicyImpl>(options);
    pretrained->LoadWeights(file);
    torch::manual_seed(1);
    untrained = std::make_unique<search::GraphPolicyImpl>(options);
  }
  std::unique_ptr<search::GraphPolicyImpl> pretrained, untrained;
};

int ZeroShot(int argc, char** argv) {
  if (argc < 4) return 2;
  Policies p(argv[2]);
  Header();
  Tally tally;
  for (int a = 3; a < argc; ++a) {
    std::ostringstream quiet;
    const auto s = setup::BuildSearchSetup(config::LoadConfig(argv[a]), quiet);
    Row(argv[a], s->Problem(), *p.pretrained, *p.untrained, tally);
  }
  Summary(tally);
  return 0;
}

int Validate(int argc, char** argv) {
  if (argc != 5 && argc != 6) return 2;
  Policies p(argv[2]);
  setup::PretrainOptions corpus;
  corpus.seed = 977;  // no pretraining run uses it
  corpus.max_blocks = 600;
  corpus.batches = {32, 128, 512};
  const int max_groups = std::stoi(argv[4]);
  const bool pipelines = argc == 6 && std::string(argv[5]) == "pipelines";
  Header();
  Tally tally;
  for (const setup::PolicyCorpusProblem& c :
       setup::GeneratedPolicyCorpus(corpus, std::stoi(argv[3]), pipelines)) {
    const setup::CorpusInstance instance(c.build_forward, c.batch, c.devices, c.nvlink, c.hosts,
                                         max_groups, c.micro_batches);
    search::SearchProblem problem = instance.problem->Problem();
    problem.seconds_per_byte = instance.seconds_per_byte;
    for (size_t s = 0; s < instance.starts.size(); ++s) {
      problem.warm_starts.push_back({fmt::format("start {}", s), instance.starts[s]});
    }
    Row(c.name, problem, *p.pretrained, *p.untrained, tally);
  }
  Summary(tally);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  placer::setup::UsePortableFloatKernels();  // its pretraining: the same network on every host
  const std::string mode = argc > 1 ? argv[1] : "";
  int rc = 2;
  if (mode == "pretrain") rc = Pretrain(argc, argv);
  if (mode == "zeroshot") rc = ZeroShot(argc, argv);
  if (mode == "validate") rc = Validate(argc, argv);
  if (rc == 2) {
    fmt::print(stderr,
               "usage: graph_policy_bench pretrain DIR PROBLEMS ITERATIONS ROUNDS EPOCHS "
               "[MAX_GROUPS [pipelines]]\n"
               "       graph_policy_bench validate POLICY PROBLEMS MAX_GROUPS [pipelines]\n"
               "       graph_policy_bench zeroshot POLICY CONFIG...\n");
  }
  return rc;
}
