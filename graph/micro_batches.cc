#include "graph/micro_batches.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "graph/ops.h"
#include "graph/training_step.h"

namespace placer::graph {

std::string MicroBatchName(int micro_batch, const std::string& name) {
  return fmt::format("m{}/{}", micro_batch, name);
}

namespace {

// k for a name "m<k>/...", else nullopt; `rest` gets what follows the slash.
std::optional<int> ParseMicroBatch(const std::string& name, std::string* rest = nullptr) {
  const size_t slash = name.find('/');
  if (name.size() < 3 || name[0] != 'm' || slash == std::string::npos || slash < 2 ||
      !std::all_of(name.begin() + 1, name.begin() + static_cast<std::ptrdiff_t>(slash),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  if (rest) *rest = name.substr(slash + 1);
  return std::stoi(name.substr(1, slash - 1));
}

// `g` with each update's gradient contributions summed micro-batch by micro-batch into a running
// total ("m<k>/<param>.grad_acc", on the parameter's device), as frameworks accumulate gradients
// in place: a micro-batch's contributions are freed once added, instead of all M micro-batches'
// waiting for the update. AppendBackwardAndUpdate appends the updates last, so every other op
// keeps its id.
Graph AccumulateGradients(const Graph& g) {
  Graph out;
  for (const Tensor& t : g.tensors()) out.AddTensor(t);
  std::vector<OpId> updates;
  for (OpId id = 0; id < g.num_ops(); ++id) {
    if (g.op(id).phase == Phase::kUpdate) {
      updates.push_back(id);
    } else {
      out.AddOp(g.op(id));
    }
  }
  for (OpId id : updates) {
    Op update = g.op(id);
    const Tensor param = g.tensor(update.inputs[0]);
    std::map<int, std::vector<TensorId>> by_micro_batch;
    for (size_t i = 1; i < update.inputs.size(); ++i) {
      const OpId producer = g.tensor(update.inputs[i]).producer;
      by_micro_batch[ParseMicroBatch(g.op(producer).name).value_or(0)].push_back(update.inputs[i]);
    }
    std::optional<TensorId> total;
    for (auto& [k, grads] : by_micro_batch) {
      if (total) grads.insert(grads.begin(), *total);
      if (grads.size() == 1) {
        total = grads[0];
        continue;
      }
      const std::string name = MicroBatchName(k, param.name + ".grad_acc");
      const TensorId sum =
          out.AddTensor({.name = name, .shape = param.shape, .kind = TensorKind::kGradient});
      out.AddOp({.name = name,
                 .type = op_types::kAddN,
                 .phase = Phase::kBackward,
                 .inputs = grads,
                 .outputs = {sum},
                 .forward_op = update.forward_op});
      total = sum;
    }
    update.inputs = {update.inputs[0], *total};
    out.AddOp(std::move(update));
  }
  return out;
}

}  // namespace

MicroBatchedGraph BuildMicroBatched(const ForwardBuilder& build_forward, int64_t batch,
                                    int micro_batches, double learning_rate) {
  if (micro_batches < 1) {
    throw GraphError(fmt::format("micro_batches: {} is not a count of micro-batches (at least 1)",
                                 micro_batches));
  }
  if (batch % micro_batches != 0) {
    // Unequal micro-batches would give the last stage's ops different shapes per micro-batch and
    // the schedule a ragged tail; GPipe and PipeDream both cut the minibatch evenly.
    throw GraphError(fmt::format(
        "micro_batches: {} does not divide the batch of {} rows into equal micro-batches",
        micro_batches, batch));
  }
  MicroBatchedGraph result;
  result.micro_batches = micro_batches;
  result.micro_batch_size = batch / micro_batches;
  Graph& g = result.graph;
  // Every micro-batch has the same rows: one build (an ONNX model is loaded once), M copies.
  const Graph part = build_forward(result.micro_batch_size, batch);
  for (int k = 0; k < micro_batches; ++k) {
    std::vector<TensorId> remap(static_cast<size_t>(part.num_tensors()));
    for (TensorId t = 0; t < part.num_tensors(); ++t) {
      Tensor copy = part.tensor(t);
      if (copy.kind == TensorKind::kParameter) {
        // Every micro-batch reads the one parameter: its gradients add up in the update.
        if (std::optional<TensorId> shared = g.FindTensor(copy.name)) {
          remap[static_cast<size_t>(t)] = *shared;
          continue;
        }
      } else {
        copy.name = MicroBatchName(k, copy.name);
      }
      remap[static_cast<size_t>(t)] = g.AddTensor(std::move(copy));
    }
    for (const Op& op : part.ops()) {
      Op copy = op;
      copy.name = MicroBatchName(k, op.name);
      for (TensorId& t : copy.inputs) t = remap[static_cast<size_t>(t)];
      for (TensorId& t : copy.outputs) t = remap[static_cast<size_t>(t)];
      g.AddOp(std::move(copy));
    }
  }
  AppendBackwardAndUpdate(g, learning_rate);
  result.graph = AccumulateGradients(g);
  result.graph.Validate();
  return result;
}

std::optional<int> MicroBatchOfName(const std::string& name) { return ParseMicroBatch(name); }

std::vector<int> MicroBatchOfOps(const Graph& graph) {
  std::vector<int> micro_batch(static_cast<size_t>(graph.num_ops()), -1);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.phase == Phase::kUpdate) continue;
    // Its own name (forward and backward ops, gradient sums), else its forward op's.
    std::optional<int> k = ParseMicroBatch(op.name);
    if (!k && op.forward_op != kNoOp) k = ParseMicroBatch(graph.op(op.forward_op).name);
    if (!k) {
      throw GraphError(fmt::format(
          "op '{}' belongs to no micro-batch (m<k>/<op>): the graph is not micro-batched",
          op.name));
    }
    micro_batch[static_cast<size_t>(id)] = *k;
  }
  return micro_batch;
}

Placement PlaceMicroBatches(const MicroBatchedGraph& micro_batched, const Graph& base,
                            const Placement& base_placement, PipelineSchedule schedule) {
  const Graph& g = micro_batched.graph;
  Placement placement{
      .devices = base_placement.devices,
      .device_of_op = std::vector<int>(static_cast<size_t>(g.num_ops()), -1),
      .micro_batches = micro_batched.micro_batches,
      .schedule = schedule,
  };
  for (OpId id : g.OpsInPhase(Phase::kForward)) {
    std::string base_name;
    std::optional<OpId> base_op;
    if (ParseMicroBatch(g.op(id).name, &base_name)) base_op = base.FindOp(base_name);
    if (!base_op || base.op(*base_op).phase != Phase::kForward) {
      throw GraphError(fmt::format(
          "micro-batched op '{}' is not a copy of a forward op of the model (m<k>/<op>)",
          g.op(id).name));
    }
    placement.device_of_op[static_cast<size_t>(id)] =
        base_placement.device_of_op.at(static_cast<size_t>(*base_op));
  }
  return placement;
}

const char* ToString(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::kGPipe:
      return "gpipe";
    case PipelineSchedule::kOneFOneB:
      return "1f1b";
  }
  return "?";
}

PipelineSchedule ParsePipelineSchedule(const std::string& name) {
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  if (name == "1f1b") return PipelineSchedule::kOneFOneB;
  throw GraphError(fmt::format("unknown pipeline schedule '{}': gpipe or 1f1b", name));
}

}  // namespace placer::graph
