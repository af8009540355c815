// The devices of this machine: which are present, and the configured ones checked against them.
// Torch-free header (the CUDA queries stay in device.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>

#include "graph/device.h"

namespace placer::runtime {

int NumCudaDevicesPresent();  // 0 on a machine without a usable GPU

// `auto`: every CUDA GPU, then CPU workers (one 1-thread worker per core when there is no GPU,
// one worker with every core otherwise). Capacities: CUDA's total memory; for a CPU worker the
// machine's physical memory divided among the workers.
graph::DeviceSet DetectDevices();

// One device a user asked for.
struct DeviceRequest {
  std::string name;  // a device name (graph::ParseDeviceName accepts it)
  int threads = 1;
  std::optional<int64_t> memory_bytes;  // the capacity to use instead of the machine's
  // An absent GPU's capacity without memory_bytes: its kind's (an H200's 141 GB by default).
  int64_t absent_gpu_memory_bytes = int64_t{141} * 1000 * 1000 * 1000;
};

// A requested device this machine cannot give; index() is its position in the request.
class DeviceUnavailable : public std::runtime_error {
 public:
  DeviceUnavailable(size_t index, const std::string& message)
      : std::runtime_error(message), index_(index) {}
  size_t index() const { return index_; }

 private:
  size_t index_;
};

// The requested devices, with their capacities: CUDA's total memory, for a CPU worker the
// machine's physical memory divided among the CPU workers asked for, or the request's own. A CUDA
// device that is not present throws DeviceUnavailable, unless `allow_absent_gpus` (a simulator may
// place on clusters larger than the machine: an absent GPU then gets the requested memory, or its
// absent_gpu_memory_bytes).
graph::DeviceSet ResolveDevices(std::span<const DeviceRequest> requests, bool allow_absent_gpus);

}  // namespace placer::runtime
