// Loads an ONNX model (a .onnx file, as PyTorch's exporter writes it) into the graph IR, and
// derives its training step. Torch-free, and free of generated protobuf headers: the ONNX schema is
// compiled into its own library (proto/CMakeLists.txt) that only the loader's sources (this
// file's .cc and graph/onnx/) see.
//
// What the loader does with a model:
// - Shapes are propagated with the IR's own shape rules; the file's intermediate shapes are not
//   needed. Subgraphs that compute shapes (Shape, Gather, Concat, Unsqueeze, Cast, ... on int64
//   constants) are evaluated at load time and end up as attributes (Reshape's "shape").
// - Float initializers with more than one element become trainable parameters, named after the
//   initializer, with the file's values. An initializer whose data was stripped (dims only)
//   starts as N(0, 0.01^2) (rank >= 2), zeros (rank <= 1) or ones (a normalisation scale).
//   Scalar initializers, float Constant nodes and values computed from them (a 1/sqrt(d) scale)
//   become IR "Constant" ops.
// - Graph inputs that are not initializers become minibatch inputs: float32 tensors, or integer
//   and bool ones (token ids, masks) as int64. Axis 0 of every input is the batch.
// - The batch is the file's own unless OnnxOptions::batch_size changes it. An export with a
//   dynamic batch axis (torch.onnx.export(..., dynamic_axes={"input": {0: "batch"}})) takes any
//   batch; one with a static batch axis may have baked its batch into shape constants, and then
//   another batch is a BatchError naming the node that cannot take it.
// - With a loss, SoftmaxCrossEntropy is attached to the first graph output ([B, C], or any other
//   rank flattened to [B, rest]) against int64 labels [B] named "labels".
// - A load with a loss (training) normalises BatchNormalization with the minibatch's statistics;
//   one without a loss computes what the file says (inference mode: its running statistics).
//   Dropout drops when the file says it trains (opset 12's training_mode input), seeded per node
//   and step, and passes its input through otherwise.
// - Nodes that no graph output depends on are skipped.
// The op types it knows, and how each is folded or converted, are one table entry each by op
// family in graph/onnx/ops_*.cc.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// One ONNX TensorProto (the .pb files of ONNX's backend test data), converted to plain C++.
struct OnnxTensor {
  std::string name;
  Shape shape;
  DType dtype = DType::kFloat32;
  std::vector<float> floats;  // dtype kFloat32 (also double and float16 files, converted)
  std::vector<int64_t> ints;  // dtype kInt64 (also int32, int8, uint8, bool, ... converted)
};

struct OnnxOptions {
  // Replaces axis 0 of every graph input (required when the file leaves it symbolic); unset, the
  // file's own batch. Shape subgraphs are evaluated with it, so exports with a dynamic batch axis
  // take any batch size.
  std::optional<int64_t> batch_size;
  bool loss = true;             // attach SoftmaxCrossEntropy to the first output
  bool training_step = true;    // also append backward and SGD update ops (needs `loss`)
  double learning_rate = 0.1;   // SGD step size of the training step
  int64_t loss_normalizer = 0;  // 0: the batch size (data-parallel shards pass the global batch)
  double init_stddev = 0.01;    // stddev of stripped weights
  // Training-mode Dropout nodes drop; false makes them pass their input through (to compare a
  // step with a reference computed without dropout).
  bool dropout = true;
  // Graph inputs given their values at load time: they become constants, not minibatch inputs.
  // The IR takes shapes, axes and split sizes only as load-time values; models given such
  // parameters as inputs (ONNX's backend tests do) load once they are bound.
  std::map<std::string, OnnxTensor> bound_inputs;
};

// Thrown when a model cannot take the batch it is asked for: its export fixed the batch (the
// graph inputs' axis 0 is static) and baked it into shape constants, so that node `node()` fails
// at batch `batch()` where the file loads at its own `file_batch()`. The message names the file
// and the node and says how to export with a dynamic batch axis.
class BatchError : public GraphError {
 public:
  BatchError(const std::string& message, int64_t file_batch, int64_t batch, std::string node)
      : GraphError(message), file_batch_(file_batch), batch_(batch), node_(std::move(node)) {}
  int64_t file_batch() const { return file_batch_; }
  int64_t batch() const { return batch_; }
  const std::string& node() const { return node_; }

 private:
  int64_t file_batch_, batch_;
  std::string node_;
};

// Reads `file` and returns the validated graph. A batch the export cannot take is a BatchError.
// Throws GraphError naming the file (and the node, by name and index, when one is at fault) for
// unreadable or truncated files, unsupported ops (all unsupported op types with the first node of
// each), missing inputs and shapes that do not fit.
Graph LoadOnnx(const std::filesystem::path& file, const OnnxOptions& options = {});

// Reads a serialised TensorProto. Throws GraphError naming the file when it does not parse or
// holds an element type without a float32 or int64 counterpart (strings).
OnnxTensor ReadOnnxTensor(const std::filesystem::path& file);

// The initializers of an ONNX file, converted as ReadOnnxTensor converts one tensor (a model's
// weights, or tensors saved as initializers, as the model suite's references are).
std::vector<OnnxTensor> ReadOnnxInitializers(const std::filesystem::path& file);

// Names of the graph inputs (initializers excluded) and outputs of an ONNX file, in file order.
struct OnnxSignature {
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
};
OnnxSignature ReadOnnxSignature(const std::filesystem::path& file);

// The batch axis (axis 0) of an ONNX file's graph inputs: its extent when the export fixed it,
// nullopt when it is symbolic (an export with dynamic_axes), or when the file has no inputs.
struct OnnxBatch {
  std::optional<int64_t> fixed;
  std::string input;  // the first graph input, or empty
};
OnnxBatch ReadOnnxBatch(const std::filesystem::path& file);

// Whether `file` can be built with `batch` rows, as a data-parallel shard is (forward and loss
// only): nullopt when it can, otherwise the reason (a BatchError's message when the export fixed
// its batch). Costs one load of the file.
std::optional<std::string> OnnxBatchProblem(const std::filesystem::path& file, int64_t batch);

}  // namespace placer::graph
