// The devices a placement can use: CUDA GPUs and CPU workers. Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "placer/config/config.h"

namespace placer::runtime {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  std::string name;  // "cpu:0", "cuda:1"
  DeviceType type = DeviceType::kCpu;
  int index = 0;                // CUDA ordinal, or the CPU worker's number
  int threads = 1;              // intra-op threads of a CPU worker
  int64_t memory_capacity = 0;  // bytes
};

using DeviceSet = std::vector<Device>;

std::vector<std::string> DeviceNames(const DeviceSet& devices);
// The process a device belongs to in a placement across processes: k for "w<k>/cpu:0", -1 for a
// name without a process ("cpu:0", the process that runs the placement). Inline: the torch-free
// simulator reads it too (it puts process k's devices on its host).
inline int DeviceProcess(const std::string& name) {
  const size_t slash = name.find('/');
  if (slash == std::string::npos || slash < 2 || name[0] != 'w') return -1;
  int process = 0;
  for (size_t i = 1; i < slash; ++i) {
    if (name[i] < '0' || name[i] > '9' || process > 1'000'000) return -1;
    process = process * 10 + (name[i] - '0');
  }
  return process;
}
int NumCudaDevicesPresent();  // 0 on a machine without a usable GPU

// `auto`: every CUDA GPU, then CPU workers (one 1-thread worker per core when there is no GPU,
// one worker with every core otherwise). Capacities: CUDA's total memory; for a CPU worker the
// machine's physical memory divided among the workers.
DeviceSet DetectDevices();

// The configured devices, checked against the machine: a CUDA device that is not present is a
// config::ConfigError naming the file, key and line, unless the config's evaluator is the
// simulator, which may place on clusters larger than the machine (an absent GPU then gets the
// configured memory, or an H200's 141 GB).
DeviceSet ResolveDevices(const config::Config& config);

}  // namespace placer::runtime
