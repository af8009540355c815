// Subgraphs: the nodes of a graph attribute (an If's branch) converted in place of the node that
// holds it. The IR has no control flow, so a branch is taken at load time and inlined; the values
// its nodes read from the outer graph are in scope by name, as ONNX scopes them.
#include <fmt/format.h>

#include "graph/onnx/loader.h"
#include "placer_onnx.pb.h"

namespace placer::graph::onnx {

namespace pb = ::placer::onnxpb;

void AddSubgraphNames(const pb::NodeProto& node, std::unordered_set<std::string>& names) {
  auto add_graph = [&names](const pb::GraphProto& g) {
    for (const pb::TensorProto& t : g.initializer()) names.insert(t.name());
    for (const pb::ValueInfoProto& v : g.output()) names.insert(v.name());
    for (const pb::NodeProto& inner : g.node()) {
      for (const std::string& in : inner.input()) {
        if (!in.empty()) names.insert(in);
      }
      for (const std::string& out : inner.output()) {
        if (!out.empty()) names.insert(out);
      }
      AddSubgraphNames(inner, names);
    }
  };
  for (const pb::AttributeProto& a : node.attribute()) {
    if (a.has_g()) add_graph(a.g());
    for (const pb::GraphProto& g : a.graphs()) add_graph(g);
  }
}

void Loader::InlineBranch(const std::string& attr) {
  const pb::AttributeProto* a = Attr(attr);
  if (a == nullptr || !a->has_g()) throw GraphError(fmt::format("the {} is missing", attr));
  const pb::GraphProto& branch = a->g();
  if (branch.output_size() != node_->output_size()) {
    throw GraphError(fmt::format("the {} has {} outputs, the node {}", attr, branch.output_size(),
                                 node_->output_size()));
  }
  for (int n = 0; n < branch.node_size(); ++n) {
    const pb::NodeProto& inner = branch.node(n);
    const bool standard = inner.domain().empty() || inner.domain() == "ai.onnx";
    if (!standard || Ops().count(inner.op_type()) == 0) {
      Unsupported(fmt::format("op type {} (in the {}, node {}{})",
                              standard ? inner.op_type() : inner.domain() + "::" + inner.op_type(),
                              attr, n, inner.name().empty() ? "" : " '" + inner.name() + "'"));
    }
  }
  // The branch's own initializers are values as the graph's are (weights when float and larger
  // than a scalar).
  for (const pb::TensorProto& t : branch.initializer()) {
    Known k = FromTensorProto(t, t.name());
    k.trainable = k.is_float() && k.size() > 1;
    values_[t.name()] =
        Value{.tensor = std::nullopt, .known = std::make_shared<const Known>(std::move(k))};
  }
  // The branch's nodes are converted as the graph's are, then the node being converted is this
  // one again.
  const pb::NodeProto* outer = node_;
  const int outer_index = node_index_;
  const std::string outer_base = node_base_;
  const std::unordered_set<std::string> outer_outputs = current_outputs_;
  auto restore = [&] {
    node_ = outer;
    node_index_ = outer_index;
    node_base_ = outer_base;
    current_outputs_ = outer_outputs;
  };
  for (int n = 0; n < branch.node_size(); ++n) {
    node_ = &branch.node(n);
    node_index_ = n;
    node_base_ = node_->name().empty() ? fmt::format("{}/{}_{}", outer_base, node_->op_type(), n)
                                       : node_->name();
    current_outputs_ = {node_->output().begin(), node_->output().end()};
    try {
      ConvertNode();
    } catch (const GraphError& error) {
      const std::string inner = Describe();
      restore();
      throw GraphError(fmt::format("in the {}, {}: {}", attr, inner, error.what()));
    }
  }
  restore();
  for (int k = 0; k < branch.output_size(); ++k) {
    const std::string& name = branch.output(k).name();
    auto it = values_.find(name);
    if (it == values_.end()) {
      throw GraphError(
          fmt::format("the {}'s output '{}' is produced by none of its nodes", attr, name));
    }
    const Value value = it->second;
    const std::string& output = OutputName(static_cast<size_t>(k));
    if (!output.empty()) values_[output] = value;
  }
}

}  // namespace placer::graph::onnx
