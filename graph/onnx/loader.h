// Internal to the ONNX loader: the Loader, which walks a model's nodes and turns each into IR ops
// or a value known at load time, and the op table it dispatches on. Every ONNX op type is one
// table entry: how to fold it when all its inputs are known at load time, and how to convert it
// into IR ops (whose shape rules, graph/ops.h, infer the shapes) otherwise. The entries live by
// op family in ops_*.cc; the public interface is graph/onnx_loader.h.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/ir.h"
#include "graph/onnx/known.h"
#include "graph/onnx_loader.h"

namespace placer::onnxpb {
class ModelProto;
class NodeProto;
class GraphProto;
class AttributeProto;
class TensorProto;
}  // namespace placer::onnxpb

namespace placer::graph::onnx {

// Roles a known value plays for the op that consumes it: decides whether a stripped initializer
// starts as ones (normalisation scales), and whether an initializer may become a parameter.
enum class Role { kWeight, kScale, kConstant };

class Loader;

// One ONNX op type. `fold` evaluates the node when every input is known at load time (and none is
// a weight); `convert` emits IR ops for it otherwise. Either may be missing: an op without
// `convert` takes only load-time values, one without `fold` always runs as IR ops.
using Fold = std::function<std::vector<Known>(Loader&, const std::vector<KnownPtr>&)>;
struct OpEntry {
  Fold fold;
  std::function<void(Loader&)> convert;
};
using OpTable = std::unordered_map<std::string, OpEntry>;

// One per family file.
void AddElementwiseOps(OpTable& table);
void AddTensorOps(OpTable& table);
void AddLayoutOps(OpTable& table);
void AddConstantOps(OpTable& table);
void AddReduceOps(OpTable& table);
void AddNnOps(OpTable& table);
void AddRecurrentOps(OpTable& table);
void AddLossOps(OpTable& table);
void AddIndexOps(OpTable& table);
void AddControlOps(OpTable& table);
const OpTable& Ops();

// The file's bytes, and the model they hold; errors name the file.
std::string ReadFile(const std::filesystem::path& file);
onnxpb::ModelProto ParseModel(const std::filesystem::path& file);

// A TensorProto as a known value. Data may be missing (a stripped weight): has_data is then false.
Known FromTensorProto(const onnxpb::TensorProto& t, const std::string& name);

// Thrown by Load() when converting a node fails: the message names the file and the node, and
// `node` and `detail` keep the two apart (a batch change that the file cannot take reports both).
class NodeError : public GraphError {
 public:
  NodeError(const std::string& message, std::string node, std::string detail)
      : GraphError(message), node_(std::move(node)), detail_(std::move(detail)) {}
  const std::string& node() const { return node_; }
  const std::string& detail() const { return detail_; }

 private:
  std::string node_, detail_;
};

class Loader {
 public:
  struct Value {
    std::optional<TensorId> tensor;  // a runtime tensor of the IR graph
    KnownPtr known;                  // a value known at load time
  };

  Loader(const std::filesystem::path& file, const OnnxOptions& options);
  ~Loader();
  Graph Load();

  // ---- the node being converted ----
  const std::string& type() const;
  int64_t opset() const { return opset_; }
  const OnnxOptions& options() const { return options_; }
  std::string Describe() const;
  std::string NodeBase() const { return node_base_; }

  size_t NumInputs() const;
  bool HasInput(size_t k) const;
  const std::string& InputName(size_t k) const;
  const Value& In(size_t k) const;
  Shape InShape(size_t k) const;
  DType InDType(size_t k) const;
  // Input k is known at load time (not a runtime tensor).
  bool IsKnown(size_t k) const { return In(k).known != nullptr && !In(k).tensor; }
  // Input k as a runtime tensor: known values become a parameter or a Constant op.
  TensorId Tensor(size_t k, Role role = Role::kWeight);
  // Input k as load-time integers (a shape, axes, indices); `what` names it in errors.
  std::vector<int64_t> KnownInts(size_t k, const char* what) const;
  // The same for load-time floats (scales, bounds).
  std::vector<double> KnownFloats(size_t k, const char* what) const;
  // Input k's load-time values; an error naming it and `what` when it has none.
  const Known& KnownData(size_t k, const char* what) const;
  size_t NumOutputs() const;
  bool OutputLive(size_t k) const;
  const std::string& OutputName(size_t k) const;

  bool HasAttr(const std::string& name) const { return Attr(name) != nullptr; }
  int64_t AttrInt(const std::string& name, int64_t fallback) const;
  double AttrFloat(const std::string& name, double fallback) const;
  std::string AttrString(const std::string& name, const std::string& fallback) const;
  std::optional<std::vector<int64_t>> AttrInts(const std::string& name) const;
  std::optional<std::vector<double>> AttrFloats(const std::string& name) const;
  std::optional<std::vector<std::string>> AttrStrings(const std::string& name) const;
  // A tensor attribute (Constant's value) as a known value.
  std::optional<Known> AttrTensor(const std::string& name) const;
  [[noreturn]] void Unsupported(const std::string& what) const;
  // Converts the nodes of the current node's graph attribute `attr` (an If's branch) in place of
  // the node, and defines the node's outputs as the branch's outputs (loader_subgraph.cc).
  void InlineBranch(const std::string& attr);

  // ---- emitting IR ops ----
  TensorId Materialize(const Value& value, const std::string& value_name, Role role);
  // A Constant op of float32 (or, with `ints`, int64) values.
  TensorId ConstantOp(const std::string& base, const Shape& shape, const std::vector<float>& values,
                      bool exact = false);
  TensorId IntConstantOp(const std::string& base, const Shape& shape,
                         const std::vector<int64_t>& values, bool exact = false);
  TensorId ZerosOp(const std::string& base, const Shape& shape);
  // Adds an IR op for the current node. The op is named `op_name` (made unique); its outputs are
  // named `outputs`: the current node's output names (or all, when `exact`) as they are, other
  // names made unique against the graph and the file's value names.
  std::vector<TensorId> Emit(const std::string& op_name, const std::string& type,
                             std::vector<TensorId> inputs, Attributes attrs,
                             const std::vector<std::string>& outputs, bool exact = false);
  TensorId Emit1(const std::string& op_name, const std::string& type, std::vector<TensorId> inputs,
                 Attributes attrs, const std::string& output, bool exact = false);
  // The node's single output as one IR op named after the node.
  void EmitOutput(const std::string& type, std::vector<TensorId> inputs, Attributes attrs = {});
  // Helpers emitting one IR op named after the current node plus `suffix`.
  TensorId Sub(const std::string& suffix, const std::string& type, std::vector<TensorId> inputs,
               Attributes attrs = {});
  TensorId ReshapeTo(const std::string& suffix, TensorId x, const Shape& shape,
                     const std::string& output = "");
  TensorId SliceAxis(const std::string& suffix, TensorId x, int64_t axis, int64_t start,
                     int64_t end, int64_t step = 1);
  std::string UniqueOpName(const std::string& base);
  std::string UniqueTensorName(const std::string& base);
  void Define(size_t output, TensorId tensor);
  void DefineKnown(size_t output, Known known);
  const Graph& graph() const { return graph_; }
  Graph& mutable_graph() { return graph_; }

 private:
  void DeclareInputs();
  // Which nodes a needed graph output depends on; fills live_values_ with the values needed.
  std::vector<bool> LiveNodes();
  void CheckSupported(const std::vector<bool>& live) const;
  void ConvertNode();
  void AttachOutputsAndLoss();
  const onnxpb::AttributeProto* Attr(const std::string& name) const;

  std::string file_;
  OnnxOptions options_;
  std::unique_ptr<onnxpb::ModelProto> model_;
  int64_t opset_ = 1;
  Graph graph_;
  std::unordered_map<std::string, Value> values_;
  std::map<const Known*, TensorId> materialized_;
  std::unordered_set<std::string> reserved_;         // every ONNX value name of the file
  std::unordered_set<std::string> live_values_;      // read by a live node or a needed graph output
  std::unordered_set<std::string> current_outputs_;  // of the node being converted
  const onnxpb::NodeProto* node_ = nullptr;
  int node_index_ = -1;
  std::string node_base_;
};

// Every value name a node's graph attributes (If's branches, a Loop's body, nested) read or
// write: a node with subgraphs needs the outer values they read, and their names are taken.
void AddSubgraphNames(const onnxpb::NodeProto& node, std::unordered_set<std::string>& names);

// Floats for a Constant op's values.
std::vector<float> Floats(size_t count, double value);

// For the fold functions: one folded output, and input k of a fold (an error when it is missing).
inline std::vector<Known> One(Known k) { return std::vector<Known>{std::move(k)}; }
const Known& Arg(const std::vector<KnownPtr>& in, size_t k);

}  // namespace placer::graph::onnx
