// The placement policy of Mirhoseini et al. (2017) and the hierarchical planner (2018): an LSTM
// encoder over the groups in topological order, and an LSTM decoder with content-based attention
// that emits one device per group, fed the previous group's device.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/rnn.h>

#include "graph/grouping.h"

namespace placer::search {

struct PolicyOptions {
  int hidden_size = 128;  // encoder output (both directions together) and decoder state
  int type_embedding_size = 16;
  int device_embedding_size = 16;
  int attention_size = 64;
  bool bidirectional = true;
  double temperature = 1.0;  // logits are divided by it before the softmax
  double tanh_clip = 0.0;    // > 0: logits = C * tanh(logits / C), as the 2018 planner did
};

struct PolicySamples {
  at::Tensor devices;   // [K, G] int64: device per group, per sample
  at::Tensor log_prob;  // [K]: log-probability of each sample (differentiable)
  at::Tensor entropy;   // [K]: summed per-step entropy of each sample (differentiable)
};

class PolicyImpl : public torch::nn::Module {
 public:
  PolicyImpl(int num_op_types, int feature_dim, int num_devices, PolicyOptions options);

  // Draws `k` placements ([K, G] int64), without recording gradients. With `greedy`, takes the
  // most likely device at each step instead.
  at::Tensor Sample(const at::Tensor& type_ids, const at::Tensor& features, int k,
                    at::Generator& generator, bool greedy = false);

  // Log-probabilities and entropies of given placements, differentiable. The decoder's inputs
  // (the previous group's device and the current group's encoding) are known once the devices
  // are, so every step is computed at once: one fused LSTM pass and batched attention instead
  // of G sequential steps, which is what makes an update cheap.
  PolicySamples Score(const at::Tensor& type_ids, const at::Tensor& features,
                      const at::Tensor& devices);

  int num_devices() const { return num_devices_; }

 private:
  PolicyOptions options_;
  int num_devices_;
  torch::nn::Embedding type_embedding_{nullptr};
  torch::nn::Linear feature_projection_{nullptr};
  torch::nn::LSTM encoder_{nullptr};
  std::pair<at::Tensor, at::Tensor> Encode(const at::Tensor& type_ids, const at::Tensor& features);
  at::Tensor Logits(const at::Tensor& states, const at::Tensor& encoded, const at::Tensor& keys);

  torch::nn::Embedding device_embedding_{nullptr};  // index num_devices = "no previous group"
  torch::nn::LSTM decoder_{nullptr};  // run step by step (sampling) or fused (scoring)
  torch::nn::Linear attend_encoder_{nullptr}, attend_decoder_{nullptr};
  torch::nn::Linear output_{nullptr};
};
TORCH_MODULE(Policy);

}  // namespace placer::search
