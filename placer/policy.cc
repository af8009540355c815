#include "placer/policy.h"

#include <ATen/ATen.h>

#include <cmath>
#include <stdexcept>

namespace placer::search {

PolicyImpl::PolicyImpl(const graph::GroupFeatures& f, const ActionSpace& space,
                       PolicyOptions options)
    : space_(space),
      options_(options),
      num_groups_(static_cast<int>(f.type_ids.size())),
      num_options_(space.num_options()),
      locality_(f, space) {
  const int64_t groups = num_groups_;
  const auto shapes = static_cast<int64_t>(space.shapes().size());
  for (const StepShape& shape : space.shapes()) {
    shape_replica_index_.push_back(locality_.ReplicaIndex(shape.replicas));
  }
  type_ids_ = at::tensor(f.type_ids, at::kLong);
  features_ = at::tensor(f.values, at::kFloat).reshape({groups, f.feature_dim});

  const int h = options.hidden_size, hd = options.decoder_size, e = options.option_embedding_size,
            a = options.attention_size;
  type_embedding_ = register_module(
      "type_embedding",
      torch::nn::Embedding(static_cast<int64_t>(f.type_names.size()), options.type_embedding_size));
  feature_projection_ = register_module(
      "feature_projection", torch::nn::Linear(f.feature_dim, options.type_embedding_size));
  encoder_ = register_module(
      "encoder", torch::nn::LSTM(torch::nn::LSTMOptions(2 * options.type_embedding_size,
                                                        options.bidirectional ? h / 2 : h)
                                     .bidirectional(options.bidirectional)
                                     .batch_first(true)));
  replica_head_ = register_module("replica_head", torch::nn::Linear(h, shapes));
  replica_embedding_ = register_module("replica_embedding", torch::nn::Embedding(shapes, e));
  option_embedding_ =
      register_module("option_embedding", torch::nn::Embedding(num_options_ + 1, e));
  decoder_ = register_module(
      "decoder",
      torch::nn::LSTM(torch::nn::LSTMOptions(3 * e + 2 * num_options_, hd).batch_first(true)));
  attend_keys_ =
      register_module("attend_keys", torch::nn::Linear(torch::nn::LinearOptions(h, a).bias(false)));
  attend_values_ = register_module("attend_values",
                                   torch::nn::Linear(torch::nn::LinearOptions(h, a).bias(false)));
  attend_query_ = register_module("attend_query", torch::nn::Linear(hd, a));
  output_ = register_module("output", torch::nn::Linear(hd + h + a, num_options_));
  prior_weights_ = register_parameter("prior_weights",
                                      at::tensor({options.locality_prior, options.locality_prior,
                                                  options.incumbent_prior, options.incumbent_prior},
                                                 at::kFloat));
}

PolicyImpl::Encoding PolicyImpl::Encode() {
  at::Tensor inputs = at::cat({type_embedding_(type_ids_), feature_projection_(features_)}, -1);
  at::Tensor encoded = std::get<0>(encoder_->forward(inputs.unsqueeze(0))).squeeze(0);  // [G, H]
  return {encoded, attend_keys_(encoded), attend_values_(encoded)};
}

PolicyImpl::IncumbentInputs PolicyImpl::Incumbent(const std::optional<Candidate>& incumbent) const {
  const auto groups = static_cast<size_t>(num_groups_);
  const auto o_count = static_cast<size_t>(num_options_);
  std::vector<int64_t> option(groups, num_options_);
  std::vector<float> one_hot(groups * o_count, 0.0f);
  std::vector<float> replica(space_.shapes().size(), 0.0f);
  if (incumbent) {
    space_.Check(*incumbent, num_groups_);
    replica[static_cast<size_t>(space_.ShapeIndex(*incumbent))] = 1;
    for (size_t g = 0; g < groups; ++g) {
      option[g] = incumbent->options[g];
      one_hot[g * o_count + static_cast<size_t>(incumbent->options[g])] = 1;
    }
  }
  const auto g64 = static_cast<int64_t>(groups), o64 = static_cast<int64_t>(o_count);
  return {at::tensor(option, at::kLong), at::tensor(one_hot, at::kFloat).reshape({g64, o64}),
          locality_.ConsumerShares(incumbent), at::tensor(replica, at::kFloat)};
}

at::Tensor PolicyImpl::Finish(at::Tensor logits) const {
  logits = logits / options_.temperature;
  if (options_.tanh_clip > 0) logits = options_.tanh_clip * at::tanh(logits / options_.tanh_clip);
  return logits;
}

at::Tensor PolicyImpl::ReplicaLogits(const at::Tensor& encoded, const IncumbentInputs& incumbent) {
  return Finish(replica_head_(encoded.mean(0)) + prior_weights_[3] * incumbent.replica_one_hot);
}

at::Tensor PolicyImpl::DecoderInputs(const at::Tensor& previous, const at::Tensor& replica_index,
                                     const at::Tensor& producer_share,
                                     const at::Tensor& consumer_share,
                                     const at::Tensor& incumbent_option) {
  return at::cat({option_embedding_(previous), replica_embedding_(replica_index), producer_share,
                  consumer_share, option_embedding_(incumbent_option)},
                 -1);
}

// Attention in its multiplicative form, score_j = q . k_j / sqrt(A), over every group's encoding,
// then the output layer over [decoder state; the group's encoding; context] and the priors.
at::Tensor PolicyImpl::OptionLogits(const at::Tensor& states, const at::Tensor& encoded,
                                    const Encoding& encoding, const at::Tensor& producer_share,
                                    const at::Tensor& consumer_share,
                                    const at::Tensor& incumbent_one_hot, const at::Tensor& mask) {
  at::Tensor query = attend_query_(states);  // [..., A]
  at::Tensor scores =
      query.matmul(encoding.keys.t()) / std::sqrt(static_cast<double>(encoding.keys.size(-1)));
  at::Tensor context = at::softmax(scores, -1).matmul(encoding.values);  // [..., A]
  at::Tensor logits = output_(at::cat({states, encoded, context}, -1)) +
                      prior_weights_[0] * producer_share + prior_weights_[1] * consumer_share +
                      prior_weights_[2] * incumbent_one_hot;
  return Finish(logits) + mask;
}

PolicySample PolicyImpl::Sample(int k, const std::optional<Candidate>& incumbent,
                                at::Generator& generator, bool greedy,
                                const std::vector<int>* shapes, double exploration) {
  at::NoGradGuard no_grad;
  const int64_t groups = num_groups_;
  const auto o_count = static_cast<size_t>(num_options_);
  const Encoding encoding = Encode();
  const IncumbentInputs inc = Incumbent(incumbent);

  if (greedy) exploration = 0;
  const at::Tensor replica_log_p =
      MixExploration(at::log_softmax(ReplicaLogits(encoding.encoded, inc), -1),
                     at::ones({static_cast<int64_t>(space_.shapes().size())}), exploration);
  at::Tensor shape_index;
  if (shapes != nullptr) {
    shape_index = at::tensor(std::vector<int64_t>(shapes->begin(), shapes->end()), at::kLong);
  } else {
    shape_index = ChooseFrom(replica_log_p.expand({k, -1}), greedy, generator).contiguous();
  }
  // Per sample: its shape, and the index of its replica count (masks and traffic shares).
  std::vector<int> shape_of(static_cast<size_t>(k)), r_of(static_cast<size_t>(k));
  std::vector<int64_t> r_index_of(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    shape_of[static_cast<size_t>(i)] = shape_index[i].item<int>();
    r_of[static_cast<size_t>(i)] =
        shape_replica_index_.at(static_cast<size_t>(shape_of[static_cast<size_t>(i)]));
    r_index_of[static_cast<size_t>(i)] = r_of[static_cast<size_t>(i)];
  }
  const at::Tensor replica_index = at::tensor(r_index_of, at::kLong);

  at::Tensor log_prob = at::empty({k, 1 + groups});
  log_prob.select(1, 0).copy_(replica_log_p.index_select(0, shape_index));
  const at::Tensor masks = locality_.option_masks().index_select(0, replica_index);  // [K, O]
  const at::Tensor allowed = (masks == 0).to(at::kFloat);
  const at::Tensor consumer_share = inc.consumer_share.index_select(0, replica_index);  // [K,G,O]

  // The decoder LSTM's own weights, one step at a time. Handles, not references:
  // named_parameters() returns a temporary dictionary.
  const auto parameters = decoder_->named_parameters();
  const at::Tensor w_ih = parameters["weight_ih_l0"];
  const at::Tensor w_hh = parameters["weight_hh_l0"];
  const at::Tensor b_ih = parameters["bias_ih_l0"];
  const at::Tensor b_hh = parameters["bias_hh_l0"];
  at::Tensor h = at::zeros({k, options_.decoder_size});
  at::Tensor c = at::zeros({k, options_.decoder_size});
  at::Tensor previous = at::full({k}, num_options_, at::kLong);
  // producer_share[t][i]: sample i's share of group t's input that stays local per option, filled
  // in as its producers are decoded.
  std::vector<float> producer_share(static_cast<size_t>(groups * k) * o_count, 0.0f);
  std::vector<Candidate> candidates(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const StepShape& shape = space_.shapes()[static_cast<size_t>(shape_of[static_cast<size_t>(i)])];
    Candidate& candidate = candidates[static_cast<size_t>(i)];
    candidate.replicas = shape.replicas;
    candidate.micro_batches = shape.micro_batches;
    candidate.schedule = shape.schedule;
    candidate.tensor_ways = shape.tensor_ways;
    candidate.options.resize(static_cast<size_t>(groups));
  }
  for (int64_t t = 0; t < groups; ++t) {
    at::Tensor produced = at::from_blob(&producer_share[static_cast<size_t>(t * k) * o_count],
                                        {k, num_options_}, at::kFloat);
    at::Tensor consumed = consumer_share.select(1, t);
    at::Tensor incumbent_option = inc.option[t].expand({k});
    at::Tensor input = DecoderInputs(previous, shape_index, produced, consumed, incumbent_option);
    std::tie(h, c) = at::lstm_cell(input, {h, c}, w_ih, w_hh, b_ih, b_hh);
    const at::Tensor log_p = MixExploration(
        at::log_softmax(OptionLogits(h, encoding.encoded[t].expand({k, -1}), encoding, produced,
                                     consumed, inc.one_hot[t].expand({k, -1}), masks),
                        -1),
        allowed, exploration);
    const at::Tensor choice = ChooseFrom(log_p, greedy, generator).contiguous();
    log_prob.select(1, 1 + t).copy_(log_p.gather(-1, choice.unsqueeze(-1)).squeeze(-1));
    previous = choice;
    const int64_t* chosen = choice.data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i) {
      const auto option = static_cast<int>(chosen[i]);
      candidates[static_cast<size_t>(i)].options[static_cast<size_t>(t)] = option;
      locality_.PushForward(producer_share.data(), static_cast<int>(t), static_cast<int>(i),
                            static_cast<int>(k), r_of[static_cast<size_t>(i)], option);
    }
  }
  return {std::move(candidates), log_prob};
}

PolicyScores PolicyImpl::Score(const std::vector<Candidate>& prefixes,
                               const std::vector<Candidate>& labels,
                               const std::optional<Candidate>& incumbent) {
  if (prefixes.size() != labels.size() || labels.empty()) {
    throw std::invalid_argument("Score needs one prefix per label, and at least one label");
  }
  const auto k = static_cast<int64_t>(labels.size());
  const int64_t groups = num_groups_;
  const auto o_count = static_cast<size_t>(num_options_);
  const Encoding encoding = Encode();
  const IncumbentInputs inc = Incumbent(incumbent);

  std::vector<int64_t> r_of(static_cast<size_t>(k)), shape_of(static_cast<size_t>(k));
  std::vector<int64_t> previous(static_cast<size_t>(k * groups), num_options_);
  std::vector<int64_t> chosen(static_cast<size_t>(k * groups));
  std::vector<float> producer_share(static_cast<size_t>(k * groups) * o_count, 0.0f);
  for (int64_t i = 0; i < k; ++i) {
    const Candidate& prefix = prefixes[static_cast<size_t>(i)];
    const Candidate& label = labels[static_cast<size_t>(i)];
    space_.Check(label, num_groups_);
    if (prefix.options.size() != label.options.size()) {
      throw std::invalid_argument("a prefix places another number of groups than its label");
    }
    const int r = locality_.ReplicaIndex(label.replicas);
    r_of[static_cast<size_t>(i)] = r;
    shape_of[static_cast<size_t>(i)] = space_.ShapeIndex(label);
    for (int64_t t = 0; t < groups; ++t) {
      const size_t row = static_cast<size_t>(i * groups + t);
      chosen[row] = label.options[static_cast<size_t>(t)];
      if (t > 0) previous[row] = prefix.options[static_cast<size_t>(t - 1)];
      for (const auto& [producer, weight] : locality_.producers(static_cast<int>(t))) {
        // A prefix option the label's R cannot use (the policy's own decoding under another R)
        // counts as its nearest allowed one.
        locality_.AddLocalShare(
            &producer_share[row * o_count], r,
            space_.Nearest(prefix.options[static_cast<size_t>(producer)], label.replicas), weight);
      }
    }
  }
  at::Tensor replica_index = at::tensor(r_of, at::kLong);
  at::Tensor shape_index = at::tensor(shape_of, at::kLong);
  at::Tensor replica_log_p = at::log_softmax(ReplicaLogits(encoding.encoded, inc), -1);
  at::Tensor replica_entropy = -(replica_log_p.exp() * replica_log_p).sum();

  at::Tensor produced = at::tensor(producer_share, at::kFloat).reshape({k, groups, num_options_});
  at::Tensor consumed = inc.consumer_share.index_select(0, replica_index);  // [K, G, O]
  at::Tensor inputs = DecoderInputs(at::tensor(previous, at::kLong).reshape({k, groups}),
                                    shape_index.unsqueeze(1).expand({k, groups}), produced,
                                    consumed, inc.option.unsqueeze(0).expand({k, groups}));
  at::Tensor states = std::get<0>(decoder_->forward(inputs));  // [K, G, Hd]
  at::Tensor masks = locality_.option_masks()
                         .index_select(0, replica_index)
                         .unsqueeze(1)
                         .expand({k, groups, num_options_});
  at::Tensor log_p = at::log_softmax(
      OptionLogits(states, encoding.encoded.unsqueeze(0).expand({k, -1, -1}), encoding, produced,
                   consumed, inc.one_hot.unsqueeze(0).expand({k, -1, -1}), masks),
      -1);  // [K, G, O]
  at::Tensor labels_t = at::tensor(chosen, at::kLong).reshape({k, groups, 1});
  at::Tensor option_log_prob = log_p.gather(-1, labels_t).squeeze(-1);  // [K, G]
  at::Tensor option_entropy = -(log_p.exp() * log_p).sum(-1);           // [K, G]
  return {at::cat({replica_log_p.index_select(0, shape_index).unsqueeze(1), option_log_prob}, 1),
          at::cat({replica_entropy.expand({k, 1}), option_entropy}, 1)};
}

}  // namespace placer::search
