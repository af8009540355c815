#include "graph/tensor_parallel.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "graph/ops.h"
#include "graph/ring_all_reduce.h"
#include "graph/shard_rules.h"
#include "graph/shared_values.h"
#include "graph/step_names.h"
#include "graph/training_step.h"

namespace placer::graph {

std::string ShardName(int shard, const std::string& name) {
  return fmt::format("tp{}/{}", shard, name);
}

namespace {

using shard_rules::IsLinearLayer;
using shard_rules::IsReplicable;
using shard_rules::kReplicated;
using shard_rules::kWhole;
using shard_rules::ShardPlan;

// Row-major values of `shape` cut along `axis` as `slice` says (its `size / parts` entries from
// `begin` of each of its `parts` blocks).
std::vector<float> SliceValues(const std::vector<float>& values, const Shape& shape,
                               const ParameterSlice& slice) {
  const auto axis = static_cast<size_t>(slice.axis);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= shape[d];
  for (size_t d = axis + 1; d < shape.size(); ++d) inner *= shape[d];
  const int64_t extent = shape[axis], block = extent / slice.parts;
  const int64_t piece = slice.size / slice.parts;
  std::vector<float> out;
  out.reserve(static_cast<size_t>(outer * slice.size * inner));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t b = 0; b < slice.parts; ++b) {
      const auto first = values.begin() + (o * extent + b * block + slice.begin) * inner;
      out.insert(out.end(), first, first + piece * inner);
    }
  }
  return out;
}

// The rewrite: walks the model in topological order, asks the rules how each op runs on the
// shards, and emits the shards' ops, the pieces and gathers between them and the ring
// all-reduces of partial sums.
class Sharder {
 public:
  Sharder(const Graph& model, int ways)
      : model_(model),
        ways_(ways),
        axis_(static_cast<size_t>(model.num_tensors()), kWhole),
        parts_(static_cast<size_t>(model.num_tensors()), 1),
        pieces_(static_cast<size_t>(model.num_tensors())),
        copies_(static_cast<size_t>(model.num_tensors())),
        whole_(static_cast<size_t>(model.num_tensors()), -1),
        feeds_start_(static_cast<size_t>(model.num_ops()), false),
        rules_(model, ways, axis_, parts_) {
    result_.ways = ways;
  }

  TensorParallelGraph Run(const std::set<OpId>& starts) {
    const std::vector<OpId> order = model_.TopologicalOrder();
    // Which ops' outputs reach a start through ops the shards may repeat: their sums are
    // all-reduced (every shard gets the sum) and what follows is repeated per shard up to the
    // start; other sums are reduced onto one device.
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      for (TensorId out : model_.op(*it).outputs) {
        for (OpId c : T(out).consumers) {
          if (starts.count(c) ||
              (IsReplicable(model_.op(c)) && feeds_start_[static_cast<size_t>(c)])) {
            feeds_start_[static_cast<size_t>(*it)] = true;
          }
        }
      }
    }
    for (OpId id : order) {
      const Op& op = model_.op(id);
      if (op.phase != Phase::kForward) {
        throw GraphError(
            fmt::format("tensor parallelism rewrites a forward graph; op '{}' is a {} op", op.name,
                        ToString(op.phase)));
      }
      std::optional<ShardPlan> plan;
      if (starts.count(id)) {
        plan = rules_.ColumnStart(op);
      } else if (AnySplit(op)) {
        plan = rules_.Follow(op);
      } else if (AnyReplicated(op) && IsReplicable(op) && feeds_start_[static_cast<size_t>(id)]) {
        plan = rules_.PlanFor(op, std::vector<int>(op.inputs.size(), kWhole), kReplicated);
      }
      if (plan && rules_.CanCut(*plan)) {
        EmitShards(id, *plan);
      } else {
        EmitWhole(id);
      }
    }
    for (auto& [source, copies] : parameter_copies_) {
      result_.replicated_parameters.push_back(std::move(copies));
    }
    result_.forward.Validate();
    return std::move(result_);
  }

 private:
  const Tensor& T(TensorId t) const { return model_.tensor(t); }
  int64_t Extent(TensorId t, int axis) const { return T(t).shape[static_cast<size_t>(axis)]; }
  bool AnySplit(const Op& op) const {
    return std::any_of(op.inputs.begin(), op.inputs.end(),
                       [&](TensorId t) { return axis_[static_cast<size_t>(t)] != kWhole; });
  }
  int SplitOf(TensorId t) const { return axis_[static_cast<size_t>(t)]; }
  int PartsOf(TensorId t) const { return parts_[static_cast<size_t>(t)]; }
  bool IsCopied(TensorId t) const { return !copies_[static_cast<size_t>(t)].empty(); }
  bool AnyReplicated(const Op& op) const {
    return std::any_of(op.inputs.begin(), op.inputs.end(), [&](TensorId t) { return IsCopied(t); });
  }

  // ---- emitting the rewritten graph ----

  OpId Add(Op op, const std::vector<std::string>& output_names, int shard, OpId source) {
    const InferredOutputs inferred = InferOutputs(result_.forward, op);
    op.outputs.clear();
    for (size_t k = 0; k < output_names.size(); ++k) {
      Tensor out{.name = output_names[k], .shape = inferred.shapes[k], .dtype = inferred.dtypes[k]};
      op.outputs.push_back(result_.forward.AddTensor(std::move(out)));
    }
    const OpId id = result_.forward.AddOp(std::move(op));
    result_.shard_of_op.push_back(shard);
    result_.source_op.push_back(source);
    return id;
  }

  // The model's tensor whole: copied when nobody produces it, gathered when split.
  TensorId Whole(TensorId t) {
    TensorId& whole = whole_[static_cast<size_t>(t)];
    if (whole != -1) return whole;
    if (IsCopied(t)) return whole = copies_[static_cast<size_t>(t)][0];  // shard 0's copy
    const Tensor& tensor = T(t);
    if (SplitOf(t) == kWhole) {  // an input, a label or a parameter
      Tensor copy = tensor;
      copy.producer = kNoOp;
      copy.consumers.clear();
      return whole = result_.forward.AddTensor(std::move(copy));
    }
    Op gather{.name = tensor.name + "/tp_gather", .type = op_types::kConcat};
    gather.inputs = PartsOf(t) == 1 ? pieces_[static_cast<size_t>(t)] : BlockOrder(t);
    gather.attrs.Set("axis", int64_t{SplitOf(t)});
    ++result_.gathers;
    Add(std::move(gather), {tensor.name}, -1, tensor.producer);
    return whole = result_.forward.TensorByName(tensor.name);
  }

  // The pieces of a split tensor of blocks (shard_rules.h's ShardPlan) in the order that
  // concatenates them whole: each shard's piece cut into its blocks, then block by block, shard
  // by shard.
  std::vector<TensorId> BlockOrder(TensorId t) {
    const Tensor& tensor = T(t);
    const int axis = SplitOf(t), parts = PartsOf(t);
    const int64_t piece = Extent(t, axis) / (ways_ * parts);
    std::vector<std::vector<TensorId>> blocks;  // per shard, per block
    for (int s = 0; s < ways_; ++s) {
      Op split{.name = ShardName(s, tensor.name + "/tp_blocks"),
               .type = op_types::kSplit,
               .inputs = {pieces_[static_cast<size_t>(t)][static_cast<size_t>(s)]}};
      split.attrs.Set("axis", int64_t{axis});
      split.attrs.Set("sizes", std::vector<int64_t>(static_cast<size_t>(parts), piece));
      std::vector<std::string> names;
      for (int b = 0; b < parts; ++b)
        names.push_back(ShardName(s, fmt::format("{}/block{}", tensor.name, b)));
      blocks.push_back(
          result_.forward.op(Add(std::move(split), names, s, tensor.producer)).outputs);
    }
    std::vector<TensorId> order;
    for (int b = 0; b < parts; ++b) {
      for (int s = 0; s < ways_; ++s)
        order.push_back(blocks[static_cast<size_t>(s)][static_cast<size_t>(b)]);
    }
    return order;
  }

  // What shard `shard` reads of the model's tensor `t` whole: its own copy of a repeated tensor or
  // of a parameter only this op reads, or the whole.
  TensorId Local(TensorId t, int shard) {
    if (IsCopied(t)) return copies_[static_cast<size_t>(t)][static_cast<size_t>(shard)];
    if (T(t).kind == TensorKind::kParameter && T(t).consumers.size() == 1) {
      return ParameterCopies(t)[static_cast<size_t>(shard)];
    }
    return Whole(t);
  }

  // The shards' copies of parameter `t` (ReplicatedParameter), made once.
  const std::vector<TensorId>& ParameterCopies(TensorId t) {
    auto [it, inserted] = parameter_copies_.try_emplace(t);
    if (!inserted) return it->second.copies;
    it->second.source = T(t).name;
    for (int s = 0; s < ways_; ++s) {
      Tensor copy = T(t);
      copy.name = ShardName(s, copy.name);
      copy.producer = kNoOp;
      copy.consumers.clear();
      it->second.copies.push_back(result_.forward.AddTensor(std::move(copy)));
    }
    return it->second.copies;
  }

  // The model's tensor cut into `ways` pieces along `axis`, in `parts` blocks (shard_rules.h's
  // ShardPlan): its shards when it is split so; each shard's slice of its own copy; a parameter
  // only `consumer` reads is itself sliced (each shard owns its slice); anything else is
  // scattered by a Split from its whole.
  std::vector<TensorId> Pieces(TensorId t, int axis, OpId consumer, int parts) {
    if (SplitOf(t) == axis && PartsOf(t) == parts) return pieces_[static_cast<size_t>(t)];
    const auto key = std::make_tuple(t, axis, parts);
    if (auto it = cut_.find(key); it != cut_.end()) return it->second;
    const Tensor& tensor = T(t);
    const int64_t size = Extent(t, axis) / ways_;  // a shard's
    const int64_t piece = size / parts;
    std::vector<TensorId> pieces;
    if (IsCopied(t) && parts == 1) {  // a repeated tensor meeting blocks is scattered (below)
      for (int s = 0; s < ways_; ++s) {
        Op slice{.name = ShardName(s, fmt::format("{}/tp_slice{}", tensor.name, axis)),
                 .type = op_types::kSlice,
                 .inputs = {Local(t, s)}};
        slice.attrs.Set("axis", int64_t{axis});
        slice.attrs.Set("start", s * size);
        slice.attrs.Set("end", (s + 1) * size);
        const OpId id =
            Add(std::move(slice), {ShardName(s, fmt::format("{}/slice{}", tensor.name, axis))}, s,
                consumer);
        pieces.push_back(result_.forward.op(id).outputs[0]);
      }
    } else if (tensor.kind == TensorKind::kParameter && SplitOf(t) == kWhole &&
               tensor.consumers == std::vector<OpId>{consumer}) {
      for (int s = 0; s < ways_; ++s) {
        const ParameterSlice cut{.name = ShardName(s, tensor.name),
                                 .source = tensor.name,
                                 .axis = axis,
                                 .begin = s * piece,
                                 .size = size,
                                 .parts = parts};
        Tensor slice = tensor;
        slice.name = cut.name;
        slice.shape[static_cast<size_t>(axis)] = size;
        slice.producer = kNoOp;
        slice.consumers.clear();
        if (tensor.init.kind == Initializer::Kind::kValues) {
          slice.init.values = SharedValues(SliceValues(*tensor.init.values, tensor.shape, cut));
        }
        result_.parameter_slices.push_back(cut);
        pieces.push_back(result_.forward.AddTensor(std::move(slice)));
      }
    } else {
      Op scatter{.name = fmt::format("{}/tp_scatter{}", tensor.name, axis),
                 .type = op_types::kSplit,
                 .inputs = {Whole(t)}};
      scatter.attrs.Set("axis", int64_t{axis});
      scatter.attrs.Set("sizes", std::vector<int64_t>(static_cast<size_t>(ways_ * parts), piece));
      std::vector<std::string> names;
      for (int k = 0; k < ways_ * parts; ++k) {  // block k / ways's piece k % ways
        names.push_back(parts == 1 ? ShardName(k, fmt::format("{}/scatter{}", tensor.name, axis))
                                   : fmt::format("{}/scatter{}/{}", tensor.name, axis, k));
      }
      ++result_.scatters;
      const OpId id = Add(std::move(scatter), names, -1, consumer);
      pieces = result_.forward.op(id).outputs;
      if (parts > 1) {
        std::vector<TensorId> joined;
        for (int s = 0; s < ways_; ++s) {
          std::vector<TensorId> cut;
          for (int b = 0; b < parts; ++b) cut.push_back(pieces[static_cast<size_t>(b * ways_ + s)]);
          joined.push_back(Joined(cut, axis, s, consumer, tensor.name));
        }
        pieces = std::move(joined);
      }
    }
    return cut_[key] = pieces;
  }

  // Shard s's piece of a tensor of blocks: its pieces of the blocks, concatenated.
  TensorId Joined(const std::vector<TensorId>& cut, int axis, int s, OpId consumer,
                  const std::string& tensor) {
    Op join{.name = ShardName(s, fmt::format("{}/tp_join{}", tensor, axis)),
            .type = op_types::kConcat,
            .inputs = cut};
    join.attrs.Set("axis", int64_t{axis});
    const std::string name = ShardName(s, fmt::format("{}/blocks{}", tensor, axis));
    return result_.forward.op(Add(std::move(join), {name}, s, consumer)).outputs[0];
  }

  // A ring all-reduce of the shards' partial sums as forward ops (graph/ring_all_reduce.h's
  // schedule), cut along their longest axis. Its derived backward is the reverse ring:
  // Megatron's backward all-reduce. Returns each shard's sum, named "tp<s>/<op's output><suffix>".
  std::vector<TensorId> AllReduce(const std::vector<TensorId>& partials, const std::string& op_name,
                                  const std::string& suffix, OpId source) {
    const Shape shape = result_.forward.tensor(partials[0]).shape;
    const int axis = static_cast<int>(std::max_element(shape.begin(), shape.end()) - shape.begin());
    const std::string output = T(model_.op(source).outputs[0]).name;
    auto name = [&](size_t m, const std::string& what) {
      return ShardName(static_cast<int>(m), fmt::format("{}/allreduce/{}", op_name, what));
    };
    auto sum_name = [&](size_t m) { return ShardName(static_cast<int>(m), output + suffix); };
    auto add = [&](size_t m, Op op, const std::vector<std::string>& outputs) {
      return result_.forward.op(Add(std::move(op), outputs, static_cast<int>(m), source)).outputs;
    };
    std::vector<TensorId> sums = RingAllReduce(result_.forward, partials, axis, [&](RingOp r) {
      std::vector<std::string> outputs = {name(r.member, r.step)};
      if (r.step == "split") {
        outputs.clear();
        const size_t chunks = r.attrs.GetInts("sizes").size();
        for (size_t j = 0; j < chunks; ++j)
          outputs.push_back(name(r.member, fmt::format("chunk{}", j)));
      } else if (r.step == "concat") {
        outputs = {sum_name(r.member)};
      }
      return add(r.member,
                 Op{.name = name(r.member, r.step),
                    .type = r.type,
                    .inputs = std::move(r.inputs),
                    .attrs = std::move(r.attrs)},
                 outputs);
    });
    // In one chunk there is no concat to name the sum: an identity does.
    for (size_t m = 0; m < sums.size(); ++m) {
      if (result_.forward.tensor(sums[m]).name == sum_name(m)) continue;
      Op identity{.name = name(m, "sum"), .type = op_types::kIdentity, .inputs = {sums[m]}};
      identity.attrs.Set(std::string(kCollectiveHop), int64_t{1});
      sums[m] = add(m, std::move(identity), {sum_name(m)})[0];
    }
    return sums;
  }

  void EmitWhole(OpId id) {
    Op op = model_.op(id);
    for (TensorId& in : op.inputs) in = Whole(in);
    std::vector<std::string> names;
    for (TensorId out : model_.op(id).outputs) names.push_back(T(out).name);
    const OpId added = Add(std::move(op), names, -1, id);
    const std::vector<TensorId>& outputs = result_.forward.op(added).outputs;
    for (size_t k = 0; k < outputs.size(); ++k) {
      whole_[static_cast<size_t>(model_.op(id).outputs[k])] = outputs[k];
    }
  }

  void EmitShards(OpId id, const ShardPlan& plan) {
    const Op& op = model_.op(id);
    const TensorId out = op.outputs[0];
    std::vector<std::vector<TensorId>> inputs(plan.shard_op.inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) {
      const TensorId in = plan.shard_op.inputs[i];
      if (plan.input_axis[i] != kWhole) {
        inputs[i] = Pieces(in, plan.input_axis[i], id, plan.input_parts);
        continue;
      }
      for (int s = 0; s < ways_; ++s) inputs[i].push_back(Local(in, s));
    }
    std::vector<std::vector<TensorId>> outputs(op.outputs.size());  // per output, its shards
    for (int s = 0; s < ways_; ++s) {
      Op copy = plan.shard_op;
      copy.name = ShardName(s, op.name);
      for (size_t i = 0; i < inputs.size(); ++i) copy.inputs[i] = inputs[i][static_cast<size_t>(s)];
      std::vector<std::string> names;
      for (TensorId o : op.outputs) {
        names.push_back(ShardName(s, T(o).name + (plan.partial ? "/tp_partial" : "")));
      }
      const OpId added = Add(std::move(copy), names, s, id);
      for (size_t k = 0; k < outputs.size(); ++k) {
        outputs[k].push_back(result_.forward.op(added).outputs[k]);
      }
    }
    std::vector<TensorId>& shards = outputs[0];
    if (plan.output_axis == kReplicated) {
      copies_[static_cast<size_t>(out)] = std::move(shards);
      return;
    }
    if (!plan.partial) {
      for (size_t k = 0; k < outputs.size(); ++k) {
        const auto o = static_cast<size_t>(op.outputs[k]);
        axis_[o] = plan.output_axis;
        parts_[o] = plan.output_parts;
        pieces_[o] = std::move(outputs[k]);
      }
      return;
    }
    ++result_.partial_sums;
    if (feeds_start_[static_cast<size_t>(id)]) {  // Megatron's all-reduce: a sum on every shard
      ++result_.all_reduces;
      std::vector<TensorId> sums =
          AllReduce(shards, op.name, plan.bias_after_sum ? "/tp_sum" : "", id);
      if (plan.bias_after_sum) {
        for (int s = 0; s < ways_; ++s) {
          Op bias{.name = ShardName(s, op.name + "/tp_bias"),
                  .type = op_types::kAdd,
                  .inputs = {sums[static_cast<size_t>(s)], Local(*plan.bias_after_sum, s)}};
          sums[static_cast<size_t>(s)] =
              result_.forward.op(Add(std::move(bias), {ShardName(s, T(out).name)}, s, id))
                  .outputs[0];
        }
      }
      copies_[static_cast<size_t>(out)] = std::move(sums);
      return;
    }
    // The partial products summed on one device: nothing after them is repeated per shard.
    const std::string sum_name = plan.bias_after_sum ? T(out).name + "/tp_sum" : T(out).name;
    Op sum{.name = plan.bias_after_sum ? op.name + "/tp_sum" : op.name,
           .type = op_types::kAddN,
           .inputs = shards};
    const OpId sum_id = Add(std::move(sum), {sum_name}, -1, id);
    TensorId whole = result_.forward.op(sum_id).outputs[0];
    if (plan.bias_after_sum) {
      Op bias{
          .name = op.name, .type = op_types::kAdd, .inputs = {whole, Whole(*plan.bias_after_sum)}};
      whole = result_.forward.op(Add(std::move(bias), {T(out).name}, -1, id)).outputs[0];
    }
    whole_[static_cast<size_t>(out)] = whole;
  }

  const Graph& model_;
  const int ways_;
  TensorParallelGraph result_;
  std::vector<int> axis_;                      // per model tensor: its axis of split, or kWhole
  std::vector<int> parts_;                     // per model tensor split: its blocks (ShardPlan)
  std::vector<std::vector<TensorId>> pieces_;  // per model tensor split: its shards
  std::vector<std::vector<TensorId>> copies_;  // per model tensor repeated: each shard's copy
  std::vector<TensorId> whole_;                // per model tensor: its whole copy, once made
  std::vector<bool> feeds_start_;              // per model op: its output reaches a start
  const shard_rules::SplitRules rules_;        // reads axis_ as it is filled in
  std::map<std::tuple<TensorId, int, int>, std::vector<TensorId>> cut_;  // sliced or scattered
  std::map<TensorId, ReplicatedParameter> parameter_copies_;  // per model parameter copied
};

}  // namespace

TensorParallelGraph ShardTensorParallel(const Graph& forward,
                                        const std::vector<std::string>& column_starts, int ways) {
  if (ways < 2)
    throw GraphError(fmt::format("tensor parallelism needs 2 or more shards, not {}", ways));
  std::set<OpId> starts;
  for (const std::string& name : column_starts) {
    const std::optional<OpId> id = forward.FindOp(name);
    if (!id) throw GraphError(fmt::format("tensor parallelism: no op '{}' in the model", name));
    starts.insert(*id);
  }
  return Sharder(forward, ways).Run(starts);
}

Graph TensorParallelStep(const TensorParallelGraph& split, double learning_rate) {
  Graph step = split.forward;
  std::map<TensorId, const std::vector<TensorId>*> copies_of;
  for (const ReplicatedParameter& p : split.replicated_parameters) {
    for (TensorId copy : p.copies) copies_of[copy] = &p.copies;
  }
  AppendBackwardAndUpdate(step, learning_rate, [&](TensorId param) {
    std::vector<TensorId> others;
    if (const auto it = copies_of.find(param); it != copies_of.end()) {
      for (TensorId copy : *it->second) {
        if (copy != param) others.push_back(copy);
      }
    }
    return others;
  });
  step.Validate();
  return step;
}

std::vector<std::string> MegatronColumnStarts(const Graph& forward, int ways, int64_t max_work) {
  const auto layers =
      static_cast<int64_t>(std::count_if(forward.ops().begin(), forward.ops().end(),
                                         [&](const Op& op) { return IsLinearLayer(forward, op); }));
  if (layers * forward.num_ops() > max_work) {
    throw GraphError(fmt::format(
        "picking Megatron's pairs among {} linear layers of a {}-op forward (one sharding of it "
        "per layer: {} > {}) would take too long",
        layers, forward.num_ops(), layers * forward.num_ops(), max_work));
  }
  // Greedily in topological order: a layer joins when the split of all the starts so far and it
  // still needs no gather; so a row-parallel layer that closes a pair never starts one itself.
  std::vector<std::string> starts;
  std::set<OpId> accepted;
  for (OpId id : forward.TopologicalOrder()) {
    const Op& op = forward.op(id);
    if (!IsLinearLayer(forward, op)) continue;
    if (forward.tensor(op.outputs[0]).shape.back() % ways != 0) continue;
    std::set<OpId> trial = accepted;
    trial.insert(id);
    if (Sharder(forward, ways).Run(trial).gathers == 0) {
      accepted = std::move(trial);
      starts.push_back(op.name);
    }
  }
  return starts;
}

}  // namespace placer::graph
