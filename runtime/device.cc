#include "runtime/device.h"

#include <fmt/format.h>
#include <unistd.h>

#include <thread>

#ifdef PLACER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace placer::runtime {

std::vector<std::string> DeviceNames(const DeviceSet& devices) {
  std::vector<std::string> names;
  for (const Device& device : devices) names.push_back(device.name);
  return names;
}

int NumCudaDevicesPresent() {
#ifdef PLACER_WITH_CUDA
  return static_cast<int>(c10::cuda::device_count());
#else
  return 0;
#endif
}

namespace {

int64_t PhysicalMemoryBytes() {
  return static_cast<int64_t>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGE_SIZE);
}

int64_t CudaMemoryBytes([[maybe_unused]] int ordinal) {
#ifdef PLACER_WITH_CUDA
  cudaDeviceProp properties{};
  if (cudaGetDeviceProperties(&properties, ordinal) == cudaSuccess) {
    return static_cast<int64_t>(properties.totalGlobalMem);
  }
#endif
  return 0;
}

Device ParseDevice(const std::string& name) {
  Device device;
  device.name = name;
  // "w1/cpu:0": the device of another process (a placement across processes), named there.
  const std::string local = name.substr(name.find('/') + 1);
  auto colon = local.find(':');
  device.type = local.substr(0, colon) == "cuda" ? DeviceType::kCuda : DeviceType::kCpu;
  device.index = std::stoi(local.substr(colon + 1));
  return device;
}

}  // namespace

DeviceSet DetectDevices() {
  DeviceSet devices;
  const int gpus = NumCudaDevicesPresent();
  for (int i = 0; i < gpus; ++i) {
    devices.push_back({fmt::format("cuda:{}", i), DeviceType::kCuda, i, 1, CudaMemoryBytes(i)});
  }
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int workers = gpus > 0 ? 1 : cores;
  for (int i = 0; i < workers; ++i) {
    devices.push_back({fmt::format("cpu:{}", i), DeviceType::kCpu, i, gpus > 0 ? cores : 1,
                       PhysicalMemoryBytes() / workers});
  }
  return devices;
}

DeviceSet ResolveDevices(const config::Config& config) {
  if (config.devices.automatic) return DetectDevices();
  const int gpus = NumCudaDevicesPresent();
  int cpu_workers = 0;
  for (const config::DeviceConfig& entry : config.devices.devices) {
    cpu_workers += ParseDevice(entry.name).type == DeviceType::kCpu ? 1 : 0;
  }
  DeviceSet devices;
  for (size_t i = 0; i < config.devices.devices.size(); ++i) {
    const config::DeviceConfig& entry = config.devices.devices[i];
    Device device = ParseDevice(entry.name);
    device.threads = entry.threads;
    if (device.type == DeviceType::kCuda) {
      if (device.index >= gpus && config.search.evaluator == config::EvaluatorKind::kSimulated) {
        device.memory_capacity = entry.memory_bytes.value_or(int64_t{141} * 1000 * 1000 * 1000);
        devices.push_back(device);
        continue;
      }
      if (device.index >= gpus) {
        throw config::ConfigError(
            config.source.string(), entry.line, 1, fmt::format("devices[{}]", i),
            fmt::format("device '{}' is not present: this machine has {} CUDA GPU{}", entry.name,
                        gpus, gpus == 1 ? "" : "s") +
                "; a simulated search (search.evaluator: simulated) may use absent GPUs");
      }
      device.memory_capacity = CudaMemoryBytes(device.index);
    } else {
      device.memory_capacity = PhysicalMemoryBytes() / std::max(1, cpu_workers);
    }
    if (entry.memory_bytes) device.memory_capacity = *entry.memory_bytes;
    devices.push_back(device);
  }
  return devices;
}

}  // namespace placer::runtime
