#include "placer/learner.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/utils.h>

#include <cmath>
#include <numeric>
#include <stdexcept>

#include "placer/graph_policy.h"
#include "placer/policy.h"

namespace placer::search {

double RewardOf(double step_seconds) { return -std::sqrt(step_seconds); }

std::vector<double> Advantages(const std::vector<double>& rewards, double clip) {
  const size_t n = rewards.size();
  std::vector<double> advantages(n, 0.0);
  if (n < 2) return advantages;
  const double sum = std::accumulate(rewards.begin(), rewards.end(), 0.0);
  for (size_t i = 0; i < n; ++i) {
    advantages[i] = rewards[i] - (sum - rewards[i]) / static_cast<double>(n - 1);
  }
  double square = 0;
  for (double a : advantages) square += a * a;
  const double spread = std::sqrt(square / static_cast<double>(n));
  if (!(spread > 1e-12)) return std::vector<double>(n, 0.0);
  for (double& a : advantages) a = std::clamp(a / spread, -clip, clip);
  return advantages;
}

namespace {
std::shared_ptr<PolicyNetwork> MakePolicy(const graph::GroupFeatures& f, const ActionSpace& space,
                                          PolicyOptions options, uint64_t seed) {
  torch::manual_seed(seed);  // module initialisers draw from the default generator
  if (options.kind == PolicyKind::kGraph) {
    auto policy = std::make_shared<GraphPolicyImpl>(f, space, options);
    if (!options.pretrained_file.empty()) policy->LoadWeights(options.pretrained_file);
    return policy;
  }
  if (!options.pretrained_file.empty()) {
    throw std::invalid_argument("only the graph policy reads pretrained weights (" +
                                options.pretrained_file.string() + ")");
  }
  return std::make_shared<PolicyImpl>(f, space, options);
}
}  // namespace

Learner::Learner(const graph::GroupFeatures& features, const ActionSpace& space,
                 PolicyOptions policy_options, LearnerOptions options, uint64_t seed)
    : options_(options),
      policy_(MakePolicy(features, space, policy_options, seed)),
      generator_(at::detail::createCPUGenerator(seed + 0x9e3779b97f4a7c15ull)) {
  ResetOptimizer();
}

void Learner::ResetOptimizer() {
  optimizer_ = std::make_unique<torch::optim::Adam>(
      policy_->parameters(), torch::optim::AdamOptions(options_.learning_rate));
}

Batch Learner::Sample(const std::optional<Candidate>& incumbent) {
  PolicySample sample = policy_->Sample(options_.samples_per_step, incumbent, generator_, false,
                                        nullptr, options_.exploration);
  return {std::move(sample.candidates), sample.log_prob, incumbent};
}

Candidate Learner::Greedy(const std::optional<Candidate>& incumbent) {
  return policy_->Sample(1, incumbent, generator_, /*greedy=*/true).candidates.front();
}

void Learner::Step(const at::Tensor& loss, torch::optim::Optimizer& optimizer) {
  optimizer.zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(policy_->parameters(), options_.max_grad_norm);
  optimizer.step();
}

UpdateStats Learner::Update(const Batch& batch, const std::vector<double>& rewards) {
  if (rewards.size() != batch.candidates.size()) {
    throw std::logic_error("Update() needs one reward per candidate of the batch");
  }
  const std::vector<double> advantages = Advantages(rewards, options_.advantage_clip);
  const at::Tensor advantage = at::tensor(advantages, at::kDouble).to(at::kFloat).unsqueeze(1);
  UpdateStats stats;
  for (int epoch = 0; epoch < options_.epochs; ++epoch) {
    PolicyScores scores = policy_->Score(batch.candidates, batch.candidates, batch.incumbent);
    at::Tensor ratio = at::exp(scores.log_prob - batch.old_log_prob);  // [K, 1 + G]
    at::Tensor surrogate = at::min(
        ratio * advantage, at::clamp(ratio, 1 - options_.clip, 1 + options_.clip) * advantage);
    at::Tensor entropy = scores.entropy.mean();
    at::Tensor loss = -surrogate.mean() - options_.entropy_weight * entropy;
    Step(loss, *optimizer_);
    stats.loss = loss.item<double>();
    stats.mean_entropy = entropy.item<double>();
    stats.clipped_fraction =
        ((ratio - 1).abs() > options_.clip).to(at::kFloat).mean().item<double>();
  }
  return stats;
}

int Learner::Imitate(const std::vector<Candidate>& targets, const std::vector<double>& weights,
                     const std::optional<Candidate>& incumbent, const ImitationOptions& o,
                     const std::function<bool()>& stop) {
  if (targets.empty()) return 0;
  if (weights.size() != targets.size()) {
    throw std::invalid_argument("Imitate needs one weight per target");
  }
  const double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  std::vector<float> normalised;
  for (double w : weights) normalised.push_back(static_cast<float>(w / total));
  const at::Tensor weight = at::tensor(normalised, at::kFloat);
  torch::optim::Adam optimizer(policy_->parameters(), torch::optim::AdamOptions(o.learning_rate));

  for (int step = 0; step < o.max_steps; ++step) {
    if (stop && stop()) return step;
    PolicyScores forced = policy_->Score(targets, targets, incumbent);
    const at::Tensor per_target = forced.log_prob.mean(1);  // [T]: mean log-prob per decision
    const double probability = std::exp((per_target * weight).sum().item<double>());
    if (probability >= o.target_probability) return step;
    at::Tensor loss = -(per_target * weight).sum();
    if (o.own_decoding_samples > 0) {
      // The targets' decisions along the policy's own decoding of each target's shape.
      std::vector<Candidate> labels;
      std::vector<int> shapes;
      std::vector<float> own_weights;
      for (size_t t = 0; t < targets.size(); ++t) {
        for (int s = 0; s < o.own_decoding_samples; ++s) {
          labels.push_back(targets[t]);
          shapes.push_back(policy_->space().ShapeIndex(targets[t]));
          own_weights.push_back(normalised[t] / static_cast<float>(o.own_decoding_samples));
        }
      }
      PolicySample own =
          policy_->Sample(static_cast<int>(labels.size()), incumbent, generator_, false, &shapes);
      PolicyScores led = policy_->Score(own.candidates, labels, incumbent);
      loss = loss - (led.log_prob.mean(1) * at::tensor(own_weights, at::kFloat)).sum();
    }
    Step(loss, optimizer);
  }
  return o.max_steps;
}

void Learner::Save(torch::serialize::OutputArchive& archive) const {
  torch::serialize::OutputArchive policy, optimizer;
  policy_->save(policy);
  optimizer_->save(optimizer);
  archive.write("policy", policy);
  archive.write("optimizer", optimizer);
  archive.write("generator", generator_.get_state());
}

void Learner::Load(torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive policy, optimizer;
  archive.read("policy", policy);
  archive.read("optimizer", optimizer);
  policy_->load(policy);
  optimizer_->load(optimizer);
  at::Tensor state;
  archive.read("generator", state);
  generator_.set_state(state);
}

}  // namespace placer::search
