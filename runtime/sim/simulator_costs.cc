// The simulator's cost tables, asked of the cost model once per graph and devices: every op's
// time on every device, a transfer's time per distinct tensor size and channel, the receive cost
// per byte and the contention factors.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/autocast.h"
#include "graph/training_step.h"
#include "runtime/sim/simulator.h"

namespace placer::sim {

using graph::OpId;
using graph::TensorId;

namespace {

bool IsValidCost(double seconds) { return seconds >= 0 && std::isfinite(seconds); }

[[noreturn]] void ThrowInvalidCost(double seconds, const std::string& what) {
  throw std::invalid_argument(
      fmt::format("the cost model gives {} seconds for {}: costs must be non-negative and finite",
                  seconds, what));
}

}  // namespace

void Simulator::TabulateCosts(const CostModel& cost_model) {
  const graph::Graph& graph = graph_;
  op_seconds_.resize(static_cast<size_t>(num_ops_) * static_cast<size_t>(num_devices_));
  for (OpId id = 0; id < num_ops_; ++id) {
    for (int d = 0; d < num_devices_; ++d) {
      const double seconds = cost_model.OpSeconds(graph, id, devices_[d]);
      if (!IsValidCost(seconds)) {
        ThrowInvalidCost(seconds,
                         fmt::format("op '{}' on {}", graph.op(id).name, device_names_[d]));
      }
      op_seconds_[static_cast<size_t>(id) * num_devices_ + d] = seconds;
    }
  }

  // Under automatic mixed precision the values autocast keeps in 16 bits take and move half
  // their fp32 bytes.
  const double scale = cost_model.ActivationByteScale();
  if (!(scale > 0) || scale > 1) {
    throw std::invalid_argument(
        fmt::format("the cost model's activation byte scale must be in (0, 1], not {}", scale));
  }
  stored_bytes_.resize(static_cast<size_t>(num_tensors_));
  const std::vector<bool> half =
      scale < 1 ? graph::AutocastHalfWidth(graph) : std::vector<bool>(stored_bytes_.size(), false);
  for (TensorId t = 0; t < num_tensors_; ++t) {
    const int64_t bytes = step_.bytes(t);
    stored_bytes_[static_cast<size_t>(t)] =
        half[static_cast<size_t>(t)]
            ? static_cast<int64_t>(std::llround(static_cast<double>(bytes) * scale))
            : bytes;
  }

  // Transfer times depend on the size, and on whether the copy is a ring collective's hop
  // (graph::IsCollectiveHop: produced and read by ops of one), only; a graph has few of both.
  std::vector<bool> hop_op(static_cast<size_t>(num_ops_));
  for (OpId id = 0; id < num_ops_; ++id)
    hop_op[static_cast<size_t>(id)] = graph::IsCollectiveHop(graph, id);
  std::map<std::pair<int64_t, bool>, int> class_of;
  std::vector<std::pair<int64_t, bool>> classes;
  size_class_.resize(static_cast<size_t>(num_tensors_));
  for (TensorId t = 0; t < num_tensors_; ++t) {
    const OpId producer = graph.tensor(t).producer;
    const bool hop = producer != graph::kNoOp && hop_op[static_cast<size_t>(producer)] &&
                     std::any_of(step_.consumers(t).begin(), step_.consumers(t).end(),
                                 [&](OpId c) { return hop_op[static_cast<size_t>(c)]; });
    const std::pair<int64_t, bool> key{stored_bytes_[static_cast<size_t>(t)], hop};
    auto [it, inserted] = class_of.try_emplace(key, static_cast<int>(classes.size()));
    if (inserted) classes.push_back(key);
    size_class_[t] = it->second;
  }
  transfer_seconds_.assign(classes.size() * static_cast<size_t>(num_channels_), 0.0);
  for (size_t c = 0; c < classes.size(); ++c) {
    const auto [bytes, hop] = classes[c];
    for (int from = kHost; from < num_devices_; ++from) {
      for (int to = 0; to < num_devices_; ++to) {
        if (from == to) continue;
        const double seconds =
            hop && from != kHost
                ? cost_model.CollectiveHopSeconds(bytes, devices_[from], devices_[to])
                : cost_model.TransferSeconds(bytes, from == kHost ? nullptr : &devices_[from],
                                             devices_[to]);
        if (!IsValidCost(seconds)) {
          ThrowInvalidCost(
              seconds, fmt::format("{} bytes over {}", bytes, channel_lanes_[Channel(from, to)]));
        }
        transfer_seconds_[c * num_channels_ + Channel(from, to)] = seconds;
      }
    }
  }
  receive_seconds_per_byte_.assign(static_cast<size_t>(num_channels_), 0.0);
  for (int from = 0; from < num_devices_; ++from) {
    for (int to = 0; to < num_devices_; ++to) {
      if (from == to) continue;
      const double seconds = cost_model.ReceiveSecondsPerByte(devices_[from], devices_[to]);
      if (!IsValidCost(seconds)) {
        ThrowInvalidCost(seconds, fmt::format("the receive cost per byte over {}",
                                              channel_lanes_[Channel(from, to)]));
      }
      receive_seconds_per_byte_[Channel(from, to)] = seconds;
      any_receive_cost_ = any_receive_cost_ || seconds > 0;
    }
  }
  const size_t stride = static_cast<size_t>(num_devices_) + 1;
  contention_.assign(static_cast<size_t>(num_devices_) * stride, 1.0);
  for (int d = 0; d < num_devices_; ++d) {
    kind_of_.push_back(is_cuda_[d]);
    const auto same_kind =
        static_cast<int>(std::count_if(devices_.begin(), devices_.end(),
                                       [&](const auto& e) { return e.type == devices_[d].type; }));
    for (int busy = 2; busy <= same_kind; ++busy) {
      const double factor = cost_model.ContentionFactor(devices_[d], busy);
      if (!IsValidCost(factor) || factor <= 0) {
        ThrowInvalidCost(factor, fmt::format("the contention factor of {} with {} devices of its "
                                             "kind busy",
                                             device_names_[d], busy));
      }
      contention_[d * stride + busy] = factor;
      any_contention_ = any_contention_ || factor != 1;
    }
  }
}

}  // namespace placer::sim
