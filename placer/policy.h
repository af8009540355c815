// The placement policy: the seq2seq network of Mirhoseini et al. (2017) and the hierarchical
// planner (2018), over the action space of action_space.h (a replica count, then an option per
// group), conditioned, as Placeto's policy is, on a placement it may edit (the incumbent: the
// best placement known).
//
//   encoder   a bidirectional LSTM over the groups in topological order (op type embedding and
//             the group's static features: shape, FLOPs, bytes, parameters, neighbours);
//   R head    the step's shape (ActionSpace::shapes(): the replica count, with a micro-batch
//             count and schedule for pipelines), from the mean encoding (and the incumbent's);
//   decoder   an LSTM that emits one option per group, fed the previous group's option, the shape,
//   the
//             incumbent's option for the group and, per option, the share of the group's traffic
//             that would stay on its device:
//               - producers: of the bytes the group reads from other groups, the share that
//                 replica by replica sits where the option would run it, from the options
//                 already decoded for those groups (exact: producers come first in topological
//                 order);
//               - consumers: the same for the bytes it sends, under the incumbent placement (its
//                 consumers are decoded later, so the best placement known stands in for them);
//             its output layer reads the decoder state, the group's encoding and an attention
//             context over all encodings. The traffic shares and "the incumbent chose it" also
//             enter every option's logit with learned weights, so that the policy starts out
//             preferring to keep data where it is, which is what step times reward.
// (The group's encoding goes to the output layer rather than into the decoder LSTM: it is the
// same for every sample, and keeping the LSTM's input small is what makes scoring 64 samples of
// 256 groups cheap enough to run several PPO epochs per step.)
// Options a replica count cannot use (width not dividing R) are masked out.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>

#include <optional>
#include <vector>

#include "graph/group_features.h"
#include "graph/grouping.h"
#include "placer/action_space.h"
#include "placer/policy_network.h"
#include "placer/search_options.h"

namespace placer::search {

class PolicyImpl : public PolicyNetwork {
 public:
  PolicyImpl(const graph::GroupFeatures& features, const ActionSpace& space, PolicyOptions options);

  PolicySample Sample(int k, const std::optional<Candidate>& incumbent, at::Generator& generator,
                      bool greedy = false, const std::vector<int>* shapes = nullptr,
                      double exploration = 0) override;
  PolicyScores Score(const std::vector<Candidate>& prefixes, const std::vector<Candidate>& labels,
                     const std::optional<Candidate>& incumbent) override;

  int num_groups() const { return num_groups_; }
  const ActionSpace& space() const override { return space_; }

 private:
  struct IncumbentInputs {
    at::Tensor option;           // [G] int64: its option per group, or O for "none"
    at::Tensor one_hot;          // [G, O]
    at::Tensor consumer_share;   // [R counts, G, O]: consumers' traffic kept local, per R
    at::Tensor replica_one_hot;  // [shapes]
  };
  IncumbentInputs Incumbent(const std::optional<Candidate>& incumbent) const;
  struct Encoding {
    at::Tensor encoded;  // [G, H]
    at::Tensor keys;     // [G, A]
    at::Tensor values;   // [G, A]
  };
  Encoding Encode();
  at::Tensor ReplicaLogits(const at::Tensor& encoded, const IncumbentInputs& incumbent);
  at::Tensor DecoderInputs(const at::Tensor& previous, const at::Tensor& replica_index,
                           const at::Tensor& producer_share, const at::Tensor& consumer_share,
                           const at::Tensor& incumbent_option);
  // `states` [..., Hd] and `encoded` [..., H] (the decoded groups' encodings) line up.
  at::Tensor OptionLogits(const at::Tensor& states, const at::Tensor& encoded,
                          const Encoding& encoding, const at::Tensor& producer_share,
                          const at::Tensor& consumer_share, const at::Tensor& incumbent_one_hot,
                          const at::Tensor& mask);
  at::Tensor Finish(at::Tensor logits) const;

  ActionSpace space_;
  PolicyOptions options_;
  int num_groups_;
  int num_options_;
  at::Tensor type_ids_, features_;
  LocalityTable locality_;
  std::vector<int> shape_replica_index_;  // per shape: the index of its replica count

  torch::nn::Embedding type_embedding_{nullptr};
  torch::nn::Linear feature_projection_{nullptr};
  torch::nn::LSTM encoder_{nullptr};
  torch::nn::Linear replica_head_{nullptr};
  torch::nn::Embedding replica_embedding_{nullptr};
  torch::nn::Embedding option_embedding_{nullptr};  // index O: "no previous group", "none"
  torch::nn::LSTM decoder_{nullptr};  // run step by step (sampling) or fused (scoring)
  torch::nn::Linear attend_keys_{nullptr}, attend_values_{nullptr}, attend_query_{nullptr};
  torch::nn::Linear output_{nullptr};
  at::Tensor prior_weights_;  // [4]: producers' share, consumers' share, incumbent option, R
};
TORCH_MODULE(Policy);

}  // namespace placer::search
