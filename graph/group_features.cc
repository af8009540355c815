#include "graph/group_features.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/ops.h"

namespace placer::graph {

namespace {

// log2(1 + x) / scale keeps features of very different magnitudes near [0, 1].
float Log(double x, double scale) { return static_cast<float>(std::log2(1.0 + x) / scale); }

constexpr int kShapeDims = 4;
constexpr int kNeighbours = 6;  // in- and out-neighbours listed, as in the hierarchical planner

}  // namespace

GroupFeatures ComputeGroupFeatures(const Graph& graph, const Grouping& grouping) {
  GroupFeatures f;
  const int groups = grouping.num_groups();
  std::map<std::string, int64_t> vocabulary;
  for (const std::string& type : KnownOpTypes()) {
    vocabulary.emplace(type, static_cast<int64_t>(f.type_names.size()));
    f.type_names.push_back(type);
  }
  // Backward and update costs belong to the group of their forward op.
  std::vector<double> flops(static_cast<size_t>(groups), 0), bytes(static_cast<size_t>(groups), 0),
      param_bytes(static_cast<size_t>(groups), 0);
  std::vector<int> forward_ops(static_cast<size_t>(groups), 0),
      backward_ops(static_cast<size_t>(groups), 0);
  double total_flops = 0;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    OpId anchor = op.phase == Phase::kForward ? id : op.forward_op;
    int g = grouping.group_of_op[static_cast<size_t>(anchor)];
    double op_flops = OpFlops(graph, op);
    flops[static_cast<size_t>(g)] += op_flops;
    total_flops += op_flops;
    ++(op.phase == Phase::kForward ? forward_ops : backward_ops)[static_cast<size_t>(g)];
    if (op.phase == Phase::kForward) {
      bytes[static_cast<size_t>(g)] += static_cast<double>(OpOutputBytes(graph, op));
      for (TensorId in : op.inputs) {
        if (graph.tensor(in).kind == TensorKind::kParameter) {
          param_bytes[static_cast<size_t>(g)] += static_cast<double>(graph.tensor(in).bytes());
        }
      }
    }
  }
  // Group-level neighbours through forward tensors.
  std::vector<std::set<int>> in(static_cast<size_t>(groups)), out(static_cast<size_t>(groups));
  for (int g = 0; g < groups; ++g) {
    for (OpId id : grouping.members[static_cast<size_t>(g)]) {
      for (TensorId t : graph.op(id).outputs) {
        for (OpId consumer : graph.tensor(t).consumers) {
          int h = grouping.group_of_op[static_cast<size_t>(consumer)];
          if (h >= 0 && h != g) {
            out[static_cast<size_t>(g)].insert(h);
            in[static_cast<size_t>(h)].insert(g);
          }
        }
      }
    }
  }
  f.feature_dim = kShapeDims + 6 + 2 * kNeighbours;
  f.values.assign(static_cast<size_t>(groups * f.feature_dim), 0.0f);
  const double scale = std::max(1, groups);
  for (int g = 0; g < groups; ++g) {
    const auto& members = grouping.members[static_cast<size_t>(g)];
    OpId heaviest = *std::max_element(members.begin(), members.end(), [&](OpId a, OpId b) {
      return OpFlops(graph, graph.op(a)) < OpFlops(graph, graph.op(b));
    });
    f.type_ids.push_back(vocabulary.at(graph.op(heaviest).type));
    float* row = &f.values[static_cast<size_t>(g * f.feature_dim)];
    const Op& last = graph.op(members.back());
    Shape shape = last.outputs.empty() ? Shape{} : graph.tensor(last.outputs[0]).shape;
    for (int d = 0; d < kShapeDims; ++d) {
      row[d] = d < static_cast<int>(shape.size())
                   ? Log(static_cast<double>(shape[static_cast<size_t>(d)]), 16)
                   : -0.1f;
    }
    int k = kShapeDims;
    row[k++] = Log(flops[static_cast<size_t>(g)], 40);
    row[k++] =
        static_cast<float>(total_flops > 0 ? flops[static_cast<size_t>(g)] / total_flops : 0);
    row[k++] = Log(bytes[static_cast<size_t>(g)], 32);
    row[k++] = Log(param_bytes[static_cast<size_t>(g)], 32);
    row[k++] = static_cast<float>(g / scale);
    row[k++] = static_cast<float>(
        std::log2(1.0 + static_cast<double>(in[static_cast<size_t>(g)].size() +
                                            out[static_cast<size_t>(g)].size())) /
        4);
    auto list = [&](const std::set<int>& neighbours) {
      int written = 0;
      for (int h : neighbours) {
        if (written == kNeighbours) break;
        row[k + written++] = static_cast<float>((h - g) / scale);
      }
      k += kNeighbours;
    };
    list(in[static_cast<size_t>(g)]);
    list(out[static_cast<size_t>(g)]);
  }
  std::map<std::pair<int, int>, std::pair<int64_t, int>> traffic;  // bytes, tensors
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.producer == kNoOp || graph.op(tensor.producer).phase != Phase::kForward) continue;
    const int from = grouping.group_of_op[static_cast<size_t>(tensor.producer)];
    std::set<int> readers;
    for (OpId consumer : tensor.consumers) {
      const int to = grouping.group_of_op[static_cast<size_t>(consumer)];
      if (to >= 0 && to != from) readers.insert(to);
    }
    for (int to : readers) {
      auto& [bytes, tensors] = traffic[{from, to}];
      bytes += tensor.bytes();
      ++tensors;
    }
  }
  for (const auto& [pair, load] : traffic) {
    f.edges.push_back({pair.first, pair.second, load.first, load.second});
  }
  f.flops = std::move(flops);
  f.output_bytes = std::move(bytes);
  f.param_bytes = std::move(param_bytes);
  f.forward_ops = std::move(forward_ops);
  f.backward_ops = std::move(backward_ops);
  return f;
}

}  // namespace placer::graph
