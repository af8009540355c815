#include "graph/micro_batches.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "graph/ops.h"
#include "graph/training_step.h"

namespace placer::graph {

namespace {

// The micro-batch of a gradient contribution: its producer's, 0 outside any.
int MicroBatchOfProducer(const Graph& g, TensorId grad) {
  return ParseStepName(g.op(g.tensor(grad).producer).name).micro_batch.value_or(0);
}

// A running total of `param`'s gradient, "[r<r>/]m<k>/<param>.grad_acc": an AddN of `inputs` on
// the parameter's device (it belongs with `owner`), added to `out`.
TensorId AddRunningTotal(Graph& out, int micro_batch, const Tensor& param, OpId owner,
                         std::vector<TensorId> inputs) {
  const std::string name = InMicroBatch(micro_batch, param.name + ".grad_acc");
  const TensorId sum =
      out.AddTensor({.name = name, .shape = param.shape, .kind = TensorKind::kGradient});
  out.AddOp({.name = name,
             .type = op_types::kAddN,
             .phase = Phase::kBackward,
             .inputs = std::move(inputs),
             .outputs = {sum},
             .forward_op = owner});
  return sum;
}

// Sums `grads` (a parameter's gradient contributions) micro-batch by micro-batch into running
// totals (AddRunningTotal), all but the last micro-batch's; returns what is left to add: the
// total so far (when there is one) and the last micro-batch's contributions.
std::vector<TensorId> AccumulateUpToLast(Graph& out, const Graph& g, const Tensor& param,
                                         OpId owner, const std::vector<TensorId>& grads) {
  std::map<int, std::vector<TensorId>> by_micro_batch;
  for (TensorId grad : grads) by_micro_batch[MicroBatchOfProducer(g, grad)].push_back(grad);
  std::optional<TensorId> total;
  for (auto it = by_micro_batch.begin(); it != by_micro_batch.end(); ++it) {
    std::vector<TensorId>& these = it->second;
    if (total) these.insert(these.begin(), *total);
    if (std::next(it) == by_micro_batch.end()) return these;
    total = these.size() == 1 ? these[0] : AddRunningTotal(out, it->first, param, owner, these);
  }
  return {};
}

// `g` with each parameter's gradient contributions summed micro-batch by micro-batch into a
// running total, as frameworks accumulate gradients in place: a micro-batch's contributions are
// freed once added, instead of all M micro-batches' waiting for the update. Rewritten are the
// updates of a one-replica step (their inputs: the parameter, then its contributions), whose last
// micro-batch gets a running total too, and each replica's gradient sum of a replicated one
// ("<param>.grad_sum", an AddN of the replica's contributions), which then adds the last
// micro-batch to the total of the others. Every other op keeps its place; the running totals come
// right before the op they feed.
Graph AccumulateGradients(const Graph& g) {
  Graph out;
  for (const Tensor& t : g.tensors()) out.AddTensor(t);
  for (OpId id = 0; id < g.num_ops(); ++id) {
    Op op = g.op(id);
    if (op.phase == Phase::kUpdate) {
      const Tensor param = g.tensor(op.inputs[0]);
      std::vector<TensorId> rest =
          AccumulateUpToLast(out, g, param, op.forward_op,
                             std::vector<TensorId>(op.inputs.begin() + 1, op.inputs.end()));
      const TensorId total = rest.size() == 1
                                 ? rest.front()
                                 : AddRunningTotal(out, MicroBatchOfProducer(g, rest.back()), param,
                                                   op.forward_op, rest);
      op.inputs = {op.inputs[0], total};
    } else if (op.type == op_types::kAddN && op.name.ends_with(kReplicaGradientSum)) {
      const std::string param_name = op.name.substr(0, op.name.size() - kReplicaGradientSum.size());
      const Tensor& param = g.tensor(*g.FindTensor(param_name));
      op.inputs = AccumulateUpToLast(out, g, param, op.forward_op, op.inputs);
    }
    out.AddOp(std::move(op));
  }
  return out;
}

}  // namespace

ForwardBuilder MicroBatchedForward(ForwardBuilder build_forward, int micro_batches) {
  if (micro_batches < 1) {
    throw GraphError(fmt::format("micro_batches: {} is not a count of micro-batches (at least 1)",
                                 micro_batches));
  }
  return
      [build_forward = std::move(build_forward), micro_batches](int64_t rows, int64_t normalizer) {
        if (rows % micro_batches != 0) {
          // Unequal micro-batches would give the last stage's ops different shapes per micro-batch
          // and the schedule a ragged tail; GPipe and PipeDream both cut the minibatch evenly.
          throw GraphError(fmt::format(
              "micro_batches: {} does not divide the batch of {} rows into equal micro-batches",
              micro_batches, rows));
        }
        Graph g;
        // Every micro-batch has the same rows: one build (an ONNX model is loaded once), M copies.
        const Graph part = build_forward(rows / micro_batches, normalizer);
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
        return g;
      };
}

MicroBatchedGraph BuildMicroBatched(const ForwardBuilder& build_forward, int64_t batch,
                                    int micro_batches, double learning_rate) {
  MicroBatchedGraph result;
  Graph g = MicroBatchedForward(build_forward, micro_batches)(batch, batch);
  result.micro_batches = micro_batches;
  result.micro_batch_size = batch / micro_batches;
  AppendBackwardAndUpdate(g, learning_rate);
  result.graph = AccumulateGradients(g);
  result.graph.Validate();
  return result;
}

DataParallelGraph BuildReplicatedPipelines(
    const ForwardBuilder& build_forward, int64_t batch, const std::vector<std::string>& devices,
    int micro_batches, double learning_rate, const AllReduceOptions& all_reduce,
    const std::function<TiedParameters(const Graph& replica)>& ties_within) {
  const auto replicas = static_cast<int64_t>(devices.size());
  if (micro_batches < 1 || replicas < 1 || batch % (replicas * micro_batches) != 0) {
    throw GraphError(fmt::format(
        "replicas {} x micro_batches {}: the batch of {} rows does not split into that many "
        "equal micro-batches",
        replicas, micro_batches, batch));
  }
  // One micro-batch is the plain data-parallel step, named as BuildDataParallel names it.
  DataParallelGraph result = BuildDataParallel(
      micro_batches > 1 ? MicroBatchedForward(build_forward, micro_batches) : build_forward, batch,
      devices, std::vector<double>(devices.size(), 1.0), learning_rate, all_reduce, ties_within);
  if (micro_batches > 1) {
    result.graph = AccumulateGradients(result.graph);
    result.graph.Validate();
    // The rewrite added ops: forward ops keep their ids, the rest run where their forward op does.
    result.placement.device_of_op.resize(static_cast<size_t>(result.graph.num_ops()), -1);
    result.placement.micro_batches = micro_batches;
  }
  return result;
}

std::optional<int> MicroBatchOfName(const std::string& name) {
  return ParseStepName(name).micro_batch;
}

std::vector<int> MicroBatchOfOps(const Graph& graph) {
  std::vector<int> micro_batch(static_cast<size_t>(graph.num_ops()), -1);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.phase == Phase::kUpdate) continue;
    // Its own name (forward and backward ops, gradient sums), else its forward op's.
    std::optional<int> k = MicroBatchOfName(op.name);
    if (!k && op.type == op_types::kBackward && op.forward_op != kNoOp) {
      k = MicroBatchOfName(graph.op(op.forward_op).name);
    }
    if (!k && op.phase == Phase::kBackward && op.type != op_types::kBackward) {
      continue;  // a replica's summed gradient or its all-reduce: once, after the micro-batches
    }
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
  return PlaceMicroBatches(micro_batched.graph, micro_batched.micro_batches, base, base_placement,
                           schedule);
}

Placement PlaceMicroBatches(const Graph& g, int micro_batches, const Graph& base,
                            const Placement& base_placement, PipelineSchedule schedule) {
  Placement placement{
      .devices = base_placement.devices,
      .device_of_op = std::vector<int>(static_cast<size_t>(g.num_ops()), -1),
      .micro_batches = micro_batches,
      .schedule = schedule,
  };
  for (OpId id : g.OpsInPhase(Phase::kForward)) {
    const StepName parsed = ParseStepName(g.op(id).name);
    std::optional<OpId> base_op;
    if (parsed.micro_batch && !parsed.replica) base_op = base.FindOp(parsed.base);
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
