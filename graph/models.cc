#include "graph/models.h"

#include <fmt/format.h>

#include "graph/ops.h"
#include "graph/training_step.h"

namespace placer::graph {

TensorId ModelBuilder::Input(const std::string& name, Shape shape, DType dtype, TensorKind kind) {
  return graph_.AddTensor(
      Tensor{.name = name, .shape = std::move(shape), .dtype = dtype, .kind = kind});
}

TensorId ModelBuilder::Parameter(const std::string& name, Shape shape, Initializer init) {
  return graph_.AddTensor(Tensor{.name = name,
                                 .shape = std::move(shape),
                                 .dtype = DType::kFloat32,
                                 .kind = TensorKind::kParameter,
                                 .init = init});
}

TensorId ModelBuilder::Apply(const std::string& name, const std::string& type,
                             std::vector<TensorId> inputs, Attributes attrs) {
  Op op{.name = name, .type = type, .inputs = std::move(inputs), .attrs = std::move(attrs)};
  std::vector<Shape> shapes;
  try {
    shapes = InferOutputShapes(graph_, op);
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("op '{}' ({}): {}", name, type, error.what()));
  }
  TensorId out = graph_.AddTensor(Tensor{.name = name, .shape = shapes.at(0)});
  op.outputs = {out};
  graph_.AddOp(std::move(op));
  return out;
}

TensorId ModelBuilder::Conv2d(const std::string& name, TensorId x, int64_t out_channels,
                              int64_t kernel, double stddev) {
  int64_t in_channels = graph_.tensor(x).shape.at(1);
  TensorId w = Parameter(name + ".weight", {out_channels, in_channels, kernel, kernel},
                         {Initializer::Kind::kNormal, stddev});
  TensorId b = Parameter(name + ".bias", {out_channels}, {});
  Attributes attrs;
  attrs.Set("stride", std::vector<int64_t>{1, 1});
  attrs.Set("padding", std::vector<int64_t>{0, 0});
  return Apply(name, op_types::kConv2d, {x, w, b}, std::move(attrs));
}

TensorId ModelBuilder::Linear(const std::string& name, TensorId x, int64_t out_features,
                              double stddev) {
  int64_t in_features = graph_.tensor(x).shape.at(1);
  TensorId w = Parameter(name + ".weight", {out_features, in_features},
                         {Initializer::Kind::kNormal, stddev});
  TensorId b = Parameter(name + ".bias", {out_features}, {});
  return Apply(name, op_types::kLinear, {x, w, b});
}

TensorId ModelBuilder::Relu(const std::string& name, TensorId x) {
  return Apply(name, op_types::kRelu, {x});
}

TensorId ModelBuilder::SoftmaxCrossEntropy(const std::string& name, TensorId logits,
                                           TensorId labels, int64_t normalizer) {
  Attributes attrs;
  // Mean over the whole minibatch; data parallel shards keep the global batch as normaliser so
  // that their summed gradients equal the single-device gradient.
  attrs.Set("normalizer", normalizer > 0 ? normalizer : graph_.tensor(logits).shape.at(0));
  return Apply(name, op_types::kSoftmaxCrossEntropy, {logits, labels}, std::move(attrs));
}

namespace {
Attributes Pool2x2() {
  Attributes attrs;
  attrs.Set("kernel", std::vector<int64_t>{2, 2});
  attrs.Set("stride", std::vector<int64_t>{2, 2});
  return attrs;
}

void CheckPositive(int64_t value, const char* what) {
  if (value < 1) throw GraphError(fmt::format("{} must be at least 1, is {}", what, value));
}
}  // namespace

Graph BuildLeNet(const LeNetOptions& o) {
  CheckPositive(o.batch_size, "batch_size");
  Graph graph;
  ModelBuilder b(graph);
  TensorId x = b.Input("images", {o.batch_size, 1, o.image_size, o.image_size});
  TensorId y = b.Input("labels", {o.batch_size}, DType::kInt64, TensorKind::kLabel);
  TensorId h = b.Conv2d("conv1", x, o.conv1_channels, 3, o.init_stddev);
  h = b.Relu("relu1", h);
  h = b.Apply("pool1", op_types::kAvgPool2d, {h}, Pool2x2());
  h = b.Conv2d("conv2", h, o.conv2_channels, 5, o.init_stddev);
  h = b.Relu("relu2", h);
  h = b.Apply("pool2", op_types::kAvgPool2d, {h}, Pool2x2());
  h = b.Apply("flatten", op_types::kFlatten, {h});
  h = b.Linear("fc1", h, o.hidden, o.init_stddev);
  h = b.Relu("relu3", h);
  h = b.Linear("fc2", h, o.classes, o.init_stddev);
  b.SoftmaxCrossEntropy("loss", h, y, o.loss_normalizer);
  if (o.training_step) AppendBackwardAndUpdate(graph, o.learning_rate);
  graph.Validate();
  return graph;
}

Graph BuildParallelMlp(const ParallelMlpOptions& o) {
  CheckPositive(o.batch_size, "batch_size");
  CheckPositive(o.branches, "branches");
  CheckPositive(o.depth, "depth");
  Graph graph;
  ModelBuilder b(graph);
  TensorId x = b.Input("features", {o.batch_size, o.in_features});
  TensorId y = b.Input("labels", {o.batch_size}, DType::kInt64, TensorKind::kLabel);
  TensorId sum = -1;
  for (int64_t branch = 0; branch < o.branches; ++branch) {
    TensorId h = x;
    for (int64_t layer = 0; layer < o.depth; ++layer) {
      std::string name = fmt::format("tower{}.fc{}", branch, layer);
      h = b.Relu(name + ".relu", b.Linear(name, h, o.width, o.init_stddev));
    }
    sum = branch == 0 ? h : b.Apply(fmt::format("merge{}", branch), op_types::kAdd, {sum, h});
  }
  TensorId logits = b.Linear("classifier", sum, o.classes, o.init_stddev);
  b.SoftmaxCrossEntropy("loss", logits, y, o.loss_normalizer);
  if (o.training_step) AppendBackwardAndUpdate(graph, o.learning_rate);
  graph.Validate();
  return graph;
}

}  // namespace placer::graph
