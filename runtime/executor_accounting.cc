#include "runtime/executor_accounting.h"

#include <fmt/format.h>

#include <algorithm>

#include "graph/placement.h"

namespace placer::runtime {

StepAccounting::StepAccounting(const graph::DeviceSet& devices)
    : devices_(devices),
      num_devices_(static_cast<int>(devices.size())),
      busy_(devices.size(), 0),
      memory_now_(std::make_unique<std::atomic<int64_t>[]>(devices.size())),
      memory_peak_(std::make_unique<std::atomic<int64_t>[]>(devices.size())),
      channels_(static_cast<size_t>((num_devices_ + 1) * num_devices_)),
      trace_per_device_(devices.size()) {}

void StepAccounting::BeginStep(const std::vector<int64_t>& resident_bytes) {
  for (size_t d = 0; d < devices_.size(); ++d) {
    memory_now_[d] = resident_bytes[d];
    memory_peak_[d] = resident_bytes[d];
  }
  std::fill(channels_.begin(), channels_.end(), Channel{});
  for (auto& events : trace_per_device_) events.clear();
}

void StepAccounting::Allocate(int device, int64_t bytes) {
  if (device < 0) return;
  int64_t now = memory_now_[static_cast<size_t>(device)] += bytes;
  std::atomic<int64_t>& peak = memory_peak_[static_cast<size_t>(device)];
  int64_t seen = peak.load();
  while (seen < now && !peak.compare_exchange_weak(seen, now)) {
  }
  const graph::Device& dev = devices_[static_cast<size_t>(device)];
  if (dev.memory_capacity > 0 && now > dev.memory_capacity) {
    throw StepFailure(
        fmt::format("out of memory on {}: the step needs at least {} bytes, the "
                    "capacity is {} bytes",
                    dev.name, now, dev.memory_capacity));
  }
}

void StepAccounting::Release(int device, int64_t bytes) {
  if (device >= 0) memory_now_[static_cast<size_t>(device)] -= bytes;
}

void StepAccounting::RecordCopy(int from, int to, int64_t bytes, double seconds) {
  Channel& channel = channels_[ChannelIndex(from, to)];
  channel.bytes += bytes;
  channel.count += 1;
  channel.seconds += seconds;
}

void StepAccounting::Report(const std::vector<bool>& local, StepResult& result) const {
  for (int d = 0; d < num_devices_; ++d) {
    if (!local[static_cast<size_t>(d)]) continue;
    result.devices.push_back({devices_[static_cast<size_t>(d)].name, busy_[static_cast<size_t>(d)],
                              memory_peak_[static_cast<size_t>(d)].load()});
  }
  for (int from = graph::kHostDevice; from < num_devices_; ++from) {
    for (int to = 0; to < num_devices_; ++to) {
      const Channel& c = channels_[ChannelIndex(from, to)];
      if (c.count == 0) continue;
      result.transfers.push_back(
          {from == graph::kHostDevice ? "host" : devices_[static_cast<size_t>(from)].name,
           devices_[static_cast<size_t>(to)].name, c.bytes, c.count, c.seconds});
    }
  }
  for (const auto& events : trace_per_device_) {
    result.trace.insert(result.trace.end(), events.begin(), events.end());
  }
}

}  // namespace placer::runtime
