#include "graph/training_step.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "graph/ops.h"
#include "graph/ring_all_reduce.h"
#include "graph/step_names.h"

namespace placer::graph {

OpId OwnerOf(const Graph& graph, TensorId parameter) {
  for (OpId consumer : graph.tensor(parameter).consumers) {
    if (graph.op(consumer).phase == Phase::kForward) return consumer;
  }
  throw GraphError(
      fmt::format("parameter '{}' is not used by any forward op", graph.tensor(parameter).name));
}

bool IsCollectiveHop(const Graph& graph, OpId op) {
  const Op& o = graph.op(op);
  if (o.attrs.Has(std::string(kCollectiveHop))) return true;
  return o.forward_op != kNoOp && graph.op(o.forward_op).attrs.Has(std::string(kCollectiveHop));
}

namespace {

// Adds a backward-phase op that runs with `forward_op` (on its device) and returns its outputs:
// one tensor named after the op, or "<op>:<k>" for several.
std::vector<TensorId> AddGradientOp(Graph& graph, const std::string& name, const std::string& type,
                                    std::vector<TensorId> inputs, Attributes attrs,
                                    OpId forward_op) {
  Op op{.name = name,
        .type = type,
        .phase = Phase::kBackward,
        .inputs = std::move(inputs),
        .attrs = std::move(attrs),
        .forward_op = forward_op};
  const std::vector<Shape> shapes = InferOutputShapes(graph, op);
  for (size_t k = 0; k < shapes.size(); ++k) {
    op.outputs.push_back(
        graph.AddTensor(Tensor{.name = shapes.size() == 1 ? name : fmt::format("{}:{}", name, k),
                               .shape = shapes[k],
                               .dtype = DType::kFloat32,
                               .kind = TensorKind::kGradient}));
  }
  graph.AddOp(std::move(op));
  return graph.op(graph.num_ops() - 1).outputs;
}

// A ring all-reduce of flat gradients `flat[m]` ([n] each, one per replica in ring order) as
// backward-phase ops running with `owner[m]` (graph/ring_all_reduce.h's schedule). Returns the
// summed flat gradient per member; op names start with base[m]. Every op is tagged with `bucket`
// and its member (kAllReduceBucket, kAllReduceMember).
std::vector<TensorId> BucketRing(Graph& graph, const std::vector<OpId>& owner,
                                 const std::vector<std::string>& base,
                                 const std::vector<TensorId>& flat, int64_t bucket) {
  return RingAllReduce(graph, flat, 0, [&](RingOp op) {
    op.attrs.Set(std::string(kAllReduceBucket), bucket);
    op.attrs.Set(std::string(kAllReduceMember), static_cast<int64_t>(op.member));
    return AddGradientOp(graph, base[op.member] + "/" + op.step, op.type, std::move(op.inputs),
                         std::move(op.attrs), owner[op.member]);
  });
}

// The tied parameter sets `rings` (each in replica order) in buckets of about `bucket_bytes`, in
// reverse order, the last layers' gradients (ready first) in the first bucket. A bucket holds rings
// of one size whose first members are of one tensor-parallel shard (graph::ShardOfName), so that
// member m of every ring in it lives with the same shard: packing them moves no gradient between
// devices.
std::vector<std::vector<std::vector<TensorId>>> Buckets(const Graph& graph,
                                                        std::vector<std::vector<TensorId>> rings,
                                                        int64_t bucket_bytes) {
  using Key = std::pair<size_t, int>;
  std::map<Key, size_t> open;  // the bucket each key is filling
  std::vector<std::vector<std::vector<TensorId>>> buckets;
  std::vector<int64_t> bytes;
  for (auto ring = rings.rbegin(); ring != rings.rend(); ++ring) {
    const Key key{ring->size(), ShardOfName(graph.tensor(ring->front()).name).value_or(-1)};
    auto it = open.find(key);
    if (it == open.end() || bytes[it->second] >= bucket_bytes) {
      it = open.insert_or_assign(key, buckets.size()).first;
      buckets.emplace_back();
      bytes.push_back(0);
    }
    bytes[it->second] += graph.tensor(ring->front()).bytes();
    buckets[it->second].push_back(std::move(*ring));
  }
  return buckets;
}

// All-reduces the replicas' gradients `summed` of the tied parameter sets `rings` in buckets
// (Buckets): per replica, the gradients of a bucket are flattened and concatenated (on the device
// of the bucket's first parameter), ring all-reduced, and split back.
std::map<TensorId, TensorId> BucketedAllReduce(Graph& graph,
                                               std::vector<std::vector<TensorId>> rings,
                                               const std::map<TensorId, TensorId>& summed,
                                               int64_t bucket_bytes) {
  std::map<TensorId, TensorId> reduced;
  int64_t bucket_index = 0;
  for (std::vector<std::vector<TensorId>>& bucket :
       Buckets(graph, std::move(rings), bucket_bytes)) {
    const size_t replicas = bucket.front().size();
    if (replicas == 1) {
      for (const auto& ring : bucket) reduced[ring[0]] = summed.at(ring[0]);
      continue;
    }
    std::vector<OpId> owner(replicas);
    std::vector<std::string> base(replicas);
    std::vector<TensorId> packed(replicas);
    std::vector<int64_t> sizes;
    for (const auto& ring : bucket) sizes.push_back(NumElements(graph.tensor(ring[0]).shape));
    for (size_t m = 0; m < replicas; ++m) {
      owner[m] = OwnerOf(graph, bucket[0][m]);
      base[m] = graph.tensor(bucket[0][m]).name + ".allreduce";
      std::vector<TensorId> flats;
      for (const auto& ring : bucket) {
        const Tensor param = graph.tensor(ring[m]);  // a copy: AddGradientOp adds tensors
        TensorId grad = summed.at(ring[m]);
        if (param.shape.size() != 1) {
          Attributes reshape;
          reshape.Set("shape", std::vector<int64_t>{NumElements(param.shape)});
          grad = AddGradientOp(graph, param.name + ".grad_flat", op_types::kReshape, {grad},
                               reshape, OwnerOf(graph, ring[m]))[0];
        }
        flats.push_back(grad);
      }
      packed[m] = flats[0];
      if (flats.size() > 1) {
        Attributes concat;
        concat.Set("axis", int64_t{0});
        packed[m] =
            AddGradientOp(graph, base[m] + "/pack", op_types::kConcat, flats, concat, owner[m])[0];
      }
    }
    const std::vector<TensorId> all = BucketRing(graph, owner, base, packed, bucket_index++);
    for (size_t m = 0; m < replicas; ++m) {
      std::vector<TensorId> parts = {all[m]};
      if (bucket.size() > 1) {
        Attributes split;
        split.Set("axis", int64_t{0});
        split.Set("sizes", sizes);
        parts =
            AddGradientOp(graph, base[m] + "/unpack", op_types::kSplit, {all[m]}, split, owner[m]);
      }
      for (size_t k = 0; k < bucket.size(); ++k) {
        const Tensor param = graph.tensor(bucket[k][m]);  // a copy, as above
        TensorId grad = parts[k];
        if (param.shape.size() != 1) {
          Attributes reshape;
          reshape.Set("shape", param.shape);
          grad = AddGradientOp(graph, param.name + ".grad_reduced", op_types::kReshape, {grad},
                               reshape, OwnerOf(graph, bucket[k][m]))[0];
        }
        reduced[bucket[k][m]] = grad;
      }
    }
  }
  return reduced;
}

}  // namespace

void AppendBackwardAndUpdate(Graph& graph, double learning_rate,
                             const std::function<std::vector<TensorId>(TensorId)>& tied_with,
                             const AllReduceOptions& all_reduce) {
  if (learning_rate <= 0) throw GraphError("the learning rate must be positive");
  if (all_reduce.bucket_bytes <= 0) {
    throw GraphError(fmt::format("the all-reduce's bucket size must be positive, not {} bytes",
                                 all_reduce.bucket_bytes));
  }
  // Several losses (data-parallel replicas) are summed: each seeds its backward with 1.
  std::vector<bool> is_loss(static_cast<size_t>(graph.num_ops()), false);
  OpId loss = kNoOp;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    if (op.phase != Phase::kForward) {
      throw GraphError(fmt::format("op '{}' is already a {} op: the graph has a training step",
                                   op.name, ToString(op.phase)));
    }
    if (op.type == op_types::kSoftmaxCrossEntropy) {
      is_loss[static_cast<size_t>(id)] = true;
      loss = id;
    }
  }
  if (loss == kNoOp) throw GraphError("the forward graph has no SoftmaxCrossEntropy loss");

  const std::vector<OpId> order = graph.TopologicalOrder();

  // A tensor carries a gradient when it is a parameter or depends on one.
  std::vector<bool> requires_grad(static_cast<size_t>(graph.num_tensors()), false);
  for (OpId id : order) {
    const Op& op = graph.op(id);
    bool any = false;
    for (TensorId in : op.inputs) {
      any = any || requires_grad[static_cast<size_t>(in)] ||
            graph.tensor(in).kind == TensorKind::kParameter;
    }
    // Integer tensors (indices, masks) carry no gradient, whatever they were computed from.
    for (TensorId out : op.outputs) {
      requires_grad[static_cast<size_t>(out)] = any && graph.tensor(out).dtype == DType::kFloat32;
    }
  }
  for (TensorId id : graph.Parameters()) requires_grad[static_cast<size_t>(id)] = true;

  // The backward ops' attributes, one copy of each distinct pair (Attributes share a map until one
  // of them is changed): a handful of pairs serve the hundreds of thousands of backward ops of a
  // replicated step, which held a map each (bench/RESULTS.md, "Memory of the steps").
  std::map<std::pair<std::vector<int64_t>, std::vector<int64_t>>, Attributes> backward_attributes;
  auto shared_backward_attributes = [&](std::vector<int64_t> grad_input_output,
                                        std::vector<int64_t> grad_of) {
    auto [it, added] = backward_attributes.try_emplace({grad_input_output, grad_of});
    if (added) {
      it->second.Set("grad_input_output", std::move(grad_input_output));
      it->second.Set("grad_of", std::move(grad_of));
    }
    return it->second;
  };

  // Gradient contributions, keyed by (tensor, consuming forward op).
  std::map<std::pair<TensorId, OpId>, std::vector<TensorId>> grads;

  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const OpId forward_id = *it;
    const Op forward = graph.op(forward_id);  // a copy: AddTensor/AddOp may reallocate

    Op backward;
    backward.name = forward.name + ".backward";
    backward.type = op_types::kBackward;
    backward.phase = Phase::kBackward;
    backward.forward_op = forward_id;
    std::vector<int64_t> grad_input_output;
    for (size_t k = 0; k < forward.outputs.size(); ++k) {
      TensorId out = forward.outputs[k];
      for (OpId consumer : graph.tensor(out).consumers) {
        auto found = grads.find({out, consumer});
        if (found == grads.end()) continue;
        for (TensorId grad : found->second) {
          backward.inputs.push_back(grad);
          grad_input_output.push_back(static_cast<int64_t>(k));
        }
      }
    }
    if (!is_loss[static_cast<size_t>(forward_id)] && backward.inputs.empty())
      continue;  // no path to the loss

    std::vector<int64_t> grad_of;
    for (size_t i = 0; i < forward.inputs.size(); ++i) {
      TensorId in = forward.inputs[i];
      if (!requires_grad[static_cast<size_t>(in)]) continue;
      auto& slot = grads[{in, forward_id}];
      std::string name = fmt::format("{}.grad@{}", graph.tensor(in).name, forward.name);
      if (!slot.empty()) name += fmt::format("#{}", slot.size());
      Tensor grad{.name = name,
                  .shape = graph.tensor(in).shape,
                  .dtype = DType::kFloat32,
                  .kind = TensorKind::kGradient};
      TensorId grad_id = graph.AddTensor(std::move(grad));
      slot.push_back(grad_id);
      backward.outputs.push_back(grad_id);
      grad_of.push_back(static_cast<int64_t>(i));
    }
    if (backward.outputs.empty()) continue;  // nothing upstream needs a gradient
    // The backward op also reads what its forward op saved: its inputs (labels included).
    for (TensorId in : forward.inputs) backward.inputs.push_back(in);
    backward.attrs = shared_backward_attributes(std::move(grad_input_output), std::move(grad_of));
    graph.AddOp(std::move(backward));
  }

  // A parameter's gradient contributions (one per consuming op; an unrolled RNN has one per time
  // step).
  const std::vector<TensorId> parameters = graph.Parameters();
  auto contributions = [&](TensorId param) {
    std::vector<TensorId> found_grads;
    for (OpId consumer : graph.tensor(param).consumers) {
      auto found = grads.find({param, consumer});
      if (found == grads.end()) continue;
      found_grads.insert(found_grads.end(), found->second.begin(), found->second.end());
    }
    if (found_grads.empty()) {
      throw GraphError(fmt::format("parameter '{}' does not reach the loss '{}'",
                                   graph.tensor(param).name, graph.op(loss).name));
    }
    return found_grads;
  };
  // Tied parameters (replicas) exchange one gradient each, summed where it was computed (an
  // AddN on the parameter's device), not every contribution: that is what an all-reduce sends.
  std::map<TensorId, TensorId> summed;
  if (tied_with) {
    for (TensorId param : parameters) {
      std::vector<TensorId> own = contributions(param);
      if (own.size() == 1) {
        summed[param] = own[0];
        continue;
      }
      // Copies: AddTensor may move the graph's tensors.
      const std::string name = graph.tensor(param).name;
      const Shape shape = graph.tensor(param).shape;
      TensorId sum = graph.AddTensor(Tensor{.name = name + ".grad",
                                            .shape = shape,
                                            .dtype = DType::kFloat32,
                                            .kind = TensorKind::kGradient});
      Op add{.name = name + std::string(kReplicaGradientSum),
             .type = op_types::kAddN,
             .phase = Phase::kBackward,
             .inputs = own,
             .outputs = {sum},
             .forward_op = OwnerOf(graph, param)};
      graph.AddOp(std::move(add));
      summed[param] = sum;
    }
  }

  // Tied parameters: their replicas' gradients are all-reduced in buckets (ring order: tensor
  // id, which is replica order for data_parallel.h's graphs).
  std::map<TensorId, TensorId> reduced;
  if (tied_with) {
    std::vector<std::vector<TensorId>> rings;
    std::map<TensorId, bool> seen;
    for (TensorId param : parameters) {
      if (seen[param]) continue;
      std::vector<TensorId> ring = tied_with(param);
      ring.push_back(param);
      std::sort(ring.begin(), ring.end());
      for (TensorId member : ring) seen[member] = true;
      rings.push_back(std::move(ring));
    }
    reduced = BucketedAllReduce(graph, std::move(rings), summed, all_reduce.bucket_bytes);
  }

  for (TensorId param : parameters) {
    Op update;
    update.name = graph.tensor(param).name + ".update";
    update.type = op_types::kSgdUpdate;
    update.phase = Phase::kUpdate;
    update.forward_op = OwnerOf(graph, param);
    update.inputs.push_back(param);
    if (tied_with) {
      update.inputs.push_back(reduced.at(param));
    } else {
      for (TensorId grad : contributions(param)) update.inputs.push_back(grad);
    }
    update.attrs.Set("lr", learning_rate);
    graph.AddOp(std::move(update));
  }
}

}  // namespace placer::graph
