#include "graph/onnx/loader.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "graph/ops.h"
#include "graph/shared_values.h"
#include "graph/training_step.h"
#include "placer_onnx.pb.h"

namespace placer::graph::onnx {

namespace pb = ::placer::onnxpb;

const OpTable& Ops() {
  static const OpTable* table = [] {
    auto* ops = new OpTable;
    AddElementwiseOps(*ops);
    AddTensorOps(*ops);
    AddLayoutOps(*ops);
    AddConstantOps(*ops);
    AddReduceOps(*ops);
    AddNnOps(*ops);
    AddRecurrentOps(*ops);
    AddLossOps(*ops);
    AddIndexOps(*ops);
    AddControlOps(*ops);
    return ops;
  }();
  return *table;
}

const Known& Arg(const std::vector<KnownPtr>& in, size_t k) {
  if (k >= in.size() || !in[k]) throw GraphError(fmt::format("input {} is missing", k));
  return *in[k];
}

std::vector<float> Floats(size_t count, double value) {
  return std::vector<float>(count, static_cast<float>(value));
}

Loader::Loader(const std::filesystem::path& file, const OnnxOptions& options)
    : file_(file.string()),
      options_(options),
      model_(std::make_unique<pb::ModelProto>(ParseModel(file))) {}

Loader::~Loader() = default;

const std::string& Loader::type() const { return node_->op_type(); }

size_t Loader::NumInputs() const { return static_cast<size_t>(node_->input_size()); }

bool Loader::HasInput(size_t k) const {
  return k < NumInputs() && !node_->input(static_cast<int>(k)).empty();
}

const std::string& Loader::InputName(size_t k) const {
  if (k >= NumInputs()) throw GraphError(fmt::format("input {} is missing", k));
  return node_->input(static_cast<int>(k));
}

size_t Loader::NumOutputs() const { return static_cast<size_t>(node_->output_size()); }

const std::string& Loader::OutputName(size_t k) const {
  if (k >= NumOutputs()) throw GraphError(fmt::format("output {} is missing", k));
  return node_->output(static_cast<int>(k));
}

std::string Loader::Describe() const {
  return node_->name().empty()
             ? fmt::format("node {} ({})", node_index_, node_->op_type())
             : fmt::format("node {} '{}' ({})", node_index_, node_->name(), node_->op_type());
}

const Loader::Value& Loader::In(size_t k) const {
  const std::string& name = InputName(k);
  if (name.empty()) throw GraphError(fmt::format("input {} is missing", k));
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw GraphError(fmt::format(
        "input '{}' is not a graph input, an initializer or an output of an earlier node", name));
  }
  return it->second;
}

Shape Loader::InShape(size_t k) const {
  const Value& v = In(k);
  return v.tensor ? graph_.tensor(*v.tensor).shape : v.known->shape;
}

DType Loader::InDType(size_t k) const {
  const Value& v = In(k);
  return v.tensor ? graph_.tensor(*v.tensor).dtype : IrType(v.known->type);
}

const Known& Loader::KnownData(size_t k, const char* what) const {
  const Value& v = In(k);
  if (!v.known) {
    throw GraphError(
        fmt::format("input '{}' ({}) must be computable at load time, but depends on "
                    "the minibatch or the weights",
                    InputName(k), what));
  }
  if (!v.known->has_data) {
    throw GraphError(fmt::format("initializer '{}' ({}) has no data", InputName(k), what));
  }
  return *v.known;
}

std::vector<double> Loader::KnownFloats(size_t k, const char* what) const {
  const Known& known = KnownData(k, what);
  std::vector<double> out;
  for (int64_t e = 0; e < known.size(); ++e) out.push_back(known.F(e));
  return out;
}

std::vector<int64_t> Loader::KnownInts(size_t k, const char* what) const {
  const Known& known = KnownData(k, what);
  std::vector<int64_t> out;
  for (int64_t e = 0; e < known.size(); ++e) out.push_back(known.I(e));
  return out;
}

bool Loader::OutputLive(size_t k) const {
  return k < static_cast<size_t>(node_->output_size()) && !OutputName(k).empty() &&
         live_values_.count(OutputName(k)) != 0;
}

std::string Loader::UniqueOpName(const std::string& base) {
  std::string name = base;
  for (int n = 2; graph_.FindOp(name); ++n) name = fmt::format("{}#{}", base, n);
  return name;
}

std::string Loader::UniqueTensorName(const std::string& base) {
  std::string name = base;
  for (int n = 2; graph_.FindTensor(name) || reserved_.count(name) != 0; ++n) {
    name = fmt::format("{}#{}", base, n);
  }
  return name;
}

std::vector<TensorId> Loader::Emit(const std::string& op_name, const std::string& type,
                                   std::vector<TensorId> inputs, Attributes attrs,
                                   const std::vector<std::string>& outputs, bool exact) {
  Op op{.name = UniqueOpName(op_name),
        .type = type,
        .inputs = std::move(inputs),
        .attrs = std::move(attrs)};
  const auto [shapes, dtypes] = InferOutputs(graph_, op);
  if (shapes.size() != outputs.size()) {
    throw GraphError(fmt::format("IR op '{}' ({}) has {} outputs, {} expected", op.name, type,
                                 shapes.size(), outputs.size()));
  }
  for (size_t k = 0; k < shapes.size(); ++k) {
    // ONNX value names are kept as they are (tests and users look values up by them).
    const bool verbatim =
        (exact || current_outputs_.count(outputs[k]) != 0) && !graph_.FindTensor(outputs[k]);
    op.outputs.push_back(
        graph_.AddTensor({.name = verbatim ? outputs[k] : UniqueTensorName(outputs[k]),
                          .shape = shapes[k],
                          .dtype = dtypes[k]}));
  }
  std::vector<TensorId> out = op.outputs;
  graph_.AddOp(std::move(op));
  return out;
}

TensorId Loader::Emit1(const std::string& op_name, const std::string& type,
                       std::vector<TensorId> inputs, Attributes attrs, const std::string& output,
                       bool exact) {
  return Emit(op_name, type, std::move(inputs), std::move(attrs), {output}, exact).at(0);
}

void Loader::EmitOutput(const std::string& type, std::vector<TensorId> inputs, Attributes attrs) {
  Define(0, Emit1(NodeBase(), type, std::move(inputs), std::move(attrs), OutputName(0)));
}

TensorId Loader::Sub(const std::string& suffix, const std::string& type,
                     std::vector<TensorId> inputs, Attributes attrs) {
  const std::string name = NodeBase() + "/" + suffix;
  return Emit1(name, type, std::move(inputs), std::move(attrs), name);
}

TensorId Loader::ReshapeTo(const std::string& suffix, TensorId x, const Shape& shape,
                           const std::string& output) {
  Attributes attrs;
  attrs.Set("shape", shape);
  const std::string name = NodeBase() + "/" + suffix;
  return Emit1(name, op_types::kReshape, {x}, std::move(attrs), output.empty() ? name : output);
}

TensorId Loader::SliceAxis(const std::string& suffix, TensorId x, int64_t axis, int64_t start,
                           int64_t end, int64_t step) {
  Attributes attrs;
  attrs.Set("axis", axis);
  attrs.Set("start", start);
  attrs.Set("end", end);
  if (step != 1) attrs.Set("step", step);
  return Sub(suffix, op_types::kSlice, {x}, std::move(attrs));
}

void Loader::Define(size_t output, TensorId tensor) {
  values_[OutputName(output)] = Value{.tensor = tensor, .known = nullptr};
}

void Loader::DefineKnown(size_t output, Known known) {
  known.name = OutputName(output);
  values_[OutputName(output)] =
      Value{.tensor = std::nullopt, .known = std::make_shared<const Known>(std::move(known))};
}

TensorId Loader::ConstantOp(const std::string& base, const Shape& shape,
                            const std::vector<float>& values, bool exact) {
  if (NumElements(shape) > kMaxConstantElements) {
    throw GraphError(fmt::format("a constant of shape {} is too large", ToString(shape)));
  }
  Attributes attrs;
  attrs.Set("shape", shape);
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());  // little-endian
  attrs.Set("values", std::move(bytes));
  return Emit1(base, op_types::kConstant, {}, std::move(attrs), base, exact);
}

TensorId Loader::IntConstantOp(const std::string& base, const Shape& shape,
                               const std::vector<int64_t>& values, bool exact) {
  if (NumElements(shape) > kMaxConstantElements) {
    throw GraphError(fmt::format("a constant of shape {} is too large", ToString(shape)));
  }
  Attributes attrs;
  attrs.Set("shape", shape);
  attrs.Set("dtype", std::string("int64"));
  std::string bytes(values.size() * sizeof(int64_t), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());  // little-endian
  attrs.Set("values", std::move(bytes));
  return Emit1(base, op_types::kConstant, {}, std::move(attrs), base, exact);
}

TensorId Loader::ZerosOp(const std::string& base, const Shape& shape) {
  const int64_t elements = NumElements(shape);
  if (elements > kMaxConstantElements) {  // checked before allocating
    throw GraphError(fmt::format("a constant of shape {} is too large", ToString(shape)));
  }
  return ConstantOp(base, shape, std::vector<float>(static_cast<size_t>(elements)));
}

TensorId Loader::Materialize(const Value& value, const std::string& value_name, Role role) {
  if (value.tensor) return *value.tensor;
  const Known& k = *value.known;
  auto cached = materialized_.find(&k);
  if (cached != materialized_.end()) return cached->second;
  TensorId id;
  if (k.trainable && role != Role::kConstant) {
    Initializer init;
    if (k.has_data) {
      init.kind = Initializer::Kind::kValues;
      init.values = SharedValues(std::vector<float>(k.f.begin(), k.f.end()));
    } else if (role == Role::kScale) {
      init.kind = Initializer::Kind::kOnes;
    } else if (k.shape.size() <= 1) {
      init.kind = Initializer::Kind::kZeros;
    } else {
      init.kind = Initializer::Kind::kNormal;
      init.stddev = options_.init_stddev;
    }
    id = graph_.AddTensor({.name = graph_.FindTensor(k.name) ? UniqueTensorName(k.name) : k.name,
                           .shape = k.shape,
                           .dtype = DType::kFloat32,
                           .kind = TensorKind::kParameter,
                           .init = init});
  } else {
    if (!k.has_data) {
      throw GraphError(fmt::format("initializer '{}' has no data and is not a weight", value_name));
    }
    const std::string name = k.name.empty() ? value_name : k.name;
    id = k.is_float() ? ConstantOp(name, k.shape, std::vector<float>(k.f.begin(), k.f.end()), true)
                      : IntConstantOp(name, k.shape, k.i, true);
  }
  materialized_.emplace(&k, id);
  return id;
}

TensorId Loader::Tensor(size_t k, Role role) {
  const Value& v = In(k);
  return Materialize(v, InputName(k), role);
}

void Loader::DeclareInputs() {
  const pb::GraphProto& g = model_->graph();
  std::unordered_set<std::string> initializers;
  for (pb::TensorProto& t : *model_->mutable_graph()->mutable_initializer()) {
    if (t.name().empty()) throw GraphError("an initializer has no name");
    Known k = FromTensorProto(t, t.name());
    // Its bytes are in `k` now: freed (swapped out; a cleared or reassigned string keeps its
    // buffer), since an export's weights are most of the file and the load would hold them twice.
    if (t.has_raw_data()) std::string().swap(*t.mutable_raw_data());
    k.trainable = k.is_float() && k.size() > 1;
    initializers.insert(t.name());
    values_[t.name()] =
        Value{.tensor = std::nullopt, .known = std::make_shared<const Known>(std::move(k))};
  }
  for (const pb::ValueInfoProto& input : g.input()) {
    if (initializers.count(input.name()) != 0) continue;  // older exports list weights as inputs
    if (live_values_.count(input.name()) == 0) continue;
    if (auto bound = options_.bound_inputs.find(input.name());
        bound != options_.bound_inputs.end()) {
      const OnnxTensor& t = bound->second;
      Known k;
      k.name = input.name();
      k.shape = t.shape;
      if (t.dtype == DType::kFloat32) {
        k.f.assign(t.floats.begin(), t.floats.end());
      } else {
        k.type = kInt64;
        k.i = t.ints;
      }
      if ((k.is_float() ? k.f.size() : k.i.size()) != static_cast<size_t>(k.size())) {
        throw GraphError(fmt::format("the value bound to input '{}' does not fill its shape {}",
                                     input.name(), ToString(k.shape)));
      }
      values_[input.name()] =
          Value{.tensor = std::nullopt, .known = std::make_shared<const Known>(std::move(k))};
      continue;
    }
    if (!input.type().has_tensor_type()) {
      throw GraphError(fmt::format("graph input '{}' is not a tensor", input.name()));
    }
    const pb::TypeProto_Tensor& type = input.type().tensor_type();
    // Integers and bools are fed as int64 (token ids, masks); of the floating types only float32,
    // the type the IR computes in.
    if (type.elem_type() != kFloat && !IsIntType(type.elem_type())) {
      throw GraphError(
          fmt::format("graph input '{}' is {}; only float32, integer and bool inputs are supported",
                      input.name(), TypeName(type.elem_type())));
    }
    if (!type.has_shape()) {
      throw GraphError(fmt::format("graph input '{}' has no shape", input.name()));
    }
    Shape shape;
    for (int d = 0; d < type.shape().dim_size(); ++d) {
      const pb::TensorShapeProto_Dimension& dim = type.shape().dim(d);
      if (d == 0 && options_.batch_size) {
        shape.push_back(*options_.batch_size);
      } else if (dim.has_dim_value() && dim.dim_value() >= 0) {
        shape.push_back(dim.dim_value());
      } else if (d == 0) {
        throw GraphError(fmt::format(
            "graph input '{}' leaves its batch axis (axis 0) {}; give a batch size", input.name(),
            dim.has_dim_param() ? "symbolic ('" + dim.dim_param() + "')" : "open"));
      } else {
        throw GraphError(
            fmt::format("graph input '{}' has a symbolic or empty extent on axis {}; "
                        "only the batch axis (0) may vary",
                        input.name(), d));
      }
    }
    TensorId id = graph_.AddTensor({.name = input.name(),
                                    .shape = shape,
                                    .dtype = IrType(type.elem_type()),
                                    .kind = TensorKind::kInput});
    values_[input.name()] = Value{.tensor = id, .known = nullptr};
  }
}

std::vector<bool> Loader::LiveNodes() {
  const pb::GraphProto& g = model_->graph();
  std::unordered_set<std::string> needed;
  // With a loss, only the first output is trained: the others would leave weights without
  // gradients.
  const int outputs = options_.loss ? std::min(1, g.output_size()) : g.output_size();
  for (int k = 0; k < outputs; ++k) needed.insert(g.output(k).name());
  std::vector<bool> live(static_cast<size_t>(g.node_size()), false);
  for (int n = g.node_size() - 1; n >= 0; --n) {
    const pb::NodeProto& node = g.node(n);
    bool any = false;
    for (const std::string& out : node.output()) any = any || needed.count(out) != 0;
    if (!any) continue;
    live[static_cast<size_t>(n)] = true;
    for (const std::string& in : node.input()) {
      if (!in.empty()) needed.insert(in);
    }
    AddSubgraphNames(node, needed);
  }
  // What a node's output feeds decides whether it is computed (a BatchNormalization's running
  // statistics, an LSTM's final state): only the needed ones are live.
  live_values_ = std::move(needed);
  return live;
}

void Loader::CheckSupported(const std::vector<bool>& live) const {
  const pb::GraphProto& g = model_->graph();
  std::map<std::string, int> first;  // unsupported op type -> first node
  for (int n = 0; n < g.node_size(); ++n) {
    const pb::NodeProto& node = g.node(n);
    if (!live[static_cast<size_t>(n)]) continue;
    const bool standard = node.domain().empty() || node.domain() == "ai.onnx";
    const std::string type = standard ? node.op_type() : node.domain() + "::" + node.op_type();
    if (standard && Ops().count(node.op_type()) != 0) continue;
    first.emplace(type, n);
  }
  if (first.empty()) return;
  std::vector<std::string> parts;
  for (const auto& [type, n] : first) {
    const pb::NodeProto& node = g.node(n);
    parts.push_back(node.name().empty()
                        ? fmt::format("{} (first: node {})", type, n)
                        : fmt::format("{} (first: node {} '{}')", type, n, node.name()));
  }
  throw GraphError(fmt::format("{}: unsupported ONNX op types: {}", file_, fmt::join(parts, ", ")));
}

Graph Loader::Load() {
  const pb::GraphProto& g = model_->graph();
  for (const pb::OperatorSetIdProto& set : model_->opset_import()) {
    if (set.domain().empty() || set.domain() == "ai.onnx") opset_ = set.version();
  }
  if (g.output_size() == 0) throw GraphError(fmt::format("{}: the graph has no outputs", file_));
  if (options_.training_step && !options_.loss) {
    throw GraphError("a training step needs a loss");
  }
  for (const pb::TensorProto& t : g.initializer()) reserved_.insert(t.name());
  for (const pb::ValueInfoProto& v : g.input()) reserved_.insert(v.name());
  for (const pb::NodeProto& node : g.node()) {
    for (const std::string& out : node.output()) reserved_.insert(out);
    AddSubgraphNames(node, reserved_);
  }
  const std::vector<bool> live = LiveNodes();
  CheckSupported(live);
  try {
    DeclareInputs();
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("{}: {}", file_, error.what()));
  }
  for (int n = 0; n < g.node_size(); ++n) {
    if (!live[static_cast<size_t>(n)]) continue;
    node_ = &g.node(n);
    node_index_ = n;
    node_base_ = node_->name().empty() ? fmt::format("{}_{}", node_->op_type(), n) : node_->name();
    current_outputs_ = {node_->output().begin(), node_->output().end()};
    try {
      ConvertNode();
    } catch (const GraphError& error) {
      throw NodeError(fmt::format("{}: {}: {}", file_, Describe(), error.what()), Describe(),
                      error.what());
    } catch (const std::logic_error& error) {  // an index a malformed node got wrong
      const std::string detail = fmt::format("malformed node ({})", error.what());
      throw NodeError(fmt::format("{}: {}: {}", file_, Describe(), detail), Describe(), detail);
    }
  }
  node_ = nullptr;
  current_outputs_.clear();
  try {
    AttachOutputsAndLoss();
    if (options_.training_step) AppendBackwardAndUpdate(graph_, options_.learning_rate);
    graph_.Validate();
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("{}: {}", file_, error.what()));
  }
  return std::move(graph_);
}

void Loader::ConvertNode() {
  const std::string& type = node_->op_type();
  std::vector<KnownPtr> known;
  bool all_known = true, any_trainable = false;
  for (size_t k = 0; k < NumInputs(); ++k) {
    if (!HasInput(k)) {
      known.push_back(nullptr);
      continue;
    }
    const Value& v = In(k);
    all_known = all_known && v.known != nullptr && !v.tensor;
    if (v.known) {
      any_trainable = any_trainable || v.known->trainable;
      known.push_back(v.known);
    } else {
      known.push_back(nullptr);
    }
  }
  // Identity of a weight (exporters de-duplicate equal initializers this way) is the same weight:
  // both names lead to one parameter, so tied weights stay tied.
  if (type == "Identity" && HasInput(0) && In(0).known && !In(0).tensor) {
    values_[OutputName(0)] = In(0);
    return;
  }
  const OpEntry& entry = Ops().at(type);
  if (all_known && !any_trainable && entry.fold) {
    for (const KnownPtr& k : known) {
      if (k && !k->has_data) {
        throw GraphError(fmt::format("initializer '{}' has no data", k->name));
      }
    }
    std::vector<Known> out = entry.fold(*this, known);
    for (size_t k = 0; k < out.size() && k < NumOutputs(); ++k) {
      if (!OutputName(k).empty()) DefineKnown(k, std::move(out[k]));
    }
    return;
  }
  if (!entry.convert) {
    Unsupported(
        fmt::format("{} on runtime tensors (only on values computable at load time)", type));
  }
  entry.convert(*this);
}

void Loader::AttachOutputsAndLoss() {
  const pb::GraphProto& g = model_->graph();
  const int outputs = options_.loss ? 1 : g.output_size();
  std::vector<TensorId> ids;
  for (int k = 0; k < outputs; ++k) {
    const std::string& name = g.output(k).name();
    auto it = values_.find(name);
    if (it == values_.end()) {
      throw GraphError(fmt::format("graph output '{}' is produced by no node", name));
    }
    TensorId id = Materialize(it->second, name, Role::kConstant);
    // Every output is an IR tensor of its own name (callers look outputs up by it).
    if (graph_.tensor(id).name != name) {
      id = Emit1(name, op_types::kIdentity, {id}, {}, name, true);
    }
    ids.push_back(id);
  }
  if (!options_.loss) return;
  TensorId logits = ids[0];
  const Shape shape = graph_.tensor(logits).shape;
  if (shape.size() < 2) {
    throw GraphError(fmt::format("output '{}' has shape {}; a loss needs [batch, classes]",
                                 graph_.tensor(logits).name, ToString(shape)));
  }
  const int64_t batch = shape[0];
  // The loss averages over the rows of the minibatch: an output whose axis 0 is something else
  // (a batch baked into the export, a sequence-first layout) would train on the wrong rows.
  for (const pb::ValueInfoProto& input : g.input()) {
    const std::optional<TensorId> id = graph_.FindTensor(input.name());
    if (!id || graph_.tensor(*id).kind != TensorKind::kInput) continue;
    const Shape& in = graph_.tensor(*id).shape;
    if (!in.empty() && in[0] != batch) {
      throw GraphError(fmt::format("output '{}' has {} rows where input '{}' has a batch of {}",
                                   graph_.tensor(logits).name, batch, input.name(), in[0]));
    }
    break;
  }
  if (shape.size() > 2) {
    Attributes attrs;
    attrs.Set("shape", Shape{batch, Product(shape, 1, shape.size())});
    logits = Emit1(UniqueOpName("loss/flatten"), op_types::kReshape, {logits}, std::move(attrs),
                   "loss/flatten");
  }
  TensorId labels = graph_.AddTensor({.name = UniqueTensorName("labels"),
                                      .shape = {batch},
                                      .dtype = DType::kInt64,
                                      .kind = TensorKind::kLabel});
  Attributes attrs;
  attrs.Set("normalizer", options_.loss_normalizer > 0 ? options_.loss_normalizer : batch);
  Emit1(UniqueOpName("loss"), op_types::kSoftmaxCrossEntropy, {logits, labels}, std::move(attrs),
        "loss");
}

}  // namespace placer::graph::onnx
