#include "graph/models.h"

#include <fmt/format.h>

#include <bit>
#include <cstring>

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
  const auto [shapes, dtypes] = InferOutputs(graph_, op);
  if (shapes.size() != 1) {
    throw GraphError(
        fmt::format("op '{}' ({}) has {} outputs; use ApplyMulti", name, type, shapes.size()));
  }
  TensorId out =
      graph_.AddTensor(Tensor{.name = name, .shape = shapes.at(0), .dtype = dtypes.at(0)});
  op.outputs = {out};
  graph_.AddOp(std::move(op));
  return out;
}

std::vector<TensorId> ModelBuilder::ApplyMulti(const std::string& name, const std::string& type,
                                               std::vector<TensorId> inputs, Attributes attrs) {
  Op op{.name = name, .type = type, .inputs = std::move(inputs), .attrs = std::move(attrs)};
  const auto [shapes, dtypes] = InferOutputs(graph_, op);
  for (size_t k = 0; k < shapes.size(); ++k) {
    op.outputs.push_back(graph_.AddTensor(
        Tensor{.name = fmt::format("{}:{}", name, k), .shape = shapes[k], .dtype = dtypes[k]}));
  }
  std::vector<TensorId> outputs = op.outputs;
  graph_.AddOp(std::move(op));
  return outputs;
}

TensorId ModelBuilder::Conv2d(const std::string& name, TensorId x, int64_t out_channels,
                              int64_t kernel, double stddev) {
  return Conv2d(
      name, x,
      ConvSpec{.out_channels = out_channels, .kernel = {kernel, kernel}, .stddev = stddev});
}

TensorId ModelBuilder::Conv2d(const std::string& name, TensorId x, const ConvSpec& spec) {
  const Shape in = ShapeOf(x);  // a copy: adding parameters may move the graph's tensors
  if (in.size() != 4) {
    throw GraphError(
        fmt::format("op '{}' (Conv2d): input must be [N,C,H,W], is {}", name, ToString(in)));
  }
  if (spec.kernel.size() != 2) {
    throw GraphError(fmt::format("op '{}' (Conv2d): the kernel is [height, width]", name));
  }
  TensorId w =
      Parameter(name + ".weight", {spec.out_channels, in[1], spec.kernel[0], spec.kernel[1]},
                {Initializer::Kind::kNormal, spec.stddev});
  std::vector<TensorId> inputs = {x, w};
  if (spec.bias) inputs.push_back(Parameter(name + ".bias", {spec.out_channels}, {}));
  Attributes attrs;
  attrs.Set("stride", spec.stride);
  attrs.Set("padding", spec.padding);
  return Apply(name, op_types::kConv2d, std::move(inputs), std::move(attrs));
}

TensorId ModelBuilder::Linear(const std::string& name, TensorId x, int64_t out_features,
                              double stddev, bool bias) {
  const Shape in = ShapeOf(x);  // a copy: adding parameters may move the graph's tensors
  if (in.empty()) throw GraphError(fmt::format("op '{}' (Linear): input is a scalar", name));
  TensorId w =
      Parameter(name + ".weight", {out_features, in.back()}, {Initializer::Kind::kNormal, stddev});
  std::vector<TensorId> inputs = {x, w};
  if (bias) inputs.push_back(Parameter(name + ".bias", {out_features}, {}));
  return Apply(name, op_types::kLinear, std::move(inputs));
}

TensorId ModelBuilder::Relu(const std::string& name, TensorId x) {
  return Apply(name, op_types::kRelu, {x});
}

TensorId ModelBuilder::BatchNorm(const std::string& name, TensorId x, double epsilon) {
  const Shape in = ShapeOf(x);  // a copy: adding parameters may move the graph's tensors
  if (in.size() < 2) {
    throw GraphError(
        fmt::format("op '{}' (BatchNorm): input must be [N,C,...], is {}", name, ToString(in)));
  }
  TensorId scale = Parameter(name + ".scale", {in[1]}, {Initializer::Kind::kOnes});
  TensorId shift = Parameter(name + ".bias", {in[1]}, {});
  Attributes attrs;
  attrs.Set("epsilon", epsilon);
  return Apply(name, op_types::kBatchNorm, {x, scale, shift}, std::move(attrs));
}

TensorId ModelBuilder::LayerNorm(const std::string& name, TensorId x, double epsilon) {
  const Shape in = ShapeOf(x);  // a copy: adding parameters may move the graph's tensors
  if (in.empty()) throw GraphError(fmt::format("op '{}' (LayerNorm): input is a scalar", name));
  TensorId scale = Parameter(name + ".scale", {in.back()}, {Initializer::Kind::kOnes});
  TensorId shift = Parameter(name + ".bias", {in.back()}, {});
  Attributes attrs;
  attrs.Set("axis", int64_t{-1});
  attrs.Set("epsilon", epsilon);
  return Apply(name, op_types::kLayerNorm, {x, scale, shift}, std::move(attrs));
}

TensorId ModelBuilder::Constant(const std::string& name, const Shape& shape,
                                const std::vector<float>& values) {
  if (static_cast<int64_t>(values.size()) != NumElements(shape)) {
    throw GraphError(fmt::format("op '{}' (Constant): {} values for shape {}", name, values.size(),
                                 ToString(shape)));
  }
  // The IR stores the values as little-endian float32 bytes; every supported host is
  // little-endian, so the in-memory representation is that byte string.
  static_assert(std::endian::native == std::endian::little);
  std::string bytes(values.size() * sizeof(float), '\0');
  std::memcpy(bytes.data(), values.data(), bytes.size());
  Attributes attrs;
  attrs.Set("shape", shape);
  attrs.Set("values", std::move(bytes));
  return Apply(name, op_types::kConstant, {}, std::move(attrs));
}

TensorId ModelBuilder::Zeros(const std::string& name, const Shape& shape) {
  return Constant(name, shape, std::vector<float>(static_cast<size_t>(NumElements(shape)), 0.0f));
}

TensorId ModelBuilder::Reshape(const std::string& name, TensorId x, const Shape& shape) {
  Attributes attrs;
  attrs.Set("shape", shape);
  return Apply(name, op_types::kReshape, {x}, std::move(attrs));
}

TensorId ModelBuilder::Transpose(const std::string& name, TensorId x,
                                 const std::vector<int64_t>& perm) {
  Attributes attrs;
  attrs.Set("perm", perm);
  return Apply(name, op_types::kTranspose, {x}, std::move(attrs));
}

TensorId ModelBuilder::Concat(const std::string& name, std::vector<TensorId> inputs, int64_t axis) {
  Attributes attrs;
  attrs.Set("axis", axis);
  return Apply(name, op_types::kConcat, std::move(inputs), std::move(attrs));
}

std::vector<TensorId> ModelBuilder::Split(const std::string& name, TensorId x, int64_t axis,
                                          const std::vector<int64_t>& sizes) {
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("sizes", sizes);
  return ApplyMulti(name, op_types::kSplit, {x}, std::move(attrs));
}

TensorId ModelBuilder::Slice(const std::string& name, TensorId x, int64_t axis, int64_t start,
                             int64_t end) {
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("start", start);
  attrs.Set("end", end);
  return Apply(name, op_types::kSlice, {x}, std::move(attrs));
}

TensorId ModelBuilder::Softmax(const std::string& name, TensorId x, int64_t axis) {
  Attributes attrs;
  attrs.Set("axis", axis);
  return Apply(name, op_types::kSoftmax, {x}, std::move(attrs));
}

namespace {
Attributes PoolAttributes(int64_t kernel, int64_t stride, int64_t padding) {
  Attributes attrs;
  attrs.Set("kernel", std::vector<int64_t>{kernel, kernel});
  attrs.Set("stride", std::vector<int64_t>{stride, stride});
  attrs.Set("padding", std::vector<int64_t>{padding, padding});
  return attrs;
}
}  // namespace

TensorId ModelBuilder::MaxPool2d(const std::string& name, TensorId x, int64_t kernel,
                                 int64_t stride, int64_t padding) {
  return Apply(name, op_types::kMaxPool2d, {x}, PoolAttributes(kernel, stride, padding));
}

TensorId ModelBuilder::AvgPool2d(const std::string& name, TensorId x, int64_t kernel,
                                 int64_t stride, int64_t padding) {
  return Apply(name, op_types::kAvgPool2d, {x}, PoolAttributes(kernel, stride, padding));
}

std::pair<TensorId, TensorId> ModelBuilder::LstmCell(const std::string& name, TensorId x,
                                                     TensorId h, TensorId c, TensorId w_ih,
                                                     TensorId w_hh, TensorId bias) {
  std::vector<TensorId> out = ApplyMulti(name, op_types::kLstmCell, {x, h, c, w_ih, w_hh, bias});
  return {out.at(0), out.at(1)};
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

void LeNetOptions::Fields(FieldVisitor& v) {
  v.Int("image_size", image_size, 16,
        "input height and width (one channel); smaller inputs leave nothing for the second "
        "pooling layer");
  v.Int("conv1_channels", conv1_channels, 1, "output channels of the first convolution");
  v.Int("conv2_channels", conv2_channels, 1, "output channels of the second convolution");
  v.Int("hidden", hidden, 1, "width of the hidden fully connected layer");
  v.Int("classes", classes, 1, "width of the output layer");
}

Graph BuildLeNet(const LeNetOptions& options) {
  LeNetOptions o = options;
  CheckFields(o);
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
