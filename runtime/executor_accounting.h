// What a step of the executor measures: each device's busy time and memory (in use and at its
// peak), the copies over each channel, and the trace. Reset at each step's start; each device's
// entries are written by its own worker, except memory, which senders' copies also allocate (so it
// is atomic), and a channel's, written by the one worker that issues its copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "graph/device.h"
#include "graph/evaluator.h"
#include "runtime/executor.h"

namespace placer::runtime {

class StepAccounting {
 public:
  explicit StepAccounting(const graph::DeviceSet& devices);

  // A new step: each device holds `resident_bytes` (its parameters), nothing else is counted.
  void BeginStep(const std::vector<int64_t>& resident_bytes);

  // Counts `bytes` more in use on `device` (nothing for host memory, device < 0). Throws
  // StepFailure when that exceeds the device's memory_capacity, as an allocation would fail.
  void Allocate(int device, int64_t bytes);
  void Release(int device, int64_t bytes);

  // A copy of `bytes` from `from` (a device or graph::kHostDevice) to `to`, `seconds` long.
  void RecordCopy(int from, int to, int64_t bytes, double seconds);
  void SetBusy(int device, double seconds) { busy_[static_cast<size_t>(device)] = seconds; }
  // The trace events of the lane kept by `device`'s worker.
  std::vector<graph::TraceEvent>& Trace(int device) {
    return trace_per_device_[static_cast<size_t>(device)];
  }

  // Fills `result`'s devices (those `local` marks), transfers (host first, then by (from, to))
  // and trace.
  void Report(const std::vector<bool>& local, StepResult& result) const;

 private:
  struct Channel {
    int64_t bytes = 0;
    int count = 0;
    double seconds = 0;
  };
  size_t ChannelIndex(int from, int to) const {
    return static_cast<size_t>((from + 1) * num_devices_ + to);
  }

  const graph::DeviceSet& devices_;
  int num_devices_;
  std::vector<double> busy_;
  std::unique_ptr<std::atomic<int64_t>[]> memory_now_, memory_peak_;
  std::vector<Channel> channels_;  // [(from + 1) * devices + to], from may be kHostDevice
  std::vector<std::vector<graph::TraceEvent>> trace_per_device_;
};

}  // namespace placer::runtime
