// The graph policy: one network for any graph and any device count, so that it can be trained
// across graphs and machines (placer/setup/policy_pretraining.h) and place models it has never
// seen (Placeto, GDP, GiPH and DOPPLER's design; issue 27).
//
//   encoder   per group, features that mean the same in any graph: its work and bytes relative
//             to the graph's mean, its top and bottom levels and criticality over the group DAG,
//             its traffic and parameter bytes against its work on this machine (seconds per byte
//             over seconds per unit of work, PolicyNetwork::SetMachine); then rounds of message
//             passing along producer and consumer edges (traffic-weighted means), residual;
//   shape     a step shape scored from the pooled group states and the shape's own features
//             (R / D, micro-batches, schedule, the incumbent's shape);
//   options   groups decoded in topological order; every allowed option scored by one MLP over
//             the group's state and the option's features under the placement decoded so far:
//             its width against D and R, the share of the group's input that stays local (its
//             producers decoded) and of its output (consumers where the incumbent puts them),
//             the incumbent's and the previous group's choice, the peak load of the option's
//             devices and of the machine after adding the group, the share of the group's work
//             that would lengthen the busiest device, the traffic a cut and the all-reduce of a
//             spread would cost against the group's work, whether its devices are still unused
//             and whether it opens the lowest unused device.
// Devices enter only through these features, so the weights are the same for 2 or 16 devices;
// groups only through the message passing, so the same for 10 or 1,000 groups.
#pragma once

#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "graph/group_features.h"
#include "placer/action_space.h"
#include "placer/policy_network.h"
#include "placer/search_options.h"

namespace placer::search {

struct GraphPolicyInputs;  // graph_policy_inputs.h
class FinishEstimate;

class GraphPolicyImpl : public PolicyNetwork {
 public:
  // Weights only: Bind gives it a graph and a space before it samples or scores.
  explicit GraphPolicyImpl(PolicyOptions options);
  GraphPolicyImpl(const graph::GroupFeatures& features, const ActionSpace& space,
                  PolicyOptions options);

  // The graph and action space it places from now on (its weights stay).
  void Bind(const graph::GroupFeatures& features, const ActionSpace& space);
  void SetMachine(double seconds_per_work, double seconds_per_byte) override;

  PolicySample Sample(int k, const std::optional<Candidate>& incumbent, at::Generator& generator,
                      bool greedy = false, const std::vector<int>* shapes = nullptr,
                      double exploration = 0) override;
  PolicyScores Score(const std::vector<Candidate>& prefixes, const std::vector<Candidate>& labels,
                     const std::optional<Candidate>& incumbent) override;
  const ActionSpace& space() const override;

  // A policy file: a format line (version, sizes) and the weights. Load refuses, naming the file
  // and both formats, a file of another version or size.
  void SaveWeights(const std::filesystem::path& file) const;
  void LoadWeights(const std::filesystem::path& file);

  static constexpr int kVersion = 2;
  static constexpr int kNodeFeatures = 16;
  static constexpr int kOptionFeatures = 15;
  static constexpr int kShapeFeatures = 7;

 private:
  // The finish-time features of group t under every option (two per option, `out` [O, 2]), and
  // then the group placed on `chosen` (when >= 0).
  void TimeFeatures(FinishEstimate& estimate, int t, const std::vector<int>& options, int replicas,
                    float* out) const;
  const GraphPolicyInputs& bound() const;
  double UnitsPerByte() const;      // of the finish estimate: per_byte work over the mean load
  at::Tensor NodeFeatures() const;  // [G, kNodeFeatures]
  at::Tensor Encode();              // [G, H]
  at::Tensor ShapeLogits(const at::Tensor& encoded, const std::optional<Candidate>& incumbent);
  // The option features of decisions laid out as [..., O] (Sample: [K, O]; Score: [K, G, O]).
  struct Decisions {
    at::Tensor load;        // [..., D]: devices' load before the group, in units of work / D
    at::Tensor share;       // [..., O, D]: each replica's share of the group on each device
    at::Tensor work;        // [...]: the group's work in the same unit
    at::Tensor produced;    // [..., O]: input kept local
    at::Tensor consumed;    // [..., O]: output kept local (incumbent's consumers)
    at::Tensor incumbent;   // [..., O]: one-hot of the incumbent's option, or zeros
    at::Tensor previous;    // [..., O]: one-hot of the previous group's option, or zeros
    at::Tensor spread;      // [..., O]: (k - 1) / k over the k devices of the option
    at::Tensor width;       // [..., O, 2]: width / D, width / R
    at::Tensor cut_ratio;   // [...]: input bytes x seconds per byte over the group's seconds
    at::Tensor sync_ratio;  // [...]: parameter bytes likewise
    at::Tensor timing;      // [..., O, 2]: finish after the earliest option's, and after the
                            // makespan so far, in the group's own work (log1p)
  };
  at::Tensor OptionFeatures(const Decisions& d) const;  // [..., O, kOptionFeatures]
  // `group_part` [..., 1, H] (the group's projected state) and the features give the logits.
  at::Tensor OptionLogits(const at::Tensor& group_part, const Decisions& d,
                          const at::Tensor& masks);
  at::Tensor Finish(at::Tensor logits) const;

  PolicyOptions options_;
  std::shared_ptr<const GraphPolicyInputs> bound_;
  double seconds_per_work_ = 0, seconds_per_byte_ = 0;

  torch::nn::Linear input_{nullptr};
  torch::nn::ModuleList rounds_{nullptr};  // Linear(3H, H) per round
  torch::nn::ModuleList norms_{nullptr};   // LayerNorm(H) per round
  torch::nn::Linear shape_hidden_{nullptr}, shape_out_{nullptr};
  torch::nn::Linear option_group_{nullptr}, option_features_{nullptr}, option_out_{nullptr};
  at::Tensor prior_weights_;  // [4]: producers' share, consumers' share, incumbent option, shape
};
TORCH_MODULE(GraphPolicy);

}  // namespace placer::search
