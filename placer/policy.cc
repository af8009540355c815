#include "placer/policy.h"

#include <ATen/ATen.h>

#include <cmath>

namespace placer::search {

PolicyImpl::PolicyImpl(int num_op_types, int feature_dim, int num_devices, PolicyOptions options)
    : options_(options), num_devices_(num_devices) {
  const int h = options.hidden_size;
  type_embedding_ = register_module(
      "type_embedding", torch::nn::Embedding(num_op_types, options.type_embedding_size));
  feature_projection_ = register_module(
      "feature_projection", torch::nn::Linear(feature_dim, options.type_embedding_size));
  encoder_ = register_module(
      "encoder", torch::nn::LSTM(torch::nn::LSTMOptions(2 * options.type_embedding_size,
                                                        options.bidirectional ? h / 2 : h)
                                     .bidirectional(options.bidirectional)
                                     .batch_first(true)));
  device_embedding_ = register_module(
      "device_embedding", torch::nn::Embedding(num_devices + 1, options.device_embedding_size));
  // The decoder reads the previous group's device and the current group's encoding: the groups
  // are aligned with the decoder steps, so step t sees what it places.
  decoder_ = register_module(
      "decoder",
      torch::nn::LSTM(
          torch::nn::LSTMOptions(options.device_embedding_size + h, h).batch_first(true)));
  attend_encoder_ = register_module(
      "attend_encoder",
      torch::nn::Linear(torch::nn::LinearOptions(h, options.attention_size).bias(false)));
  attend_decoder_ = register_module("attend_decoder", torch::nn::Linear(h, options.attention_size));
  output_ = register_module("output", torch::nn::Linear(2 * h, num_devices));
}

std::pair<at::Tensor, at::Tensor> PolicyImpl::Encode(const at::Tensor& type_ids,
                                                     const at::Tensor& features) {
  at::Tensor inputs = at::cat({type_embedding_(type_ids), feature_projection_(features)}, -1);
  at::Tensor encoded = std::get<0>(encoder_->forward(inputs.unsqueeze(0))).squeeze(0);  // [G, H]
  return {encoded, attend_encoder_(encoded)};  // keys [G, A], computed once
}

// Content-based attention in its multiplicative form, score_j = (W_d h) . (W_e e_j) / sqrt(A),
// then the output layer over [h; context]. `states` is [..., H]; the result is [..., devices].
// (The additive form, v . tanh(W_e e_j + W_d h), costs G x G x A per update and made one policy
// step of 256 groups take 110 ms; this form is a matrix product.)
at::Tensor PolicyImpl::Logits(const at::Tensor& states, const at::Tensor& encoded,
                              const at::Tensor& keys) {
  at::Tensor query = attend_decoder_(states);  // [..., A]
  at::Tensor scores = query.matmul(keys.t()) / std::sqrt(static_cast<double>(keys.size(-1)));
  at::Tensor context = at::softmax(scores, -1).matmul(encoded);  // [..., H]
  at::Tensor logits = output_(at::cat({states, context}, -1)) / options_.temperature;
  if (options_.tanh_clip > 0) logits = options_.tanh_clip * at::tanh(logits / options_.tanh_clip);
  return logits;
}

at::Tensor PolicyImpl::Sample(const at::Tensor& type_ids, const at::Tensor& features, int k,
                              at::Generator& generator, bool greedy) {
  at::NoGradGuard no_grad;
  const int64_t groups = type_ids.size(0);
  auto [encoded, keys] = Encode(type_ids, features);
  // The decoder LSTM's own weights, one step at a time.
  // Handles, not references: named_parameters() returns a temporary dictionary (a reference into
  // it dangled; AddressSanitizer caught it).
  const auto parameters = decoder_->named_parameters();
  const at::Tensor w_ih = parameters["weight_ih_l0"];
  const at::Tensor w_hh = parameters["weight_hh_l0"];
  const at::Tensor b_ih = parameters["bias_ih_l0"];
  const at::Tensor b_hh = parameters["bias_hh_l0"];
  at::Tensor h = at::zeros({k, options_.hidden_size});
  at::Tensor c = at::zeros({k, options_.hidden_size});
  at::Tensor previous = at::full({k}, num_devices_, at::kLong);
  at::Tensor devices = at::empty({k, groups}, at::kLong);
  for (int64_t t = 0; t < groups; ++t) {
    at::Tensor input =
        at::cat({device_embedding_(previous), encoded[t].unsqueeze(0).expand({k, -1})}, -1);
    std::tie(h, c) = at::lstm_cell(input, {h, c}, w_ih, w_hh, b_ih, b_hh);
    at::Tensor logits = Logits(h, encoded, keys);
    previous = greedy ? logits.argmax(-1)
                      : at::multinomial(at::softmax(logits, -1), 1, false, generator).squeeze(-1);
    devices.select(1, t).copy_(previous);
  }
  return devices;
}

PolicySamples PolicyImpl::Score(const at::Tensor& type_ids, const at::Tensor& features,
                                const at::Tensor& devices) {
  const int64_t k = devices.size(0);
  auto [encoded, keys] = Encode(type_ids, features);
  at::Tensor start = at::full({k, 1}, num_devices_, at::kLong);
  at::Tensor previous = at::cat({start, devices.slice(1, 0, devices.size(1) - 1)}, 1);  // [K, G]
  at::Tensor inputs = at::cat(
      {device_embedding_(previous), encoded.unsqueeze(0).expand({k, -1, -1})}, -1);  // [K, G, .]
  at::Tensor states = std::get<0>(decoder_->forward(inputs));                        // [K, G, H]
  at::Tensor log_p = at::log_softmax(Logits(states, encoded, keys), -1);             // [K, G, D]
  at::Tensor chosen = log_p.gather(-1, devices.unsqueeze(-1)).squeeze(-1);           // [K, G]
  at::Tensor entropy = -(log_p.exp() * log_p).sum(-1);                               // [K, G]
  return {devices, chosen.sum(1), entropy.sum(1)};
}

}  // namespace placer::search
