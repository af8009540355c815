#include "placer/reinforce.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/utils/clip_grad.h>
#include <torch/utils.h>

#include <cmath>
#include <stdexcept>

namespace placer::search {

double RewardOf(double step_seconds) { return -std::sqrt(step_seconds); }

namespace {
Policy MakePolicy(const graph::GroupFeatures& f, int num_devices, PolicyOptions options,
                  uint64_t seed) {
  torch::manual_seed(seed);  // module initialisers draw from the default generator
  return Policy(static_cast<int>(f.type_names.size()), f.feature_dim, num_devices, options);
}
}  // namespace

Reinforce::Reinforce(const graph::GroupFeatures& features, int num_devices,
                     PolicyOptions policy_options, ReinforceOptions options, uint64_t seed)
    : options_(options),
      policy_(MakePolicy(features, num_devices, policy_options, seed)),
      generator_(at::detail::createCPUGenerator(seed + 0x9e3779b97f4a7c15ull)) {
  optimizer_ = std::make_unique<torch::optim::Adam>(
      policy_->parameters(), torch::optim::AdamOptions(options.learning_rate));
  type_ids_ = at::tensor(features.type_ids, at::kLong);
  const auto groups = static_cast<int64_t>(features.type_ids.size());
  features_ = at::tensor(features.values, at::kFloat).reshape({groups, features.feature_dim});
}

std::vector<std::vector<int>> Reinforce::Sample() {
  at::Tensor devices =
      policy_->Sample(type_ids_, features_, options_.samples_per_step, generator_).contiguous();
  pending_devices_ = devices;
  std::vector<std::vector<int>> placements(static_cast<size_t>(devices.size(0)));
  const int64_t* data = devices.data_ptr<int64_t>();
  for (int64_t k = 0; k < devices.size(0); ++k) {
    placements[static_cast<size_t>(k)].assign(data + k * devices.size(1),
                                              data + (k + 1) * devices.size(1));
  }
  return placements;
}

std::vector<int> Reinforce::Greedy() {
  at::Tensor devices =
      policy_->Sample(type_ids_, features_, 1, generator_, /*greedy=*/true).contiguous();
  return {devices.data_ptr<int64_t>(), devices.data_ptr<int64_t>() + devices.size(1)};
}

int Reinforce::Imitate(const std::vector<int>& placement, double per_group_probability,
                       int max_steps) {
  at::Tensor devices =
      at::tensor(std::vector<int64_t>(placement.begin(), placement.end()), at::kLong).unsqueeze(0);
  const double target = std::log(per_group_probability) * static_cast<double>(placement.size());
  for (int step = 0; step < max_steps; ++step) {
    at::Tensor log_prob = policy_->Score(type_ids_, features_, devices).log_prob.sum();
    if (log_prob.item<double>() >= target) return step;
    optimizer_->zero_grad();
    (-log_prob / static_cast<double>(placement.size())).backward();
    torch::nn::utils::clip_grad_norm_(policy_->parameters(), options_.max_grad_norm);
    optimizer_->step();
  }
  return max_steps;
}

UpdateStats Reinforce::Update(const std::vector<double>& rewards) {
  if (!pending_devices_.defined() ||
      static_cast<int64_t>(rewards.size()) != pending_devices_.size(0)) {
    throw std::logic_error("Update() needs one reward per sample of the preceding Sample()");
  }
  PolicySamples pending = policy_->Score(type_ids_, features_, pending_devices_);
  double mean = 0;
  for (double r : rewards) mean += r / static_cast<double>(rewards.size());
  // The first step has no history; starting the baseline at its mean avoids a large first push.
  if (!baseline_initialised_) {
    baseline_ = mean;
    baseline_initialised_ = true;
  }
  std::vector<double> advantages;
  double square = 0;
  for (double r : rewards) {
    advantages.push_back(r - baseline_);
    square += (r - baseline_) * (r - baseline_) / static_cast<double>(rewards.size());
  }
  if (options_.normalise_advantage) {
    advantage_scale_ =
        advantage_scale_ == 0
            ? std::sqrt(square)
            : std::sqrt(options_.baseline_decay * advantage_scale_ * advantage_scale_ +
                        (1 - options_.baseline_decay) * square);
    if (advantage_scale_ > 0) {
      for (double& a : advantages) a /= advantage_scale_;
    }
  }
  at::Tensor advantage = at::tensor(advantages, at::kDouble).to(at::kFloat);
  const double groups = static_cast<double>(pending_devices_.size(1));
  at::Tensor loss = -(advantage * pending.log_prob).mean() -
                    options_.entropy_weight * pending.entropy.mean() / groups;
  optimizer_->zero_grad();
  loss.backward();
  torch::nn::utils::clip_grad_norm_(policy_->parameters(), options_.max_grad_norm);
  optimizer_->step();
  baseline_ = options_.baseline_decay * baseline_ + (1 - options_.baseline_decay) * mean;
  UpdateStats stats{loss.item<double>(), pending.entropy.mean().item<double>() / groups, baseline_};
  pending_devices_ = at::Tensor();
  return stats;
}

void Reinforce::Save(torch::serialize::OutputArchive& archive) const {
  torch::serialize::OutputArchive policy, optimizer;
  policy_->save(policy);
  optimizer_->save(optimizer);
  archive.write("policy", policy);
  archive.write("optimizer", optimizer);
  archive.write("generator", generator_.get_state());
  archive.write(
      "baseline",
      at::tensor({baseline_, baseline_initialised_ ? 1.0 : 0.0, advantage_scale_}, at::kDouble));
}

void Reinforce::Load(torch::serialize::InputArchive& archive) {
  torch::serialize::InputArchive policy, optimizer;
  archive.read("policy", policy);
  archive.read("optimizer", optimizer);
  policy_->load(policy);
  optimizer_->load(optimizer);
  at::Tensor state, baseline;
  archive.read("generator", state);
  generator_.set_state(state);
  archive.read("baseline", baseline);
  baseline_ = baseline[0].item<double>();
  baseline_initialised_ = baseline[1].item<double>() != 0;
  advantage_scale_ = baseline[2].item<double>();
}

}  // namespace placer::search
