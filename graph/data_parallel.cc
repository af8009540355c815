#include "graph/data_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <optional>

#include "graph/training_step.h"

namespace placer::graph {

std::vector<int64_t> SplitBatch(int64_t batch, const std::vector<double>& weights) {
  const auto parts = static_cast<int64_t>(weights.size());
  if (parts == 0) throw GraphError("data parallelism needs at least one device");
  if (batch < parts) {
    throw GraphError(fmt::format("a batch of {} cannot be split over {} devices", batch, parts));
  }
  double total = std::accumulate(weights.begin(), weights.end(), 0.0);
  if (!(total > 0)) throw GraphError("data-parallel shares must be positive");
  // One row each, then the rest by largest remainder.
  std::vector<int64_t> sizes(weights.size(), 1);
  int64_t rest = batch - parts;
  std::vector<std::pair<double, size_t>> remainders;
  int64_t assigned = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    double exact = static_cast<double>(rest) * weights[i] / total;
    auto whole = static_cast<int64_t>(std::floor(exact));
    sizes[i] += whole;
    assigned += whole;
    remainders.emplace_back(exact - static_cast<double>(whole), i);
  }
  std::sort(remainders.begin(), remainders.end(), std::greater<>());
  for (int64_t k = 0; k < rest - assigned; ++k) ++sizes[remainders[static_cast<size_t>(k)].second];
  return sizes;
}

DataParallelGraph BuildDataParallel(
    const ForwardBuilder& build_forward, int64_t global_batch,
    const std::vector<std::string>& devices, const std::vector<double>& weights,
    double learning_rate, const AllReduceOptions& all_reduce,
    const std::function<TiedParameters(const Graph& replica)>& ties_within) {
  DataParallelGraph result;
  result.shard_sizes = SplitBatch(global_batch, weights);
  Graph& g = result.graph;
  std::vector<std::vector<TensorId>> replica_params;  // [replica][k]: k-th parameter
  std::vector<std::vector<TensorId>> within;          // copies within a replica
  OpId replica_0_ops = 0;
  for (size_t r = 0; r < devices.size(); ++r) {
    const int replica = static_cast<int>(r);
    Graph shard = build_forward(result.shard_sizes[r], global_batch);
    std::vector<TensorId> remap(static_cast<size_t>(shard.num_tensors()));
    for (TensorId t = 0; t < shard.num_tensors(); ++t) {
      Tensor copy = shard.tensor(t);
      copy.name = ReplicaName(replica, copy.name);
      remap[static_cast<size_t>(t)] = g.AddTensor(std::move(copy));
    }
    for (OpId k = 0; k < shard.num_ops(); ++k) {
      const Op& op = shard.op(k);
      Op copy = op;
      copy.name = ReplicaName(replica, op.name);
      // Replica r's forward is built afresh, with attributes equal to those of replica 0's op k
      // (op k of the step: the builder is the same, only the batch may differ): share that op's
      // map rather than keep one per replica (bench/RESULTS.md, "Memory of the steps").
      if (replica > 0 && k < replica_0_ops && g.op(k).attrs.values() == op.attrs.values()) {
        copy.attrs = g.op(k).attrs;
      }
      for (TensorId& t : copy.inputs) t = remap[static_cast<size_t>(t)];
      for (TensorId& t : copy.outputs) t = remap[static_cast<size_t>(t)];
      g.AddOp(std::move(copy));
    }
    if (replica == 0) replica_0_ops = g.num_ops();
    std::vector<TensorId> params;
    for (TensorId t : shard.Parameters()) params.push_back(remap[static_cast<size_t>(t)]);
    replica_params.push_back(std::move(params));
    if (ties_within) {
      for (const std::vector<TensorId>& group : ties_within(shard)) {
        std::vector<TensorId> copies;
        for (TensorId t : group) copies.push_back(remap[static_cast<size_t>(t)]);
        within.push_back(std::move(copies));
      }
    }
  }
  // Parameter k of every replica is tied to parameter k of every other replica, and with them the
  // copies `ties_within` names: one set per parameter k, its members in replica order.
  std::map<size_t, size_t> root;  // parameter slot k -> the slot of its set
  std::vector<size_t> slot(static_cast<size_t>(g.num_tensors()), 0);
  for (const std::vector<TensorId>& params : replica_params) {
    for (size_t k = 0; k < params.size(); ++k) slot[static_cast<size_t>(params[k])] = k;
  }
  for (const std::vector<TensorId>& copies : within) {
    for (TensorId t : copies)
      root[slot[static_cast<size_t>(t)]] = slot[static_cast<size_t>(copies[0])];
  }
  auto set_of = [&](size_t k) {
    const auto it = root.find(k);
    return it == root.end() ? k : it->second;
  };
  // The slots of each set, listed once, so that a parameter's ties cost its set's size and not a
  // pass over every parameter of every replica.
  const size_t slots = replica_params.empty() ? 0 : replica_params[0].size();
  std::vector<std::vector<size_t>> members(slots);
  for (size_t k = 0; k < slots; ++k) members[set_of(k)].push_back(k);
  AppendBackwardAndUpdate(
      g, learning_rate,
      [&](TensorId param) {
        std::vector<TensorId> others;
        for (const std::vector<TensorId>& params : replica_params) {
          for (size_t member : members[set_of(slot[static_cast<size_t>(param)])]) {
            if (params[member] != param) others.push_back(params[member]);
          }
        }
        return others;
      },
      all_reduce);
  g.Validate();
  result.placement = Placement{
      .devices = devices, .device_of_op = std::vector<int>(static_cast<size_t>(g.num_ops()), -1)};
  for (OpId id : g.OpsInPhase(Phase::kForward)) {
    result.placement.device_of_op[static_cast<size_t>(id)] = *ParseStepName(g.op(id).name).replica;
  }
  return result;
}

ReplicaMap MapReplicas(const Graph& replicated, const Graph& base) {
  ReplicaMap map;
  map.replica_of_op.assign(static_cast<size_t>(replicated.num_ops()), -1);
  map.base_op.assign(static_cast<size_t>(replicated.num_ops()), kNoOp);
  for (OpId id : replicated.OpsInPhase(Phase::kForward)) {
    const std::string& name = replicated.op(id).name;
    const StepName parsed = ParseStepName(name);
    std::optional<OpId> base_op;
    if (parsed.replica) base_op = base.FindOp(parsed.base);
    if (parsed.replica && !base_op && parsed.micro_batch) {  // a model's own "m<k>/" name
      base_op = base.FindOp(name.substr(name.find('/') + 1));
    }
    if (!base_op || base.op(*base_op).phase != Phase::kForward) {
      throw GraphError(fmt::format(
          "replicated op '{}' is not a replica of a forward op of the model (r<replica>/<op>)",
          name));
    }
    const int replica = *parsed.replica;
    map.replica_of_op[static_cast<size_t>(id)] = replica;
    map.base_op[static_cast<size_t>(id)] = *base_op;
  }
  return map;
}

}  // namespace placer::graph
