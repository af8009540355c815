#include "graph/ir.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <queue>

#include "graph/ops.h"

namespace placer::graph {

int64_t ElementSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kInt64:
      return 8;
  }
  return 0;
}

const char* ToString(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

const char* ToString(TensorKind kind) {
  switch (kind) {
    case TensorKind::kInput:
      return "input";
    case TensorKind::kLabel:
      return "label";
    case TensorKind::kParameter:
      return "parameter";
    case TensorKind::kActivation:
      return "activation";
    case TensorKind::kGradient:
      return "gradient";
  }
  return "?";
}

const char* ToString(Phase phase) {
  switch (phase) {
    case Phase::kForward:
      return "forward";
    case Phase::kBackward:
      return "backward";
    case Phase::kUpdate:
      return "update";
  }
  return "?";
}

int64_t NumElements(const Shape& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) throw GraphError(fmt::format("negative dimension in shape {}", ToString(shape)));
    if (__builtin_mul_overflow(count, dim, &count)) {
      throw GraphError(
          fmt::format("shape {} has more elements than fit in 64 bits", ToString(shape)));
    }
  }
  return count;
}

std::string ToString(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, "x")); }

namespace {
template <typename T>
const T& GetAttr(const std::map<std::string, AttrValue>& values, const std::string& name,
                 const char* type_name) {
  auto it = values.find(name);
  if (it == values.end()) throw GraphError(fmt::format("missing attribute '{}'", name));
  const T* value = std::get_if<T>(&it->second);
  if (value == nullptr) {
    throw GraphError(fmt::format("attribute '{}' is not of type {}", name, type_name));
  }
  return *value;
}
}  // namespace

void Attributes::Set(const std::string& name, AttrValue value) {
  // Written only while this copy is the map's one owner; another owner gets its own map first. An
  // owner count of 1 cannot rise under us: only this object could be copied, and it is being
  // changed.
  if (!values_) {
    values_ = std::make_shared<std::map<std::string, AttrValue>>();
  } else if (values_.use_count() > 1) {
    values_ = std::make_shared<std::map<std::string, AttrValue>>(*values_);
  }
  (*values_)[name] = std::move(value);
}

const std::map<std::string, AttrValue>& Attributes::values() const {
  static const std::map<std::string, AttrValue> kNone;
  return values_ ? *values_ : kNone;
}

int64_t Attributes::GetInt(const std::string& name) const {
  return GetAttr<int64_t>(values(), name, "int");
}
double Attributes::GetFloat(const std::string& name) const {
  return GetAttr<double>(values(), name, "float");
}
const std::vector<int64_t>& Attributes::GetInts(const std::string& name) const {
  return GetAttr<std::vector<int64_t>>(values(), name, "int list");
}
const std::vector<double>& Attributes::GetFloats(const std::string& name) const {
  return GetAttr<std::vector<double>>(values(), name, "float list");
}
const std::string& Attributes::GetString(const std::string& name) const {
  return GetAttr<std::string>(values(), name, "string");
}

TensorId Graph::AddTensor(Tensor tensor) {
  if (tensor.name.empty()) throw GraphError("a tensor needs a name");
  if (tensor_by_name_.Find(tensor.name, tensors_)) {
    throw GraphError(fmt::format("tensor '{}' is defined twice", tensor.name));
  }
  // Refused before anything is allocated: negative, overflowing and absurd shapes.
  if (NumElements(tensor.shape) > kMaxTensorElements) {
    throw GraphError(fmt::format(
        "tensor '{}' of shape {} has {} elements, more than the {} a "
        "tensor may have",
        tensor.name, ToString(tensor.shape), NumElements(tensor.shape), kMaxTensorElements));
  }
  auto id = static_cast<TensorId>(tensors_.size());
  tensor.producer = kNoOp;
  tensor.consumers.clear();
  tensors_.push_back(std::move(tensor));
  tensor_by_name_.Insert(id, tensors_);
  return id;
}

OpId Graph::AddOp(Op op) {
  if (op.name.empty()) throw GraphError("an op needs a name");
  if (op_by_name_.Find(op.name, ops_)) {
    throw GraphError(fmt::format("op '{}' is defined twice", op.name));
  }
  auto check_id = [&](TensorId id, const char* role) {
    if (id < 0 || id >= num_tensors()) {
      throw GraphError(fmt::format("op '{}': {} tensor id {} does not exist", op.name, role, id));
    }
  };
  for (TensorId id : op.inputs) check_id(id, "input");
  for (TensorId id : op.outputs) {
    check_id(id, "output");
    const Tensor& out = tensors_[static_cast<size_t>(id)];
    if (out.producer != kNoOp) {
      throw GraphError(fmt::format("op '{}': output '{}' is already produced by op '{}'", op.name,
                                   out.name, ops_[static_cast<size_t>(out.producer)].name));
    }
  }
  auto id = static_cast<OpId>(ops_.size());
  for (TensorId input : op.inputs) {
    // An op reading a tensor twice (x * x) is one consumer.
    auto& consumers = tensors_[static_cast<size_t>(input)].consumers;
    if (consumers.empty() || consumers.back() != id) consumers.push_back(id);
  }
  for (TensorId output : op.outputs) tensors_[static_cast<size_t>(output)].producer = id;
  ops_.push_back(std::move(op));
  op_by_name_.Insert(id, ops_);
  return id;
}

std::optional<TensorId> Graph::FindTensor(const std::string& name) const {
  return tensor_by_name_.Find(name, tensors_);
}

std::optional<OpId> Graph::FindOp(const std::string& name) const {
  return op_by_name_.Find(name, ops_);
}

TensorId Graph::TensorByName(const std::string& name) const {
  auto id = FindTensor(name);
  if (!id) throw GraphError(fmt::format("no tensor named '{}'", name));
  return *id;
}

std::vector<OpId> Graph::TopologicalOrder() const {
  // Kahn's algorithm with a min-heap on op id, so the order is stable (insertion order on ties).
  std::vector<int> pending(ops_.size(), 0);
  std::vector<TensorId> inputs;  // one buffer for every op: graphs of 10^5 ops are sorted often
  for (OpId id = 0; id < num_ops(); ++id) {
    inputs.assign(op(id).inputs.begin(), op(id).inputs.end());  // distinct, as consumers are
    std::sort(inputs.begin(), inputs.end());
    inputs.erase(std::unique(inputs.begin(), inputs.end()), inputs.end());
    for (TensorId input : inputs) {
      if (tensor(input).producer != kNoOp) ++pending[static_cast<size_t>(id)];
    }
  }
  std::priority_queue<OpId, std::vector<OpId>, std::greater<>> ready;
  for (OpId id = 0; id < num_ops(); ++id) {
    if (pending[static_cast<size_t>(id)] == 0) ready.push(id);
  }
  std::vector<OpId> order;
  order.reserve(ops_.size());
  while (!ready.empty()) {
    OpId id = ready.top();
    ready.pop();
    order.push_back(id);
    for (TensorId output : ops_[static_cast<size_t>(id)].outputs) {
      for (OpId consumer : tensors_[static_cast<size_t>(output)].consumers) {
        if (--pending[static_cast<size_t>(consumer)] == 0) ready.push(consumer);
      }
    }
  }
  if (order.size() != ops_.size()) {
    for (OpId id = 0; id < num_ops(); ++id) {
      if (pending[static_cast<size_t>(id)] > 0) {
        throw GraphError(fmt::format("the graph has a cycle through op '{}'", op(id).name));
      }
    }
  }
  return order;
}

void Graph::Validate() const {
  for (const Tensor& tensor : tensors_) {
    bool needs_producer =
        tensor.kind == TensorKind::kActivation || tensor.kind == TensorKind::kGradient;
    // An unproduced activation matters only once something reads it.
    if (needs_producer && tensor.producer == kNoOp && !tensor.consumers.empty()) {
      throw GraphError(fmt::format("op '{}': input '{}' is dangling: no op produces it",
                                   op(tensor.consumers.front()).name, tensor.name));
    }
    if (!needs_producer && tensor.producer != kNoOp) {
      throw GraphError(fmt::format("op '{}' writes {} tensor '{}', which only the host may set",
                                   op(tensor.producer).name, ToString(tensor.kind), tensor.name));
    }
  }
  std::vector<OpId> order = TopologicalOrder();  // throws on a cycle
  for (OpId id : order) {
    const Op& node = op(id);
    if (!IsKnownOpType(node.type)) {
      throw GraphError(fmt::format("op '{}' has unknown type '{}'", node.name, node.type));
    }
    if (node.phase != Phase::kForward &&
        (node.forward_op == kNoOp || op(node.forward_op).phase != Phase::kForward)) {
      throw GraphError(fmt::format("{} op '{}' does not name the forward op it belongs with",
                                   ToString(node.phase), node.name));
    }
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    try {
      shapes = InferOutputShapes(*this, node);
      dtypes = InferOutputDTypes(*this, node);
    } catch (const GraphError& error) {
      throw GraphError(fmt::format("op '{}' ({}): {}", node.name, node.type, error.what()));
    }
    if (shapes.size() != node.outputs.size()) {
      throw GraphError(fmt::format("op '{}' ({}) has {} outputs, its type makes {}", node.name,
                                   node.type, node.outputs.size(), shapes.size()));
    }
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor& out = tensor(node.outputs[i]);
      if (out.shape != shapes[i]) {
        throw GraphError(
            fmt::format("op '{}' ({}): shape mismatch on output '{}': declared {}, "
                        "inputs imply {}",
                        node.name, node.type, out.name, ToString(out.shape), ToString(shapes[i])));
      }
      // Update ops write no outputs; gradients are float32 like the values they belong to.
      if (node.phase == Phase::kForward && out.dtype != dtypes[i]) {
        throw GraphError(fmt::format("op '{}' ({}): output '{}' is declared {}, its type makes {}",
                                     node.name, node.type, out.name, ToString(out.dtype),
                                     ToString(dtypes[i])));
      }
    }
  }
}

std::vector<TensorId> Graph::Parameters() const {
  std::vector<TensorId> params;
  for (TensorId id = 0; id < num_tensors(); ++id) {
    if (tensor(id).kind == TensorKind::kParameter) params.push_back(id);
  }
  return params;
}

int64_t Graph::ParameterCount() const {
  int64_t count = 0;
  for (TensorId id : Parameters()) count += NumElements(tensor(id).shape);
  return count;
}

std::vector<OpId> Graph::OpsInPhase(Phase phase) const {
  std::vector<OpId> ids;
  for (OpId id = 0; id < num_ops(); ++id) {
    if (op(id).phase == phase) ids.push_back(id);
  }
  return ids;
}

}  // namespace placer::graph
