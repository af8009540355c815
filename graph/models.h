// Built-in models. Each builder returns the whole training step (forward, loss, backward, update),
// validated.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"
#include "graph/model_options.h"

namespace placer::graph {

// The LeNet of the d2l multi-GPU chapter: conv(20, 3x3) -> ReLU -> avgpool(2, 2) -> conv(50, 5x5)
// -> ReLU -> avgpool(2, 2) -> flatten -> FC(128) -> ReLU -> FC(10), weights N(0, 0.01^2), biases
// 0, softmax cross-entropy, SGD.
struct LeNetOptions {
  int64_t batch_size = 256;
  int64_t image_size = 28;
  int64_t conv1_channels = 20;
  int64_t conv2_channels = 50;
  int64_t hidden = 128;
  int64_t classes = 10;
  double learning_rate = 0.2;
  double init_stddev = 0.01;
  int64_t loss_normalizer = 0;  // 0: the batch size; data-parallel shards use the global batch
  bool training_step = true;    // false: forward ops and the loss only

  // The sizes a config sets (model.lenet), with their bounds (model_options.h).
  void Fields(FieldVisitor& v);
  std::optional<FieldError> Check() const { return std::nullopt; }
  std::map<std::string, std::string> ExpertFacts() const { return {}; }
};
Graph BuildLeNet(const LeNetOptions& options);

// `branches` independent MLP towers of `depth` Linear+ReLU layers on the same input, summed, then
// a classifier: the simplest graph with parallelism for a placement to exploit.
struct ParallelMlpOptions {
  int64_t batch_size = 64;
  int64_t in_features = 256;
  int64_t width = 512;
  int64_t depth = 3;
  int64_t branches = 2;
  int64_t classes = 10;
  double learning_rate = 0.05;
  double init_stddev = 0.05;
  int64_t loss_normalizer = 0;
  bool training_step = true;
};
Graph BuildParallelMlp(const ParallelMlpOptions& options);

// A convolution's geometry; pairs are [height, width].
struct ConvSpec {
  int64_t out_channels = 1;
  std::vector<int64_t> kernel = {1, 1};
  std::vector<int64_t> stride = {1, 1};
  std::vector<int64_t> padding = {0, 0};
  bool bias = true;
  double stddev = 0.01;  // of the N(0, stddev^2) weights
};

// Appends forward ops one by one, inferring output shapes. Builders use it; tests use it to build
// small graphs by hand.
class ModelBuilder {
 public:
  explicit ModelBuilder(Graph& graph) : graph_(graph) {}
  Graph& graph() { return graph_; }
  // Valid until the next tensor is added: copy it to keep it across Parameter/Apply calls.
  const Shape& ShapeOf(TensorId id) const { return graph_.tensor(id).shape; }

  TensorId Input(const std::string& name, Shape shape, DType dtype = DType::kFloat32,
                 TensorKind kind = TensorKind::kInput);
  TensorId Parameter(const std::string& name, Shape shape, Initializer init);
  // Adds op `name` of `type`; its single output is named `name` and gets the inferred shape.
  TensorId Apply(const std::string& name, const std::string& type, std::vector<TensorId> inputs,
                 Attributes attrs = {});
  // The same for ops with several outputs (Split, LstmCell): output k is named "<name>:<k>".
  std::vector<TensorId> ApplyMulti(const std::string& name, const std::string& type,
                                   std::vector<TensorId> inputs, Attributes attrs = {});

  // Conv2d / Linear with weight "<name>.weight" N(0, stddev^2) and bias "<name>.bias" zeros.
  TensorId Conv2d(const std::string& name, TensorId x, int64_t out_channels, int64_t kernel,
                  double stddev);
  TensorId Conv2d(const std::string& name, TensorId x, const ConvSpec& spec);
  // Over the last dimension of x (any rank >= 2); without bias when `bias` is false.
  TensorId Linear(const std::string& name, TensorId x, int64_t out_features, double stddev,
                  bool bias = true);
  TensorId Relu(const std::string& name, TensorId x);
  // Scale "<name>.scale" ones, shift "<name>.bias" zeros.
  TensorId BatchNorm(const std::string& name, TensorId x, double epsilon);
  // Normalised over the last dimension.
  TensorId LayerNorm(const std::string& name, TensorId x, double epsilon);
  // A float32 tensor made on the device of its op, e.g. an LSTM's zero initial state.
  TensorId Constant(const std::string& name, const Shape& shape, const std::vector<float>& values);
  TensorId Zeros(const std::string& name, const Shape& shape);
  TensorId Reshape(const std::string& name, TensorId x, const Shape& shape);
  TensorId Transpose(const std::string& name, TensorId x, const std::vector<int64_t>& perm);
  TensorId Concat(const std::string& name, std::vector<TensorId> inputs, int64_t axis);
  std::vector<TensorId> Split(const std::string& name, TensorId x, int64_t axis,
                              const std::vector<int64_t>& sizes);
  TensorId Slice(const std::string& name, TensorId x, int64_t axis, int64_t start, int64_t end);
  TensorId Softmax(const std::string& name, TensorId x, int64_t axis);
  // max_pool2d / avg_pool2d (count_include_pad, PyTorch's default) with square windows.
  TensorId MaxPool2d(const std::string& name, TensorId x, int64_t kernel, int64_t stride,
                     int64_t padding = 0);
  TensorId AvgPool2d(const std::string& name, TensorId x, int64_t kernel, int64_t stride,
                     int64_t padding = 0);
  // One fused LSTM step: returns {h', c'}.
  std::pair<TensorId, TensorId> LstmCell(const std::string& name, TensorId x, TensorId h,
                                         TensorId c, TensorId w_ih, TensorId w_hh, TensorId bias);
  // Mean over `normalizer` rows (0: the logits' batch).
  TensorId SoftmaxCrossEntropy(const std::string& name, TensorId logits, TensorId labels,
                               int64_t normalizer = 0);

 private:
  Graph& graph_;
};

}  // namespace placer::graph
