// The current node's attributes, read by name with the node named in every error.
#include <fmt/format.h>

#include "graph/onnx/loader.h"
#include "placer_onnx.pb.h"

namespace placer::graph::onnx {

namespace pb = ::placer::onnxpb;

const pb::AttributeProto* Loader::Attr(const std::string& name) const {
  for (const pb::AttributeProto& a : node_->attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t Loader::AttrInt(const std::string& name, int64_t fallback) const {
  const pb::AttributeProto* a = Attr(name);
  return a ? a->i() : fallback;
}

double Loader::AttrFloat(const std::string& name, double fallback) const {
  const pb::AttributeProto* a = Attr(name);
  return a ? static_cast<double>(a->f()) : fallback;
}

std::string Loader::AttrString(const std::string& name, const std::string& fallback) const {
  const pb::AttributeProto* a = Attr(name);
  return a ? a->s() : fallback;
}

std::optional<std::vector<int64_t>> Loader::AttrInts(const std::string& name) const {
  const pb::AttributeProto* a = Attr(name);
  if (!a) return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::optional<std::vector<double>> Loader::AttrFloats(const std::string& name) const {
  const pb::AttributeProto* a = Attr(name);
  if (!a) return std::nullopt;
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

std::optional<std::vector<std::string>> Loader::AttrStrings(const std::string& name) const {
  const pb::AttributeProto* a = Attr(name);
  if (!a) return std::nullopt;
  return std::vector<std::string>(a->strings().begin(), a->strings().end());
}

std::optional<Known> Loader::AttrTensor(const std::string& name) const {
  const pb::AttributeProto* a = Attr(name);
  if (!a) return std::nullopt;
  return FromTensorProto(a->t(), name);
}

[[noreturn]] void Loader::Unsupported(const std::string& what) const {
  throw GraphError(fmt::format("not supported: {}", what));
}

}  // namespace placer::graph::onnx
