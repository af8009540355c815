// The graph IR: ops and tensors of a network's training step. Torch-free, so everything that only
// reasons about graphs (config, grouping, simulator, algorithmic baselines) compiles and tests
// fast.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "graph/name_index.h"

namespace placer::graph {

using Shape = std::vector<int64_t>;
using TensorId = int32_t;
using OpId = int32_t;
inline constexpr OpId kNoOp = -1;

enum class DType : uint8_t { kFloat32, kInt64 };
int64_t ElementSize(DType dtype);
const char* ToString(DType dtype);

// No tensor may have more elements (2^40, 4 TiB of float32): larger ones are configuration errors
// to refuse before allocating, not workloads.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 40;

// Number of elements; throws GraphError when the product overflows int64.
int64_t NumElements(const Shape& shape);
std::string ToString(const Shape& shape);

// Raised for malformed graphs; the message names the offending op or tensor.
class GraphError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

enum class TensorKind : uint8_t {
  kInput,       // minibatch data, fed from host memory each step
  kLabel,       // minibatch labels
  kParameter,   // trainable weight, lives on the device of the op that owns it
  kActivation,  // produced by a forward op
  kGradient,    // produced by a backward op
};
const char* ToString(TensorKind kind);

// How a parameter starts: zeros (biases), ones (normalisation scales), N(0, stddev^2) (weights),
// or given values (weights loaded from a model file).
struct Initializer {
  enum class Kind : uint8_t { kZeros, kOnes, kNormal, kValues } kind = Kind::kZeros;
  double stddev = 0.0;
  std::shared_ptr<const std::vector<float>> values;  // kValues: one per element, row-major
};

struct Tensor {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  TensorKind kind = TensorKind::kActivation;
  OpId producer = kNoOp;
  std::vector<OpId> consumers;  // distinct, in the order they were added
  Initializer init;             // parameters only

  int64_t bytes() const { return NumElements(shape) * ElementSize(dtype); }
};

enum class Phase : uint8_t { kForward, kBackward, kUpdate };
const char* ToString(Phase phase);

using AttrValue =
    std::variant<int64_t, double, std::vector<int64_t>, std::vector<double>, std::string>;

// An op's attributes. Copies share one map until one of them is changed: the copies of an op in
// every replica and micro-batch of a step keep its attributes once, not once per copy.
class Attributes {
 public:
  void Set(const std::string& name, AttrValue value);
  bool Has(const std::string& name) const { return values().count(name) != 0; }
  // Typed getters throw GraphError naming the attribute when it is missing or of another type.
  int64_t GetInt(const std::string& name) const;
  double GetFloat(const std::string& name) const;
  const std::vector<int64_t>& GetInts(const std::string& name) const;
  const std::vector<double>& GetFloats(const std::string& name) const;
  const std::string& GetString(const std::string& name) const;
  const std::map<std::string, AttrValue>& values() const;

 private:
  std::shared_ptr<std::map<std::string, AttrValue>> values_;  // null: none
};

struct Op {
  std::string name;
  std::string type;  // a registered op type, see ops.h
  Phase phase = Phase::kForward;
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  Attributes attrs;
  // Backward and update ops belong with a forward op: they run on its device.
  OpId forward_op = kNoOp;
};

class Graph {
 public:
  // Adds a tensor; names are unique. Returns its id.
  TensorId AddTensor(Tensor tensor);
  // Adds an op over existing tensors, recording producer and consumers. An output that already has
  // a producer, or an unknown tensor id, is rejected with the op's name.
  OpId AddOp(Op op);

  const Tensor& tensor(TensorId id) const { return tensors_.at(static_cast<size_t>(id)); }
  const Op& op(OpId id) const { return ops_.at(static_cast<size_t>(id)); }
  Op& mutable_op(OpId id) { return ops_.at(static_cast<size_t>(id)); }
  int32_t num_tensors() const { return static_cast<int32_t>(tensors_.size()); }
  int32_t num_ops() const { return static_cast<int32_t>(ops_.size()); }
  const std::vector<Tensor>& tensors() const { return tensors_; }
  const std::vector<Op>& ops() const { return ops_; }

  std::optional<TensorId> FindTensor(const std::string& name) const;
  std::optional<OpId> FindOp(const std::string& name) const;
  TensorId TensorByName(const std::string& name) const;  // throws GraphError when absent

  // Ops in an order where every producer precedes its consumers (stable: ties keep insertion
  // order). Throws GraphError naming an op on a cycle.
  std::vector<OpId> TopologicalOrder() const;

  // Checks the whole graph: dangling inputs (an activation or gradient nobody produces), cycles,
  // op types, attributes and shapes against each op type's shape rule. Throws GraphError naming
  // the node.
  void Validate() const;

  std::vector<TensorId> Parameters() const;
  int64_t ParameterCount() const;  // elements over all parameters
  std::vector<OpId> OpsInPhase(Phase phase) const;

 private:
  std::vector<Tensor> tensors_;
  std::vector<Op> ops_;
  NameIndex tensor_by_name_;
  NameIndex op_by_name_;
};

}  // namespace placer::graph
