#include "graph/onnx_loader.h"

#include <fmt/format.h>

#include <exception>
#include <unordered_set>

#include "graph/onnx/loader.h"
#include "placer_onnx.pb.h"

namespace placer::graph {

namespace pb = ::placer::onnxpb;

Graph LoadOnnx(const std::filesystem::path& file, const OnnxOptions& options) {
  if (options.batch_size && *options.batch_size < 1) {
    throw GraphError(fmt::format("batch size must be at least 1, is {}", *options.batch_size));
  }
  std::exception_ptr failure;
  std::string node, detail;
  try {
    return onnx::Loader(file, options).Load();
  } catch (const onnx::NodeError& error) {
    failure = std::current_exception();
    node = error.node();
    detail = error.detail();
  } catch (const GraphError& error) {
    failure = std::current_exception();
    detail = error.what();
  }
  // A batch other than the one the export fixed: a BatchError when the file loads at its own.
  const OnnxBatch batch = ReadOnnxBatch(file);
  if (!options.batch_size || !batch.fixed || *batch.fixed == *options.batch_size) {
    std::rethrow_exception(failure);
  }
  OnnxOptions own = options;
  own.batch_size = *batch.fixed;
  own.training_step = false;
  try {
    onnx::Loader(file, own).Load();
  } catch (const GraphError&) {
    std::rethrow_exception(failure);  // not a matter of the batch
  }
  const std::string where = node.empty() ? "the graph's outputs" : node;
  throw BatchError(
      fmt::format("{}: the export fixed the batch at {} (input '{}' has a static axis 0) and {} "
                  "cannot take a batch of {}: {}. Export the model with a dynamic batch axis, "
                  "e.g. torch.onnx.export(..., dynamic_axes={{\"{}\": {{0: \"batch\"}}}})",
                  file.string(), *batch.fixed, batch.input, where, *options.batch_size, detail,
                  batch.input),
      *batch.fixed, *options.batch_size, where);
}

namespace {

OnnxTensor Convert(const pb::TensorProto& proto, const std::filesystem::path& file) {
  onnx::Known k;
  try {
    k = onnx::FromTensorProto(proto, proto.name());
  } catch (const GraphError& error) {
    throw GraphError(fmt::format("{}: {}", file.string(), error.what()));
  }
  if (!k.has_data) throw GraphError(fmt::format("{}: the tensor has no data", file.string()));
  OnnxTensor t;
  t.name = proto.name();
  t.shape = k.shape;
  if (k.is_float()) {
    t.dtype = DType::kFloat32;
    t.floats.assign(k.f.begin(), k.f.end());
  } else {
    t.dtype = DType::kInt64;
    t.ints = k.i;
  }
  return t;
}

}  // namespace

OnnxTensor ReadOnnxTensor(const std::filesystem::path& file) {
  const std::string bytes = onnx::ReadFile(file);
  pb::TensorProto proto;
  if (!proto.ParseFromString(bytes)) {
    throw GraphError(fmt::format("{}: not a serialised ONNX TensorProto", file.string()));
  }
  return Convert(proto, file);
}

std::vector<OnnxTensor> ReadOnnxInitializers(const std::filesystem::path& file) {
  const pb::ModelProto model = onnx::ParseModel(file);
  std::vector<OnnxTensor> tensors;
  for (const pb::TensorProto& t : model.graph().initializer()) tensors.push_back(Convert(t, file));
  return tensors;
}

OnnxSignature ReadOnnxSignature(const std::filesystem::path& file) {
  const pb::ModelProto model = onnx::ParseModel(file);
  std::unordered_set<std::string> initializers;
  for (const pb::TensorProto& t : model.graph().initializer()) initializers.insert(t.name());
  OnnxSignature signature;
  for (const pb::ValueInfoProto& v : model.graph().input()) {
    if (initializers.count(v.name()) == 0) signature.inputs.push_back(v.name());
  }
  for (const pb::ValueInfoProto& v : model.graph().output()) signature.outputs.push_back(v.name());
  return signature;
}

OnnxBatch ReadOnnxBatch(const std::filesystem::path& file) {
  const pb::ModelProto model = onnx::ParseModel(file);
  std::unordered_set<std::string> initializers;
  for (const pb::TensorProto& t : model.graph().initializer()) initializers.insert(t.name());
  for (const pb::ValueInfoProto& v : model.graph().input()) {
    if (initializers.count(v.name()) != 0) continue;
    OnnxBatch batch{.fixed = std::nullopt, .input = v.name()};
    if (v.type().has_tensor_type() && v.type().tensor_type().has_shape() &&
        v.type().tensor_type().shape().dim_size() > 0) {
      const pb::TensorShapeProto_Dimension& dim = v.type().tensor_type().shape().dim(0);
      if (dim.has_dim_value() && dim.dim_value() > 0) batch.fixed = dim.dim_value();
    }
    return batch;
  }
  return {};
}

std::optional<std::string> OnnxBatchProblem(const std::filesystem::path& file, int64_t batch) {
  try {
    LoadOnnx(file, {.batch_size = batch, .training_step = false});
  } catch (const GraphError& error) {
    return std::string(error.what());
  }
  return std::nullopt;
}

}  // namespace placer::graph
