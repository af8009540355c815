#include "graph/builtin_models.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "graph/models.h"
#include "graph/zoo.h"

namespace placer::graph {

namespace detail {

void FieldChecker::Int(std::string_view key, int64_t& value, int64_t minimum, std::string_view) {
  if (value < minimum) {
    throw GraphError(fmt::format("{} must be at least {}, is {}", key, minimum, value));
  }
}

void FieldChecker::Positive(std::string_view key, double& value, std::string_view) {
  if (!(value > 0) || !std::isfinite(value)) {
    throw GraphError(fmt::format("{} must be positive, is {}", key, value));
  }
}

void FieldChecker::Choice(std::string_view key, std::string& value,
                          const std::vector<std::string_view>& choices, std::string_view) {
  if (std::find(choices.begin(), choices.end(), value) == choices.end()) {
    throw GraphError(fmt::format("{} is '{}', not one of the choices", key, value));
  }
}

void ThrowFieldError(const FieldError& error) {
  throw GraphError(fmt::format("{}: {}", error.fields.empty() ? "options" : error.fields.front(),
                               error.message));
}

void CheckBatch(int64_t batch_size) {
  if (batch_size < 1)
    throw GraphError(fmt::format("batch_size must be at least 1, is {}", batch_size));
}

}  // namespace detail

namespace {

template <typename T>
std::function<std::unique_ptr<ModelOptions>()> Defaults(Graph (*builder)(const T&)) {
  return [builder] { return std::make_unique<TypedModelOptions<T>>(T{}, builder); };
}

}  // namespace

const std::vector<ModelEntry>& BuiltinModels() {
  static const auto* models = new std::vector<ModelEntry>{
      {"lenet",
       "The LeNet of the d2l chapter \"Multiple GPUs\" (Fashion-MNIST inputs); its defaults are "
       "the chapter's.",
       Defaults(BuildLeNet)},
      {"inception_v3",
       "torchvision's Inception-V3 without the auxiliary classifier (every convolution: conv "
       "without bias, batch norm, ReLU); at the defaults exactly torchvision's 27,161,264 "
       "parameters less the auxiliary head's 3,326,696. Op names: `stem/conv2d_1a_3x3/conv`, "
       "`mixed_5b/branch5x5_2/bn`, `mixed_6a/concat`, `head/fc`, `loss`.",
       Defaults(BuildInceptionV3)},
      {"rnnlm",
       "A stacked-LSTM language model unrolled over `time_steps` (the RNNLM of ColocRL): "
       "embedding, LSTM layers from zero state, a softmax layer and cross-entropy loss at every "
       "step. Op names: `embed`, `embed/t3`, `l1/t3/gate_f/act` (or `l1/t3/lstm`), "
       "`softmax/t3/logits`, `softmax/t3/loss`.",
       Defaults(BuildRnnLm)},
      {"nmt",
       "An attentional LSTM encoder-decoder (GNMT-style, as in the placement papers), unrolled: "
       "encoder and decoder of `layers` LSTM layers each (residual connections from the third "
       "layer on), dot-product attention of the top decoder output over the encoder outputs at "
       "every target step, a softmax layer and loss per target step. Op names: `enc/embed`, "
       "`enc/l2/t7/gate_i/x`, `dec/l0/t3/cell/h`, `attention/memory`, `attention/t3/context`, "
       "`softmax/t3/loss`. With `layers: 8` and the defaults the training step has 52,343 ops.",
       Defaults(BuildNmt)},
      {"transformer",
       "A BERT-shaped encoder (defaults: BERT-base), with BERT's pooler and a classifier on the "
       "first token; at the defaults its parameters less the classifier's are BERT-base's "
       "109,482,240. Op names: `embeddings/word`, `l5/attention/probs`, `l5/ffn/gelu`, "
       "`head/classifier`, `loss`.",
       Defaults(BuildTransformerEncoder)},
  };
  return *models;
}

const ModelEntry* FindBuiltinModel(std::string_view name) {
  for (const ModelEntry& entry : BuiltinModels()) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

std::vector<std::string_view> BuiltinModelNames() {
  std::vector<std::string_view> names;
  for (const ModelEntry& entry : BuiltinModels()) names.push_back(entry.name);
  return names;
}

}  // namespace placer::graph
