// How the policy learns: PPO on batches of candidates judged by the evaluator, and imitation of
// known good candidates (the warm starts, then the search's own best: self-imitation, the
// cross-entropy method Post alternated with PPO).
//
// One policy step: K candidates are sampled against the incumbent (the best known); each gets
// the reward -sqrt(step seconds) (an invalid one: of the failing time); the advantage of a sample
// is its reward minus the mean of the others' (leave-one-out), divided by the batch's spread and
// clipped, so that a batch whose samples all coincide teaches nothing instead of reinforcing that
// sample. PPO's clipped surrogate then runs several epochs over the batch, per decision (the
// replica count and each group's option have their own probability ratio), with the entropy
// bonus averaged over the same decisions, so that entropy_weight means what it says whatever the
// number of groups.
#pragma once

#include <torch/optim/adam.h>
#include <torch/serialize/archive.h>

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "graph/group_features.h"
#include "graph/grouping.h"
#include "placer/action_space.h"
#include "placer/policy_network.h"
#include "placer/search_options.h"

namespace placer::search {

struct Batch {
  std::vector<Candidate> candidates;
  at::Tensor old_log_prob;  // [K, 1 + G]
  std::optional<Candidate> incumbent;
};

struct UpdateStats {
  double loss = 0;
  double mean_entropy = 0;  // per decision, in nats
  double clipped_fraction = 0;
};

class Learner {
 public:
  // The policy's weights are drawn from `seed` (or read from policy_options.pretrained_file);
  // sampling uses its own generator from `seed` too.
  Learner(const graph::GroupFeatures& features, const ActionSpace& space,
          PolicyOptions policy_options, LearnerOptions options, uint64_t seed);

  Batch Sample(const std::optional<Candidate>& incumbent);
  // Most likely candidate under the policy.
  Candidate Greedy(const std::optional<Candidate>& incumbent);
  // One PPO update on `batch` with one reward per candidate.
  UpdateStats Update(const Batch& batch, const std::vector<double>& rewards);

  // Raises the probability of `targets` (weights: how much each counts; they need not sum to 1),
  // ending early when `stop()` (if given) says so before a step. Returns the steps taken.
  int Imitate(const std::vector<Candidate>& targets, const std::vector<double>& weights,
              const std::optional<Candidate>& incumbent, const ImitationOptions& options,
              const std::function<bool()>& stop = {});

  // The network (its graph-policy weights are what pretraining trains and saves).
  PolicyNetwork& policy() { return *policy_; }
  // What a judged placement says about the machine (PolicyNetwork::SetMachine).
  void SetMachine(double seconds_per_work, double seconds_per_byte) {
    policy_->SetMachine(seconds_per_work, seconds_per_byte);
  }

  // A fresh Adam for PPO, forgetting the moments of earlier updates. (Imitation has an optimiser
  // of its own, so its moments never push PPO's steps.)
  void ResetOptimizer();

  void Save(torch::serialize::OutputArchive& archive) const;
  void Load(torch::serialize::InputArchive& archive);

 private:
  LearnerOptions options_;
  std::shared_ptr<PolicyNetwork> policy_;
  std::unique_ptr<torch::optim::Adam> optimizer_;
  at::Generator generator_;
  void Step(const at::Tensor& loss, torch::optim::Optimizer& optimizer);
};

// -sqrt(seconds): rewards differences between fast placements more than between slow ones.
double RewardOf(double step_seconds);

// Leave-one-out advantages of `rewards`, divided by their standard deviation and clipped to
// +-clip; all zeros when the rewards do not differ.
std::vector<double> Advantages(const std::vector<double>& rewards, double clip);

}  // namespace placer::search
