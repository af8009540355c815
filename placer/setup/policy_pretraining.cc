#include "placer/setup/policy_pretraining.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/optim/adam.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>
#include <stdexcept>

#include "placer/graph_policy.h"
#include "placer/refiner.h"
#include "placer/setup/portable_float.h"
#include "placer/setup/pretraining_progress.h"
#include "placer/setup/simulated_problem.h"

namespace placer::setup {

namespace {

constexpr const char* kStateFile = "policy_state.txt";
constexpr const char* kLabelsFile = "labels.txt";
constexpr double kInfinity = std::numeric_limits<double>::infinity();

uint64_t Mix(uint64_t a, uint64_t b) { return (a * 0x9e3779b97f4a7c15ull) ^ (b + 0x7f4a7c15ull); }

std::string Fingerprint(const std::vector<PolicyCorpusProblem>& corpus,
                        const PolicyPretrainOptions& o) {
  std::string names;
  for (const PolicyCorpusProblem& p : corpus) names += p.name + ";";
  return fmt::format(
      "graph policy v{} problems {} ({}) rounds {} epochs {} lr {} own {} groups {} hold {} seed "
      "{} "
      "hidden {} message rounds {}",
      search::GraphPolicyImpl::kVersion, corpus.size(), std::hash<std::string>{}(names),
      o.refine_rounds, o.epochs, o.learning_rate, o.own_decoding_samples, o.max_groups,
      o.hold_back_every, o.seed, o.policy.graph_hidden, o.policy.message_rounds);
}

// What imitation needs of a problem once it is labelled: no simulator.
struct Labelled {
  graph::GroupFeatures features;
  std::optional<search::ActionSpace> space;
  search::Candidate label;
  double label_seconds = kInfinity;
  double baseline_seconds = kInfinity;  // the best start's
  double seconds_per_work = 0, seconds_per_byte = 0;
};

search::JudgeBatch JudgeWith(const search::CandidateEvaluator& evaluator) {
  return [&evaluator](const std::vector<search::Candidate>& batch) {
    std::vector<search::Judgement> out;
    for (const graph::EvaluationResult& r : evaluator.Evaluate(batch))
      out.push_back(search::JudgementOf(r));
    return out;
  };
}

bool HeldBack(const PolicyPretrainOptions& o, size_t index) {
  return o.hold_back_every > 0 &&
         static_cast<int>(index % static_cast<size_t>(o.hold_back_every)) == o.hold_back_every - 1;
}

// Labels problem `index`: refinement from its best start, and from the policy's greedy answer
// when there is a trained policy; the label only ever improves across iterations.
void Label(const PolicyCorpusProblem& p, const PolicyPretrainOptions& o, int iteration,
           size_t index, search::GraphPolicyImpl* policy, Labelled& out) {
  const CorpusInstance instance(p.build_forward, p.batch, p.devices, p.nvlink, p.hosts,
                                o.max_groups, p.micro_batches);
  const SimulatedProblem& problem = *instance.problem;
  const search::JudgeBatch judge = JudgeWith(*problem.evaluator);
  const std::vector<search::Judgement> starts = judge(instance.starts);
  size_t best = 0;
  for (size_t i = 1; i < starts.size(); ++i) {
    if (starts[i].seconds < starts[best].seconds) best = i;
  }
  out.features = problem.features;
  out.space = problem.evaluator->space();
  out.baseline_seconds = starts[best].seconds;
  out.seconds_per_work = search::SecondsPerWork(problem.features, starts[best].busy);
  out.seconds_per_byte = instance.seconds_per_byte;
  if (starts[best].seconds < out.label_seconds) {
    out.label = instance.starts[best];
    out.label_seconds = starts[best].seconds;
  }
  std::vector<std::pair<search::Candidate, search::Judgement>> seeds = {
      {instance.starts[best], starts[best]}};
  if (policy != nullptr) {
    policy->Bind(out.features, *out.space);
    policy->SetMachine(out.seconds_per_work, out.seconds_per_byte);
    at::Generator generator = at::detail::createCPUGenerator(o.seed);
    const search::Candidate greedy = policy->Sample(1, std::nullopt, generator, true).candidates[0];
    seeds.emplace_back(greedy, judge({greedy})[0]);
  }
  for (size_t s = 0; s < seeds.size(); ++s) {
    if (!std::isfinite(seeds[s].second.seconds)) continue;
    search::Refiner refiner(*out.space, out.features, {},
                            Mix(Mix(o.seed, static_cast<uint64_t>(iteration)), index * 2 + s));
    const search::RefineOutcome r =
        refiner.Run(seeds[s].first, seeds[s].second, o.refine_rounds, judge, [] { return false; });
    if (r.best_seconds < out.label_seconds) {
      out.label = r.best;
      out.label_seconds = r.best_seconds;
    }
  }
  // The label renumbered, where the machine's links make that no slower.
  const std::optional<search::Candidate> canonical = CanonicalDeviceOrder(*out.space, out.label);
  if (canonical && *canonical != out.label) {
    const double seconds = judge({*canonical})[0].seconds;
    if (seconds <= out.label_seconds * (1 + 1e-9)) {
      out.label = *canonical;
      out.label_seconds = std::min(seconds, out.label_seconds);
    }
  }
}

// The greedy answer's step time over the label's, judged by the problem's simulator.
double GreedyRatio(const PolicyCorpusProblem& p, const PolicyPretrainOptions& o,
                   search::GraphPolicyImpl& policy, const Labelled& l) {
  const CorpusInstance instance(p.build_forward, p.batch, p.devices, p.nvlink, p.hosts,
                                o.max_groups, p.micro_batches);
  policy.Bind(l.features, *l.space);
  policy.SetMachine(l.seconds_per_work, l.seconds_per_byte);
  at::Generator generator = at::detail::createCPUGenerator(o.seed);
  const search::Candidate greedy = policy.Sample(1, std::nullopt, generator, true).candidates[0];
  const double seconds = JudgeWith(*instance.problem->evaluator)({greedy})[0].seconds;
  return seconds / l.label_seconds;
}

double GeometricMean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (double x : v) sum += std::log(x);
  return std::exp(sum / static_cast<double>(v.size()));
}

// One epoch of imitation over the problems not held back, in an order drawn from `seed`.
void ImitateEpoch(search::GraphPolicyImpl& policy, torch::optim::Adam& optimizer,
                  const std::vector<Labelled>& labelled, const PolicyPretrainOptions& o,
                  uint64_t seed) {
  std::vector<size_t> order;
  for (size_t i = 0; i < labelled.size(); ++i) {
    if (!HeldBack(o, i) && std::isfinite(labelled[i].label_seconds)) order.push_back(i);
  }
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  at::Generator generator = at::detail::createCPUGenerator(Mix(seed, 1));
  for (size_t i : order) {
    const Labelled& l = labelled[i];
    policy.Bind(l.features, *l.space);
    policy.SetMachine(l.seconds_per_work, l.seconds_per_byte);
    at::Tensor loss = -policy.Score({l.label}, {l.label}, std::nullopt).log_prob.mean();
    if (o.own_decoding_samples > 0) {
      const std::vector<int> shapes(static_cast<size_t>(o.own_decoding_samples),
                                    l.space->ShapeIndex(l.label));
      const search::PolicySample own =
          policy.Sample(o.own_decoding_samples, std::nullopt, generator, false, &shapes);
      const std::vector<search::Candidate> labels(own.candidates.size(), l.label);
      loss = loss - policy.Score(own.candidates, labels, std::nullopt).log_prob.mean();
    }
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
}

void SaveLabels(const std::vector<Labelled>& labelled, const std::filesystem::path& file) {
  std::ofstream out(file, std::ios::trunc);
  out.precision(17);
  for (const Labelled& l : labelled) {
    out << search::FormatCandidate(l.label) << ' ' << l.label_seconds << '\n';
  }
  if (!out) throw std::runtime_error("cannot write " + file.string());
}

void LoadLabels(std::vector<Labelled>& labelled, const std::filesystem::path& file) {
  std::ifstream in(file);
  for (Labelled& l : labelled) {
    std::string candidate;
    if (!(in >> candidate >> l.label_seconds)) {
      throw std::runtime_error(file.string() + ": fewer labels than the corpus has problems");
    }
    l.label = search::ParseCandidate(candidate);
  }
}

}  // namespace

std::optional<search::Candidate> CanonicalDeviceOrder(const search::ActionSpace& space,
                                                      const search::Candidate& c) {
  std::vector<int> renumbered(static_cast<size_t>(space.num_devices()), -1);
  int next = 0;
  for (int option : c.options) {
    for (int r = 0; r < c.replicas; ++r) {
      int& to = renumbered[static_cast<size_t>(space.DeviceOf(option, r, c.replicas))];
      if (to < 0) to = next++;
    }
  }
  for (int& to : renumbered) {
    if (to < 0) to = next++;
  }
  search::Candidate out = c;
  std::vector<int> devices(static_cast<size_t>(c.replicas));
  for (size_t g = 0; g < c.options.size(); ++g) {
    for (int r = 0; r < c.replicas; ++r) {
      devices[static_cast<size_t>(r)] =
          renumbered[static_cast<size_t>(space.DeviceOf(c.options[g], r, c.replicas))];
    }
    const int option = space.BestMatch(devices);
    for (int r = 0; r < c.replicas; ++r) {
      if (option < 0 || space.DeviceOf(option, r, c.replicas) != devices[static_cast<size_t>(r)]) {
        return std::nullopt;
      }
    }
    out.options[g] = option;
  }
  return out;
}

std::vector<PolicyCorpusProblem> GeneratedPolicyCorpus(const PretrainOptions& corpus, int problems,
                                                       bool pipelines) {
  std::vector<PolicyCorpusProblem> out;
  for (int i = 0; i < problems; ++i) {
    const CorpusProblem p = CorpusProblemFor(corpus, 0, i);
    std::vector<int> micro_batches = {1};
    if (pipelines) micro_batches = search::ActionSpace::DefaultMicroBatchCounts(p.batch, 0);
    out.push_back({p.Describe() + (pipelines ? ", with pipelines" : ""),
                   [model = p.model](int64_t batch, int64_t normalizer) {
                     return graph::BuildGeneratedModel(model, batch, normalizer);
                   },
                   p.batch, p.devices, p.nvlink, p.hosts, micro_batches});
  }
  return out;
}

std::vector<PolicyPretrainProgress> PretrainPolicy(const std::vector<PolicyCorpusProblem>& corpus,
                                                   const PolicyPretrainOptions& o,
                                                   const std::filesystem::path& directory,
                                                   std::ostream& log,
                                                   const std::function<bool()>& stop) {
  using Clock = std::chrono::steady_clock;
  if (o.policy.kind != search::PolicyKind::kGraph) {
    throw std::invalid_argument("only the graph policy is pretrained across graphs");
  }
  std::filesystem::create_directories(directory);
  const std::filesystem::path state_file = directory / kStateFile;
  const std::filesystem::path policy_file = directory / kGraphPolicyFile;
  torch::manual_seed(o.seed);
  search::GraphPolicyImpl policy(o.policy);
  std::vector<Labelled> labelled(corpus.size());
  const int done = ReadIterationsDone(state_file, Fingerprint(corpus, o));
  if (done > 0) {
    policy.LoadWeights(policy_file);
    LoadLabels(labelled, directory / kLabelsFile);
    log << fmt::format("resuming after iteration {}\n", done);
  }
  if (const std::string note = PortableFloatKernelsNote(); !note.empty()) log << note << '\n';
  // Deterministic training: one intra-op thread.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  std::vector<PolicyPretrainProgress> progress;
  auto stopped = [&] {
    if (!stop()) return false;
    at::set_num_threads(threads);
    return true;
  };
  for (int iteration = done; iteration < o.iterations; ++iteration) {
    const auto start = Clock::now();
    std::vector<double> gains;
    for (size_t i = 0; i < corpus.size(); ++i) {
      if (stopped()) return progress;
      Label(corpus[i], o, iteration, i, iteration > 0 ? &policy : nullptr, labelled[i]);
      gains.push_back(labelled[i].label_seconds / labelled[i].baseline_seconds);
      log << fmt::format("iteration {} label {}/{}: {}: {:.4f} ms ({:.3f} of the best start)\n",
                         iteration + 1, i + 1, corpus.size(), corpus[i].name,
                         1e3 * labelled[i].label_seconds, gains.back());
    }
    torch::optim::Adam optimizer(policy.parameters(), torch::optim::AdamOptions(o.learning_rate));
    for (int epoch = 0; epoch < o.epochs; ++epoch) {
      if (stopped()) return progress;
      ImitateEpoch(
          policy, optimizer, labelled, o,
          Mix(Mix(o.seed, static_cast<uint64_t>(iteration) + 101), static_cast<uint64_t>(epoch)));
    }
    std::vector<double> trained, held;
    for (size_t i = 0; i < corpus.size(); ++i) {
      if (!std::isfinite(labelled[i].label_seconds)) continue;
      (HeldBack(o, i) ? held : trained).push_back(GreedyRatio(corpus[i], o, policy, labelled[i]));
    }
    PolicyPretrainProgress p{iteration + 1, GeometricMean(gains), GeometricMean(trained),
                             GeometricMean(held),
                             std::chrono::duration<double>(Clock::now() - start).count()};
    policy.SaveWeights(policy_file);
    SaveLabels(labelled, directory / kLabelsFile);
    WriteIterationsDone(state_file, iteration + 1, Fingerprint(corpus, o));
    log << fmt::format(
        "iteration {}: labels {:.3f} of the best start; greedy {:.3f} of the label on {} imitated "
        "problems, {:.3f} on {} held back; {:.0f} s\n",
        p.iteration, p.label_gain, p.trained_greedy, trained.size(), p.held_back_greedy,
        held.size(), p.seconds);
    progress.push_back(p);
  }
  at::set_num_threads(threads);
  return progress;
}

}  // namespace placer::setup
