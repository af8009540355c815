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
