// REINFORCE for the placement policy: K samples per step, reward -sqrt(step seconds), an
// exponential-moving-average baseline, an entropy bonus, Adam and gradient-norm clipping.
#pragma once

#include <torch/optim/adam.h>
#include <torch/serialize/archive.h>

#include <memory>
#include <vector>

#include "graph/grouping.h"
#include "placer/policy.h"

namespace placer::search {

struct ReinforceOptions {
  double learning_rate = 0.005;
  double baseline_decay = 0.9;
  double entropy_weight = 0.01;
  double max_grad_norm = 1.0;
  int samples_per_step = 4;
  // Divide advantages by a running estimate of their spread, so that the policy gradient keeps
  // its weight against the entropy bonus whether step times differ by microseconds or seconds.
  bool normalise_advantage = true;
};

struct UpdateStats {
  double loss = 0;
  double mean_entropy = 0;  // per group, in nats
  double baseline = 0;      // after the update
};

class Reinforce {
 public:
  // The policy's weights are drawn from `seed`; sampling uses its own generator from `seed` too.
  Reinforce(const graph::GroupFeatures& features, int num_devices, PolicyOptions policy_options,
            ReinforceOptions options, uint64_t seed);

  // Draws samples_per_step placements (device per group); Update() must follow with their rewards.
  std::vector<std::vector<int>> Sample();
  UpdateStats Update(const std::vector<double>& rewards);
  // The most likely placement under the current policy.
  std::vector<int> Greedy();
  // Supervised warm start: raises the probability of `placement` until the policy gives each
  // group's device at least `per_group_probability` on average (geometric mean), or `max_steps`
  // Adam steps. Returns the steps taken. Imitating further (until the greedy decoding is the
  // placement, say) makes a policy over hundreds of groups nearly deterministic: its samples then
  // repeat and REINFORCE has nothing to compare. The policy stays stochastic, so REINFORCE explores
  // around the placement instead of from scratch.
  int Imitate(const std::vector<int>& placement, double per_group_probability, int max_steps);

  double baseline() const { return baseline_; }
  void Save(torch::serialize::OutputArchive& archive) const;
  void Load(torch::serialize::InputArchive& archive);

 private:
  ReinforceOptions options_;
  Policy policy_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  at::Tensor type_ids_, features_;
  at::Generator generator_;
  at::Tensor pending_devices_;  // the last Sample(), scored with gradients by Update()
  double baseline_ = 0;
  double advantage_scale_ = 0;  // running root-mean-square of (reward - baseline)
  bool baseline_initialised_ = false;
};

// -sqrt(seconds): rewards differences between fast placements more than between slow ones.
double RewardOf(double step_seconds);

}  // namespace placer::search
