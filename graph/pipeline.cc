#include "graph/pipeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <tuple>

#include "graph/micro_batches.h"
#include "graph/step_names.h"

namespace placer::graph {

PipelineOrder::PipelineOrder(const Graph& graph, const Placement& placement,
                             const std::vector<int>& device_of_op)
    : schedule_(placement.schedule),
      micro_batches_(placement.micro_batches),
      micro_batch_(MicroBatchOfOps(graph)) {
  const int num_devices = static_cast<int>(placement.devices.size());
  const std::vector<OpId> order = graph.TopologicalOrder();
  std::vector<int> rank(order.size());
  for (size_t i = 0; i < order.size(); ++i)
    rank[static_cast<size_t>(order[i])] = static_cast<int>(i);
  phase_.resize(static_cast<size_t>(graph.num_ops()));
  forward_op_.resize(static_cast<size_t>(graph.num_ops()));
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    phase_[static_cast<size_t>(id)] = graph.op(id).phase;
    forward_op_[static_cast<size_t>(id)] = graph.op(id).forward_op;
  }
  for (int k : micro_batch_) {
    if (k >= micro_batches_) {
      throw GraphError(fmt::format("the graph has micro-batch {}, the placement says {} in all", k,
                                   micro_batches_));
    }
  }

  // Stages, by each device's earliest forward op; in replicated pipelines each replica has its
  // own stages, and a device that several replicas use admits as few micro-batches as the
  // tightest of its stages allows.
  std::vector<int> replica_of_op(static_cast<size_t>(graph.num_ops()), 0);
  int replicas = 1;
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    if (!IsForward(id)) continue;
    const int r = ParseStepName(graph.op(id).name).replica.value_or(0);
    replica_of_op[static_cast<size_t>(id)] = r;
    replicas = std::max(replicas, r + 1);
  }
  std::vector<std::vector<int>> first(
      static_cast<size_t>(replicas),
      std::vector<int>(static_cast<size_t>(num_devices), std::numeric_limits<int>::max()));
  forward_ops_.assign(static_cast<size_t>(num_devices), 0);
  backward_ops_.assign(static_cast<size_t>(num_devices),
                       std::vector<int>(static_cast<size_t>(micro_batches_), 0));
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const auto d = static_cast<size_t>(device_of_op[static_cast<size_t>(id)]);
    const int k = micro_batch_[static_cast<size_t>(id)];
    if (IsForward(id)) {
      int& earliest = first[static_cast<size_t>(replica_of_op[static_cast<size_t>(id)])][d];
      earliest = std::min(earliest, rank[static_cast<size_t>(id)]);
      ++forward_ops_[d];
    } else if (phase_[static_cast<size_t>(id)] == Phase::kBackward && k >= 0) {
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

  // Priorities: (kind, micro-batch, topological rank), kind by the schedule; updates last.
  auto kind = [&](OpId id) {
    const Phase phase = phase_[static_cast<size_t>(id)];
    if (phase == Phase::kUpdate) return 2;
    const bool forward_first = schedule_ == PipelineSchedule::kGPipe;
    return (phase == Phase::kForward) == forward_first ? 0 : 1;
  };
  std::vector<OpId> by_priority(order);
  std::stable_sort(by_priority.begin(), by_priority.end(), [&](OpId a, OpId b) {
    return std::tuple(kind(a), micro_batch_[static_cast<size_t>(a)], rank[static_cast<size_t>(a)]) <
           std::tuple(kind(b), micro_batch_[static_cast<size_t>(b)], rank[static_cast<size_t>(b)]);
  });
  priority_.assign(static_cast<size_t>(graph.num_ops()), 0);
  for (size_t i = 0; i < by_priority.size(); ++i) {
    priority_[static_cast<size_t>(by_priority[i])] = static_cast<int>(i);
  }
}

PipelineOrder::DeviceState PipelineOrder::Start(int device) const {
  return {.next_to_admit = 0,
          .backward_left = backward_ops_[static_cast<size_t>(device)],
          .forwards_left = forward_ops_[static_cast<size_t>(device)],
          .forward_done = std::vector<uint8_t>(phase_.size(), 0)};
}

bool PipelineOrder::MayStart(const DeviceState& state, int device, OpId op) const {
  const Phase phase = phase_[static_cast<size_t>(op)];
  const OpId forward = forward_op_[static_cast<size_t>(op)];
  if (phase == Phase::kBackward && forward != kNoOp &&
      !state.forward_done[static_cast<size_t>(forward)]) {
    return false;
  }
  if (schedule_ == PipelineSchedule::kGPipe) {
    return phase != Phase::kBackward || state.forwards_left == 0;
  }
  if (phase != Phase::kForward) return true;
  const int k = micro_batch_[static_cast<size_t>(op)];
  if (k < state.next_to_admit) return true;   // admitted already
  if (k > state.next_to_admit) return false;  // micro-batches are admitted in order
  int in_flight = 0;
  for (int j = 0; j < state.next_to_admit; ++j) {
    if (state.backward_left[static_cast<size_t>(j)] > 0) ++in_flight;
  }
  return in_flight < in_flight_limit_[static_cast<size_t>(device)];
}

void PipelineOrder::Started(DeviceState& state, OpId op) const {
  if (!IsForward(op)) return;
  const int k = micro_batch_[static_cast<size_t>(op)];
  if (k == state.next_to_admit) ++state.next_to_admit;
}

void PipelineOrder::Finished(DeviceState& state, OpId op) const {
  const Phase phase = phase_[static_cast<size_t>(op)];
  if (phase == Phase::kForward) {
    --state.forwards_left;
    state.forward_done[static_cast<size_t>(op)] = 1;
  } else if (phase == Phase::kBackward && micro_batch_[static_cast<size_t>(op)] >= 0) {
    --state.backward_left[static_cast<size_t>(micro_batch_[static_cast<size_t>(op)])];
  }
}

}  // namespace placer::graph
