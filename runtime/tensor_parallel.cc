#include "runtime/tensor_parallel.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <map>
#include <set>
#include <unordered_map>
#include <vector>

namespace placer::runtime {

namespace {

const at::Tensor& Find(const TensorMap& map, const std::string& name, const char* which) {
  const auto it = map.find(name);
  if (it == map.end()) {
    throw graph::GraphError(fmt::format("{} parameters lack '{}'", which, name));
  }
  return it->second;
}

}  // namespace

TensorMap ShardParameters(const TensorMap& whole, const graph::TensorParallelGraph& sharded) {
  std::unordered_map<std::string, const graph::ParameterSlice*> slice_of;
  for (const graph::ParameterSlice& slice : sharded.parameter_slices) slice_of[slice.name] = &slice;
  std::unordered_map<std::string, std::string> source_of_copy;
  for (const graph::ReplicatedParameter& p : sharded.replicated_parameters) {
    for (graph::TensorId copy : p.copies)
      source_of_copy[sharded.forward.tensor(copy).name] = p.source;
  }
  TensorMap out;
  for (graph::TensorId id : sharded.forward.Parameters()) {
    const std::string& name = sharded.forward.tensor(id).name;
    if (const auto copy = source_of_copy.find(name); copy != source_of_copy.end()) {
      out.emplace(name, Find(whole, copy->second, "the model's").clone());
      continue;
    }
    const auto it = slice_of.find(name);
    if (it == slice_of.end()) {
      out.emplace(name, Find(whole, name, "the model's"));
      continue;
    }
    const graph::ParameterSlice& s = *it->second;
    std::vector<at::Tensor> pieces;  // of each block, in block order
    for (const at::Tensor& block : Find(whole, s.source, "the model's").chunk(s.parts, s.axis)) {
      pieces.push_back(block.narrow(s.axis, s.begin, s.size / s.parts));
    }
    out.emplace(name, at::cat(pieces, s.axis));  // a new tensor: cat copies
  }
  return out;
}

TensorMap GatherParameters(const TensorMap& sharded, const graph::TensorParallelGraph& graph) {
  std::map<std::string, std::map<int64_t, const graph::ParameterSlice*>> slices_of;
  std::set<std::string> sliced;
  for (const graph::ParameterSlice& slice : graph.parameter_slices) {
    slices_of[slice.source][slice.begin] = &slice;
    sliced.insert(slice.name);
  }
  TensorMap out;
  // A replicated parameter's copies stay equal (their gradients are summed): shard 0's is the
  // model's.
  for (const graph::ReplicatedParameter& p : graph.replicated_parameters) {
    for (graph::TensorId copy : p.copies) sliced.insert(graph.forward.tensor(copy).name);
    out.emplace(p.source,
                Find(sharded, graph.forward.tensor(p.copies.front()).name, "the sharded step's"));
  }
  for (graph::TensorId id : graph.forward.Parameters()) {
    const std::string& name = graph.forward.tensor(id).name;
    if (!sliced.count(name)) out.emplace(name, Find(sharded, name, "the sharded step's"));
  }
  for (const auto& [source, slices] : slices_of) {
    // Block by block (one, unless a fused projection's), each block's pieces in shard order.
    const graph::ParameterSlice& first = *slices.begin()->second;
    std::vector<at::Tensor> pieces;
    for (int b = 0; b < first.parts; ++b) {
      for (const auto& [begin, slice] : slices) {
        pieces.push_back(Find(sharded, slice->name, "the sharded step's")
                             .chunk(first.parts, first.axis)[static_cast<size_t>(b)]);
      }
    }
    out.emplace(source, at::cat(pieces, first.axis));
  }
  return out;
}

}  // namespace placer::runtime
