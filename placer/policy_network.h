// What every placement policy offers the learner (placer/learner.h), and the traffic bookkeeping
// both policies decode with.
//
// A policy draws candidates of the action space (a step shape, then an option per group in
// topological order) and scores given ones; two networks implement it:
//   lstm   the seq2seq network of the 2017/2018 papers (placer/policy.h): its weights are sized
//          by the graph (type vocabulary) and the machine (one output per option);
//   graph  a graph network whose weights fit any graph and any device count
//          (placer/graph_policy.h): what can be pretrained across graphs and machines.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/nn/module.h>

#include <optional>
#include <utility>
#include <vector>

#include "graph/group_features.h"
#include "placer/action_space.h"

namespace placer::search {

// Per-decision log-probabilities and entropies of K candidates: column 0 is the shape,
// column 1 + g group g's option.
struct PolicyScores {
  at::Tensor log_prob;  // [K, 1 + G]
  at::Tensor entropy;   // [K, 1 + G]
};

struct PolicySample {
  std::vector<Candidate> candidates;
  at::Tensor log_prob;  // [K, 1 + G], no gradient: the sampling policy's, for PPO's ratio
};

class PolicyNetwork : public torch::nn::Module {
 public:
  // Draws `k` candidates without recording gradients; with `greedy`, the most likely decision at
  // every step instead. `shapes`, when given (one index into ActionSpace::shapes() per sample),
  // fixes each sample's shape instead of drawing it. With `exploration` = e > 0, every decision is
  // drawn from (1 - e) * policy + e * uniform over the allowed choices (Post's e-uniform mixing),
  // so that a policy that has converged still proposes something new; PolicySample::log_prob is
  // then the mixture's, as an off-policy correction (PPO's ratio) needs.
  virtual PolicySample Sample(int k, const std::optional<Candidate>& incumbent,
                              at::Generator& generator, bool greedy = false,
                              const std::vector<int>* shapes = nullptr, double exploration = 0) = 0;
  // The log-probabilities and entropies of `labels` when the decoder is fed `prefixes` (the
  // options decoded before each group; the shape is the label's): `prefixes` = `labels` scores
  // the candidates themselves (teacher forcing); the policy's own samples as prefixes score the
  // labels' decisions where the policy's own decoding leads. Differentiable.
  virtual PolicyScores Score(const std::vector<Candidate>& prefixes,
                             const std::vector<Candidate>& labels,
                             const std::optional<Candidate>& incumbent) = 0;
  virtual const ActionSpace& space() const = 0;
  // What a judged placement says about the machine: seconds per unit of a group's work
  // (GroupWork) and per byte over a typical link. Policies that do not use it ignore it.
  virtual void SetMachine(double /*seconds_per_work*/, double /*seconds_per_byte*/) {}
};

// log((1 - e) p + e u) for log-probabilities `log_p` [..., n] and the uniform distribution u over
// the choices `allowed` marks (1 or 0, [..., n]): Post's e-uniform mixing.
at::Tensor MixExploration(const at::Tensor& log_p, const at::Tensor& allowed, double exploration);
// One choice per row of `log_p`: drawn, or the most likely with `greedy`.
at::Tensor ChooseFrom(const at::Tensor& log_p, bool greedy, at::Generator& generator);

// A group's work in FLOP-equivalents: its FLOPs plus its output bytes written and read again
// (as FLOPs at a GPU's usual 10 FLOP per byte), at least 1 (the refiner's estimate uses the same).
std::vector<double> GroupWork(const graph::GroupFeatures& features);
// Seconds per unit of group work on a machine: the devices' busy seconds under a judged placement
// over the work it placed (what PolicyNetwork::SetMachine takes; the search measures it on its
// best warm start, pretraining on each problem's best start).
double SecondsPerWork(const graph::GroupFeatures& features, const std::vector<double>& busy);

// The share of a group's traffic that stays on its devices under each option, given where its
// producers and consumers run: the locality inputs of both policies.
class LocalityTable {
 public:
  LocalityTable(const graph::GroupFeatures& features, const ActionSpace& space);

  // Per group g: its producers p with p's share of g's incoming bytes; its consumers c with c's
  // share of g's outgoing bytes; and, to push decoded options forward, its consumers c with g's
  // share of c's incoming bytes.
  const std::vector<std::pair<int, float>>& producers(int g) const {
    return producers_[static_cast<size_t>(g)];
  }
  const std::vector<std::pair<int, float>>& consumers(int g) const {
    return consumers_[static_cast<size_t>(g)];
  }
  const std::vector<std::pair<int, float>>& feeds(int g) const {
    return feeds_[static_cast<size_t>(g)];
  }
  // Adds to `share` (O floats) the share of traffic `weight` from a neighbour with option
  // `neighbour` that stays local under each option, with R = replica_counts()[r_index].
  void AddLocalShare(float* share, int r_index, int neighbour, float weight) const {
    const float* row =
        &local_[(static_cast<size_t>(r_index) * num_options_ + static_cast<size_t>(neighbour)) *
                num_options_];
    for (int o = 0; o < num_options_; ++o) share[o] += weight * row[o];
  }
  // Group g decoded to `option` in candidate `k` of `candidates` (R = replica_counts()[r_index]):
  // adds its traffic's local share to the rows of its consumers in `producer_share` (per group,
  // per candidate, O floats), which the decoder reads when it reaches them.
  void PushForward(float* producer_share, int g, int k, int candidates, int r_index,
                   int option) const {
    for (const auto& [consumer, weight] : feeds(g)) {
      AddLocalShare(&producer_share[static_cast<size_t>(consumer * candidates + k) * num_options_],
                    r_index, option, weight);
    }
  }
  // With R = replica_counts()[r_index], the fraction of replicas that a group with option `b`
  // runs on the same device as a group with option `a`.
  float Local(int r_index, int a, int b) const {
    return local_[(static_cast<size_t>(r_index) * num_options_ + static_cast<size_t>(a)) *
                      num_options_ +
                  static_cast<size_t>(b)];
  }
  // [R counts, G, O]: per replica count, the share of each group's outgoing traffic that stays
  // local under each option when its consumers run where `incumbent` puts them (zeros: none).
  at::Tensor ConsumerShares(const std::optional<Candidate>& incumbent) const;
  // [R counts, O]: 0 where an option is allowed with the replica count, -1e9 where not.
  const at::Tensor& option_masks() const { return option_masks_; }
  // The index of `replicas` in the space's replica counts; throws when it has none.
  int ReplicaIndex(int replicas) const;

 private:
  ActionSpace space_;
  int num_groups_;
  int num_options_;
  std::vector<std::vector<std::pair<int, float>>> producers_, consumers_, feeds_;
  // local_[r][a][b]: with R = replica_counts()[r], the fraction of replicas that a group with
  // option b runs on the same device as a group with option a.
  std::vector<float> local_;
  at::Tensor option_masks_;
};

}  // namespace placer::search
