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
  int hidden_size = 128;        // encoder output (both directions together) and decoder state
  int type_embedding_size = 16;
  int device_embedding_size = 16;
  int attention_size = 64;
  bool bidirectional = true;
  double temperature = 1.0;     // logits are divided by it before the softmax
  double tanh_clip = 0.0;       // > 0: logits = C * tanh(logits / C), as the 2018 planner did
};

struct PolicySamples {
  at::Tensor devices;   // [K, G] int64: device per group, per sample
  at::Tensor log_prob;  // [K]: log-probability of each sample (differentiable)
  at::Tensor entropy;   // [K]: summed per-step entropy of each sample (differentiable)
};

class PolicyImpl : public torch::nn::Module {
 public:
  PolicyImpl(int num_op_types, int feature_dim, int num_devices, PolicyOptions options);

  // Draws `k` placements. With `greedy`, takes the most likely device at each step instead.
  PolicySamples Sample(const at::Tensor& type_ids, const at::Tensor& features, int k,
                       at::Generator& generator, bool greedy = false);

  int num_devices() const { return num_devices_; }

 private:
  PolicyOptions options_;
  int num_devices_;
  torch::nn::Embedding type_embedding_{nullptr};
  torch::nn::Linear feature_projection_{nullptr};
  torch::nn::LSTM encoder_{nullptr};
  torch::nn::Embedding device_embedding_{nullptr};  // index num_devices = "no previous group"
  torch::nn::LSTMCell decoder_{nullptr};
  torch::nn::Linear attend_encoder_{nullptr}, attend_decoder_{nullptr}, attention_score_{nullptr};
  torch::nn::Linear output_{nullptr};
};
TORCH_MODULE(Policy);

}  // namespace placer::search
