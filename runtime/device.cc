#include "runtime/device.h"

#include <fmt/format.h>
#include <unistd.h>

#include <thread>

#ifdef PLACER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

namespace placer::runtime {

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

}  // namespace

graph::DeviceSet DetectDevices() {
  graph::DeviceSet devices;
  const int gpus = NumCudaDevicesPresent();
  for (int i = 0; i < gpus; ++i) {
    devices.push_back(
        {fmt::format("cuda:{}", i), graph::DeviceType::kCuda, i, 1, CudaMemoryBytes(i)});
  }
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  const int workers = gpus > 0 ? 1 : cores;
  for (int i = 0; i < workers; ++i) {
    devices.push_back({fmt::format("cpu:{}", i), graph::DeviceType::kCpu, i, gpus > 0 ? cores : 1,
                       PhysicalMemoryBytes() / workers});
  }
  return devices;
}

graph::DeviceSet ResolveDevices(std::span<const DeviceRequest> requests, bool allow_absent_gpus) {
  const int gpus = NumCudaDevicesPresent();
  int cpu_workers = 0;
  for (const DeviceRequest& request : requests) {
    cpu_workers += graph::DeviceFromName(request.name).type == graph::DeviceType::kCpu ? 1 : 0;
  }
  graph::DeviceSet devices;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DeviceRequest& request = requests[i];
    graph::Device device = graph::DeviceFromName(request.name);
    device.threads = request.threads;
    if (device.type == graph::DeviceType::kCuda) {
      if (device.index >= gpus && allow_absent_gpus) {
        device.memory_capacity = request.memory_bytes.value_or(request.absent_gpu_memory_bytes);
        devices.push_back(device);
        continue;
      }
      if (device.index >= gpus) {
        throw DeviceUnavailable(
            i, fmt::format("device '{}' is not present: this machine has {} CUDA GPU{}",
                           request.name, gpus, gpus == 1 ? "" : "s"));
      }
      device.memory_capacity = CudaMemoryBytes(device.index);
    } else {
      device.memory_capacity = PhysicalMemoryBytes() / std::max(1, cpu_workers);
    }
    if (request.memory_bytes) device.memory_capacity = *request.memory_bytes;
    devices.push_back(device);
  }
  return devices;
}

}  // namespace placer::runtime
