// The devices a placement can use, by name: CUDA GPUs and CPU workers, in this process or in
// another one ("w1/cpu:0"). The one parser of device names; everything that reads a name (the
// config, the executor, the simulator, the workers) asks it. Torch-free.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace placer::graph {

enum class DeviceType : uint8_t { kCpu, kCuda };

struct Device {
  std::string name;  // "cpu:0", "cuda:1", "w1/cpu:0"
  DeviceType type = DeviceType::kCpu;
  int index = 0;                // CUDA ordinal, or the CPU worker's number
  int threads = 1;              // intra-op threads of a CPU worker
  int64_t memory_capacity = 0;  // bytes
};

using DeviceSet = std::vector<Device>;

// A device name taken apart: [w<process>/](cpu|cuda):<index>.
struct DeviceName {
  int process = -1;  // k for "w<k>/...", -1 for the process that runs the placement
  DeviceType type = DeviceType::kCpu;
  int index = 0;
};

// Null unless `name` is exactly [w<digits>/](cpu|cuda):<digits> (numbers below a million).
std::optional<DeviceName> ParseDeviceName(std::string_view name);

// The device `name` names, with one thread and no capacity; throws std::invalid_argument (naming
// it and the accepted form) when it is not a device name.
Device DeviceFromName(const std::string& name);

// The process a device belongs to in a placement across processes: k for "w<k>/cpu:0", -1 for a
// name without a process (or not a device name).
int DeviceProcess(std::string_view name);

std::vector<std::string> DeviceNames(const DeviceSet& devices);

// "cpu" or "cuda", as device names and profiles spell a kind; ParseDeviceType is its inverse.
std::string_view DeviceTypeName(DeviceType type);
std::optional<DeviceType> ParseDeviceType(std::string_view name);

}  // namespace placer::graph
