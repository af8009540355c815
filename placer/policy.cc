#include "placer/policy.h"

#include <ATen/ATen.h>

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
      "decoder", torch::nn::LSTMCell(options.device_embedding_size + h, h));
  attend_encoder_ = register_module("attend_encoder",
                                    torch::nn::Linear(torch::nn::LinearOptions(h, options.attention_size).bias(false)));
  attend_decoder_ = register_module("attend_decoder", torch::nn::Linear(h, options.attention_size));
  attention_score_ = register_module(
      "attention_score", torch::nn::Linear(torch::nn::LinearOptions(options.attention_size, 1).bias(false)));
  output_ = register_module("output", torch::nn::Linear(2 * h, num_devices));
}

PolicySamples PolicyImpl::Sample(const at::Tensor& type_ids, const at::Tensor& features, int k,
                                 at::Generator& generator, bool greedy) {
  const int64_t groups = type_ids.size(0);
  at::Tensor inputs = at::cat({type_embedding_(type_ids), feature_projection_(features)}, -1);
  // [1, G, H] -> [G, H]: the encoding is the same for every sample.
  at::Tensor encoded = std::get<0>(encoder_->forward(inputs.unsqueeze(0))).squeeze(0);
  at::Tensor keys = attend_encoder_(encoded);  // [G, A], computed once

  at::Tensor h = at::zeros({k, options_.hidden_size});
  at::Tensor c = at::zeros({k, options_.hidden_size});
  at::Tensor previous = at::full({k}, num_devices_, at::kLong);
  std::vector<at::Tensor> chosen, log_probs, entropies;
  chosen.reserve(static_cast<size_t>(groups));
  for (int64_t t = 0; t < groups; ++t) {
    at::Tensor step_input =
        at::cat({device_embedding_(previous), encoded[t].unsqueeze(0).expand({k, -1})}, -1);
    std::tie(h, c) = decoder_(step_input, std::make_tuple(h, c));
    // Content-based attention: score_j = v . tanh(W_e e_j + W_d h).
    at::Tensor scores =
        attention_score_(at::tanh(keys.unsqueeze(0) + attend_decoder_(h).unsqueeze(1))).squeeze(-1);
    at::Tensor context = at::softmax(scores, -1).matmul(encoded);  // [K, H]
    at::Tensor logits = output_(at::cat({h, context}, -1)) / options_.temperature;
    if (options_.tanh_clip > 0) logits = options_.tanh_clip * at::tanh(logits / options_.tanh_clip);
    at::Tensor log_p = at::log_softmax(logits, -1);
    at::Tensor device;
    {
      at::NoGradGuard no_grad;
      device = greedy ? log_p.argmax(-1) : at::multinomial(log_p.exp(), 1, false, generator).squeeze(-1);
    }
    log_probs.push_back(log_p.gather(-1, device.unsqueeze(-1)).squeeze(-1));
    entropies.push_back(-(log_p.exp() * log_p).sum(-1));
    chosen.push_back(device);
    previous = device;
  }
  return {at::stack(chosen, 1), at::stack(log_probs, 1).sum(1), at::stack(entropies, 1).sum(1)};
}

}  // namespace placer::search
