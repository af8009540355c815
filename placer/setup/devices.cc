#include "placer/setup/devices.h"

#include <fmt/format.h>

#include <vector>

#include "runtime/device.h"
#include "runtime/sim/gpu_kinds.h"

namespace placer::setup {

graph::DeviceSet ResolveDevices(const config::Config& config, bool only_simulated) {
  if (config.devices.automatic) return runtime::DetectDevices();
  std::vector<runtime::DeviceRequest> requests;
  for (const config::DeviceConfig& entry : config.devices.devices) {
    // The config checked the kinds' names.
    const sim::GpuKind& kind = sim::GpuKindNamed(config.GpuKindOf(entry));
    requests.push_back({.name = entry.name,
                        .threads = entry.threads,
                        .memory_bytes = entry.memory_bytes,
                        .absent_gpu_memory_bytes = kind.memory_bytes});
  }
  // Only a kind that runs the step needs the devices to be here.
  const bool simulated = only_simulated || !graph::Describe(config.search.evaluator).runs_the_step;
  try {
    return runtime::ResolveDevices(requests, simulated);
  } catch (const runtime::DeviceUnavailable& error) {
    throw config::ConfigError(
        config.source.string(), config.devices.devices[error.index()].line, 1,
        fmt::format("devices[{}]", error.index()),
        std::string(error.what()) +
            "; a simulated search (search.evaluator: simulated) may use absent GPUs");
  }
}

}  // namespace placer::setup
