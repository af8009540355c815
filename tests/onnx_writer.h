// Writes small ONNX models in protobuf's wire format, for tests that need a model file with a
// particular defect (an unknown op, a missing input). Hand-encoded, so that test files never
// include generated protobuf headers next to LibTorch's (shared/docs/REFERENCES.md 4.4); the field
// numbers are those of onnx.proto.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace placer::test_support::onnx {

inline std::string Varint(uint64_t value) {
  std::string out;
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
  return out;
}

// A length-delimited field (strings, bytes, messages, packed repeated numbers).
inline std::string Bytes(int field, const std::string& bytes) {
  return Varint(static_cast<uint64_t>(field) << 3 | 2) + Varint(bytes.size()) + bytes;
}

inline std::string Int(int field, int64_t value) {
  return Varint(static_cast<uint64_t>(field) << 3) + Varint(static_cast<uint64_t>(value));
}

inline std::string Float(int field, float value) {
  std::string out = Varint(static_cast<uint64_t>(field) << 3 | 5);
  char bytes[4];
  std::memcpy(bytes, &value, 4);
  // Appended, not `out + std::string(...)`: GCC 12 warns falsely (-Wrestrict) on that inlined.
  out.append(bytes, 4);
  return out;
}

// AttributeProto.
inline std::string AttrInt(const std::string& name, int64_t value) {
  return Bytes(1, name) + Int(3, value) + Int(20, 2);
}
inline std::string AttrInts(const std::string& name, const std::vector<int64_t>& values) {
  std::string out = Bytes(1, name);
  for (int64_t v : values) out += Int(8, v);
  return out + Int(20, 7);
}

inline std::string AttrFloats(const std::string& name, const std::vector<float>& values) {
  std::string out = Bytes(1, name);
  for (float v : values) out += Float(7, v);
  return out + Int(20, 6);
}

// A graph attribute (an If's branch): `graph` is an encoded GraphProto (EncodeGraph).
inline std::string AttrGraph(const std::string& name, const std::string& graph) {
  return Bytes(1, name) + Bytes(6, graph) + Int(20, 5);
}

struct Node {
  std::string op_type;
  std::string name;
  std::vector<std::string> inputs;
  std::vector<std::string> outputs;
  std::vector<std::string> attributes;  // encoded AttributeProtos
};

inline std::string EncodeNode(const Node& node) {
  std::string out;
  for (const std::string& in : node.inputs) out += Bytes(1, in);
  for (const std::string& o : node.outputs) out += Bytes(2, o);
  out += Bytes(3, node.name) + Bytes(4, node.op_type);
  for (const std::string& a : node.attributes) out += Bytes(5, a);
  return out;
}

// ValueInfoProto of a float32 tensor.
inline std::string FloatValue(const std::string& name, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += Bytes(1, Int(1, d));
  const std::string tensor_type = Int(1, 1) + Bytes(2, dims);
  return Bytes(1, name) + Bytes(2, Bytes(1, tensor_type));
}

// ValueInfoProto of an int64 tensor.
inline std::string IntValue(const std::string& name, const std::vector<int64_t>& shape) {
  std::string dims;
  for (int64_t d : shape) dims += Bytes(1, Int(1, d));
  const std::string tensor_type = Int(1, 7) + Bytes(2, dims);
  return Bytes(1, name) + Bytes(2, Bytes(1, tensor_type));
}

// ValueInfoProto of a float32 tensor whose axes of extent -1 are symbolic (named `symbol`), as an
// export with dynamic_axes writes them.
inline std::string SymbolicFloatValue(const std::string& name, const std::vector<int64_t>& shape,
                                      const std::string& symbol = "batch") {
  std::string dims;
  for (int64_t d : shape) dims += Bytes(1, d < 0 ? Bytes(2, symbol) : Int(1, d));
  const std::string tensor_type = Int(1, 1) + Bytes(2, dims);
  return Bytes(1, name) + Bytes(2, Bytes(1, tensor_type));
}

// TensorProto of int64 values.
inline std::string IntTensor(const std::string& name, const std::vector<int64_t>& shape,
                             const std::vector<int64_t>& values) {
  std::string out;
  for (int64_t d : shape) out += Int(1, d);
  out += Int(2, 7) + Bytes(8, name);
  for (int64_t v : values) out += Int(7, v);
  return out;
}

// TensorProto of float32 values.
inline std::string FloatTensor(const std::string& name, const std::vector<int64_t>& shape,
                               const std::vector<float>& values) {
  std::string out;
  for (int64_t d : shape) out += Int(1, d);
  out += Int(2, 1) + Bytes(8, name);
  std::string raw(values.size() * 4, '\0');
  if (!values.empty()) std::memcpy(raw.data(), values.data(), raw.size());
  return out + Bytes(9, raw);
}

struct Model {
  std::vector<Node> nodes;
  std::vector<std::string> inputs;        // encoded ValueInfoProtos
  std::vector<std::string> outputs;       // encoded ValueInfoProtos
  std::vector<std::string> initializers;  // encoded TensorProtos
  int64_t opset = 17;
};

// The GraphProto of `model` (its opset aside): a model's graph, or a subgraph's.
inline std::string EncodeGraph(const Model& model) {
  std::string graph;
  for (const Node& node : model.nodes) graph += Bytes(1, EncodeNode(node));
  graph += Bytes(2, "test");
  for (const std::string& t : model.initializers) graph += Bytes(5, t);
  for (const std::string& v : model.inputs) graph += Bytes(11, v);
  for (const std::string& v : model.outputs) graph += Bytes(12, v);
  return graph;
}

inline std::string Encode(const Model& model) {
  return Int(1, 8) + Bytes(8, Bytes(1, "") + Int(2, model.opset)) + Bytes(7, EncodeGraph(model));
}

// A two-layer classifier (Gemm, Relu, Gemm) over x [batch, 4] into 3 classes: a valid model that
// tests take apart.
inline Model SmallClassifier(int64_t batch = 2) {
  Model m;
  m.inputs = {FloatValue("x", {batch, 4})};
  m.outputs = {FloatValue("logits", {batch, 3})};
  std::vector<float> w1(5 * 4), w2(3 * 5);
  for (size_t i = 0; i < w1.size(); ++i) w1[i] = 0.1f * static_cast<float>(i % 7) - 0.3f;
  for (size_t i = 0; i < w2.size(); ++i) w2[i] = 0.05f * static_cast<float>(i % 5) - 0.1f;
  m.initializers = {
      FloatTensor("fc1.weight", {5, 4}, w1), FloatTensor("fc1.bias", {5}, {0.1f, 0, 0, 0, 0}),
      FloatTensor("fc2.weight", {3, 5}, w2), FloatTensor("fc2.bias", {3}, {0, 0.2f, 0})};
  m.nodes = {{"Gemm", "fc1", {"x", "fc1.weight", "fc1.bias"}, {"h"}, {AttrInt("transB", 1)}},
             {"Relu", "relu", {"h"}, {"r"}, {}},
             {"Gemm", "fc2", {"r", "fc2.weight", "fc2.bias"}, {"logits"}, {AttrInt("transB", 1)}}};
  return m;
}

// SmallClassifier exported with its batch baked into shape constants, as torch.onnx.export
// without dynamic_axes does: the hidden layer goes through Reshape to [batch * 5] and back to
// [batch, 5] with constant targets.
inline Model BakedBatchClassifier(int64_t batch = 2) {
  Model m = SmallClassifier(batch);
  m.initializers.push_back(IntTensor("flat_shape", {1}, {batch * 5}));
  m.initializers.push_back(IntTensor("matrix_shape", {2}, {batch, 5}));
  m.nodes[1].inputs = {"h2"};
  m.nodes.insert(m.nodes.begin() + 1, {{"Reshape", "bake", {"h", "flat_shape"}, {"h1"}, {}},
                                       {"Reshape", "unbake", {"h1", "matrix_shape"}, {"h2"}, {}}});
  return m;
}

}  // namespace placer::test_support::onnx
