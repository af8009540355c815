#include "runtime/profiler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <thread>

#ifdef PLACER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include "runtime/executor.h"

namespace placer::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void Synchronize([[maybe_unused]] const Device& device) {
#ifdef PLACER_WITH_CUDA
  if (device.type == DeviceType::kCuda) c10::cuda::device_synchronize();
#endif
}

std::string HardwareName(const Device& device) {
#ifdef PLACER_WITH_CUDA
  if (device.type == DeviceType::kCuda) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device.index) == cudaSuccess) return properties.name;
  }
#endif
  return fmt::format("cpu, {} thread{}", device.threads, device.threads == 1 ? "" : "s");
}

// Median seconds to make a tensor of `bytes` on `from` (nullptr: host memory) available on `to`,
// the way the executor does it: a clone between CPU workers, a copy otherwise.
double CopySeconds(int64_t bytes, const Device* from, const Device& to) {
  at::Tensor source = at::randn(
      {bytes / 4},
      at::TensorOptions(at::kFloat).device(from ? TorchDevice(*from) : at::Device(at::kCPU)));
  if (from == nullptr && to.type == DeviceType::kCuda) source = source.pin_memory();
  std::vector<double> times;
  // On a thread with the sending worker's thread budget, as the executor's copies run.
  std::thread worker([&] {
    at::init_num_threads();
    at::set_num_threads(from != nullptr && from->type == DeviceType::kCpu ? from->threads : 1);
    for (int repeat = 0; repeat < 12; ++repeat) {
      auto begin = Clock::now();
      at::Tensor copy =
          to.type == DeviceType::kCpu && (from == nullptr || from->type == DeviceType::kCpu)
              ? source.clone()
              : source.to(TorchDevice(to), /*non_blocking=*/false, /*copy=*/true);
      Synchronize(to);
      if (from) Synchronize(*from);
      if (repeat >= 3) times.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
    }
  });
  worker.join();
  return Median(times);
}

sim::LinkSpec FitLink(const Device* from, const Device& to) {
  std::vector<sim::TransferSample> samples;
  for (int64_t bytes = 4 << 10; bytes <= (16 << 20); bytes *= 4) {
    samples.push_back({bytes, CopySeconds(bytes, from, to)});
  }
  return sim::FitLinkSpec(samples);
}

std::string Today() {
  std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

}  // namespace

sim::ProfiledCostModel ProfileDevices(const graph::Graph& graph, const DeviceSet& devices,
                                      const ProfileOptions& options) {
  sim::ProfiledCostModel profile;
  profile.metadata().model = options.model_name;
  profile.metadata().libtorch_version = TORCH_VERSION;
  profile.metadata().date = Today();
  for (const Device& device : devices) {
    profile.metadata().devices.push_back({device.name, HardwareName(device)});
  }
  const TensorMap parameters = InitializeParameters(graph, options.seed);
  TensorMap batch = SyntheticBatch(graph, options.seed + 1);
  const std::vector<std::string> names = DeviceNames(devices);
  for (size_t d = 0; d < devices.size(); ++d) {
    // The device alone, with the thread budget it has in a placement.
    DeviceSet alone = devices;
    Executor executor(graph, alone, graph::Placement::AllOn(graph, names, static_cast<int>(d)),
                      parameters, {.record_trace = true});
    std::map<std::string, std::vector<double>> op_times;
    for (int step = 0; step < options.warmup_steps + options.timed_steps; ++step) {
      StepResult r = executor.RunStep(batch);
      if (step < options.warmup_steps) continue;
      for (const TraceEvent& e : r.trace) {
        if (e.lane == devices[d].name) op_times[e.name].push_back(e.duration_us * 1e-6);
      }
    }
    for (const auto& [op, times] : op_times)
      profile.SetOpSeconds(op, devices[d].name, Median(times));
  }
  for (const Device& to : devices) {
    if (to.type == DeviceType::kCuda)
      profile.SetLink(sim::kHostName, to.name, FitLink(nullptr, to));
    for (const Device& from : devices) {
      if (&from != &to) profile.SetLink(from.name, to.name, FitLink(&from, to));
    }
  }
  return profile;
}

}  // namespace placer::runtime
