#include "graph/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "graph/micro_batches.h"
#include "graph/step_names.h"

namespace placer::graph {

PipelineGraph::PipelineGraph(const Graph& graph) : micro_batch_(MicroBatchOfOps(graph)) {
  const auto num_ops = static_cast<size_t>(graph.num_ops());
  const std::vector<OpId> order = graph.TopologicalOrder();
  rank_.resize(num_ops);
  for (size_t i = 0; i < order.size(); ++i)
    rank_[static_cast<size_t>(order[i])] = static_cast<int>(i);
  phase_.resize(num_ops);
  forward_op_.resize(num_ops);
  replica_.assign(num_ops, 0);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const auto i = static_cast<size_t>(id);
    phase_[i] = graph.op(id).phase;
    forward_op_[i] = graph.op(id).forward_op;
    micro_batches_ = std::max(micro_batches_, micro_batch_[i] + 1);
    if (phase_[i] != Phase::kForward) continue;
    replica_[i] = ParseStepName(graph.op(id).name).replica.value_or(0);
    replicas_ = std::max(replicas_, replica_[i] + 1);
  }
  // Priorities: (kind, micro-batch, topological rank), kind by the schedule; updates last.
  for (const PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
    auto kind = [&](OpId id) {
      const Phase phase = phase_[static_cast<size_t>(id)];
      if (phase == Phase::kUpdate) return 2;
      const bool forward_first = schedule == PipelineSchedule::kGPipe;
      return (phase == Phase::kForward) == forward_first ? 0 : 1;
    };
    std::vector<OpId> by_priority(order);
    std::stable_sort(by_priority.begin(), by_priority.end(), [&](OpId a, OpId b) {
      return std::tuple(kind(a), micro_batch_[static_cast<size_t>(a)],
                        rank_[static_cast<size_t>(a)]) <
             std::tuple(kind(b), micro_batch_[static_cast<size_t>(b)],
                        rank_[static_cast<size_t>(b)]);
    });
    std::vector<int>& priority =
        schedule == PipelineSchedule::kGPipe ? gpipe_priority_ : one_f_one_b_priority_;
    priority.assign(num_ops, 0);
    for (size_t i = 0; i < by_priority.size(); ++i) {
      priority[static_cast<size_t>(by_priority[i])] = static_cast<int>(i);
    }
    (schedule == PipelineSchedule::kGPipe ? gpipe_order_ : one_f_one_b_order_) =
        std::move(by_priority);
  }
}

PipelineOrder::PipelineOrder(const Graph& graph, const Placement& placement,
                             const std::vector<int>& device_of_op)
    : PipelineOrder(std::make_unique<const PipelineGraph>(graph), placement, device_of_op) {}

PipelineOrder::PipelineOrder(const PipelineGraph& graph, const Placement& placement,
                             const std::vector<int>& device_of_op)
    : PipelineOrder(nullptr, placement, device_of_op, &graph) {}

PipelineOrder::PipelineOrder(std::unique_ptr<const PipelineGraph> owned, const Placement& placement,
                             const std::vector<int>& device_of_op, const PipelineGraph* shared)
    : owned_(std::move(owned)),
      graph_(owned_ ? owned_.get() : shared),
      schedule_(placement.schedule),
      micro_batches_(placement.micro_batches) {
  const PipelineGraph& g = *graph_;
  const int num_devices = static_cast<int>(placement.devices.size());
  if (g.micro_batches() > micro_batches_) {
    throw GraphError(fmt::format("the graph has micro-batch {}, the placement says {} in all",
                                 g.micro_batches() - 1, micro_batches_));
  }
  const std::vector<int>& micro_batch = g.micro_batch_of_op();

  // Stages, by each device's earliest forward op; in replicated pipelines each replica has its
  // own stages, and a device that several replicas use admits as few micro-batches as the
  // tightest of its stages allows.
  std::vector<std::vector<int>> first(
      static_cast<size_t>(g.replicas()),
      std::vector<int>(static_cast<size_t>(num_devices), std::numeric_limits<int>::max()));
  forward_ops_.assign(static_cast<size_t>(num_devices), 0);
  backward_ops_.assign(static_cast<size_t>(num_devices),
                       std::vector<int>(static_cast<size_t>(micro_batches_), 0));
  for (OpId id = 0; id < g.num_ops(); ++id) {
    const auto d = static_cast<size_t>(device_of_op[static_cast<size_t>(id)]);
    const int k = micro_batch[static_cast<size_t>(id)];
    if (IsForward(id)) {
      int& earliest = first[static_cast<size_t>(g.replica(id))][d];
      earliest = std::min(earliest, g.rank(id));
      ++forward_ops_[d];
    } else if (g.phase(id) == Phase::kBackward && k >= 0) {
      ++backward_ops_[d][static_cast<size_t>(k)];
    }
  }

  stage_of_device_.assign(static_cast<size_t>(num_devices), -1);
  in_flight_limit_.assign(static_cast<size_t>(num_devices), micro_batches_);
  for (const std::vector<int>& earliest : first) {
    std::vector<int> by_first;
    for (int d = 0; d < num_devices; ++d) {
      if (earliest[static_cast<size_t>(d)] != std::numeric_limits<int>::max())
        by_first.push_back(d);
    }
    std::stable_sort(by_first.begin(), by_first.end(), [&](int a, int b) {
      return earliest[static_cast<size_t>(a)] < earliest[static_cast<size_t>(b)];
    });
    const int stages = static_cast<int>(by_first.size());
    stages_ = std::max(stages_, stages);
    for (int stage = 0; stage < stages; ++stage) {
      const auto d = static_cast<size_t>(by_first[static_cast<size_t>(stage)]);
      if (stage_of_device_[d] < 0) stage_of_device_[d] = stage;
      if (schedule_ == PipelineSchedule::kOneFOneB) {
        in_flight_limit_[d] = std::min(in_flight_limit_[d], stages - stage);
      }
    }
  }
}

PipelineOrder::DeviceState PipelineOrder::Start(int device) const {
  return {.next_to_admit = 0,
          .backward_left = backward_ops_[static_cast<size_t>(device)],
          .forwards_left = forward_ops_[static_cast<size_t>(device)],
          .forward_done = std::vector<uint8_t>(static_cast<size_t>(graph_->num_ops()), 0)};
}

PipelineOrder::Hold PipelineOrder::HoldOf(const DeviceState& state, int device, OpId op) const {
  const Phase phase = graph_->phase(op);
  const OpId forward = graph_->forward_op(op);
  if (phase == Phase::kBackward && forward != kNoOp &&
      !state.forward_done[static_cast<size_t>(forward)]) {
    return Hold::kForward;
  }
  if (schedule_ == PipelineSchedule::kGPipe) {
    return phase != Phase::kBackward || state.forwards_left == 0 ? Hold::kNone : Hold::kState;
  }
  if (phase != Phase::kForward) return Hold::kNone;
  const int k = graph_->micro_batch_of_op()[static_cast<size_t>(op)];
  if (k < state.next_to_admit) return Hold::kNone;   // admitted already
  if (k > state.next_to_admit) return Hold::kState;  // micro-batches are admitted in order
  int in_flight = 0;
  for (int j = 0; j < state.next_to_admit; ++j) {
    if (state.backward_left[static_cast<size_t>(j)] > 0) ++in_flight;
  }
  return in_flight < in_flight_limit_[static_cast<size_t>(device)] ? Hold::kNone : Hold::kState;
}

bool PipelineOrder::Started(DeviceState& state, OpId op) const {
  if (!IsForward(op)) return false;
  const int k = graph_->micro_batch_of_op()[static_cast<size_t>(op)];
  if (k != state.next_to_admit) return false;
  ++state.next_to_admit;
  return true;
}

bool PipelineOrder::Finished(DeviceState& state, OpId op) const {
  const Phase phase = graph_->phase(op);
  const int k = graph_->micro_batch_of_op()[static_cast<size_t>(op)];
  if (phase == Phase::kForward) {
    state.forward_done[static_cast<size_t>(op)] = 1;
    return --state.forwards_left == 0;
  }
  if (phase == Phase::kBackward && k >= 0) {
    return --state.backward_left[static_cast<size_t>(k)] == 0;
  }
  return false;
}

}  // namespace placer::graph
