// The configured devices, checked against this machine: the config's `devices:` as the runtime's
// requests, its errors as the config's (file, key, line).
#pragma once

#include "graph/device.h"
#include "placer/config/config.h"

namespace placer::setup {

// `devices: auto` detects them. A CUDA device that is not present is a config::ConfigError naming
// the file, key and line, unless the config's evaluator is the simulator, which may place on
// clusters larger than the machine (an absent GPU then gets the configured memory, or its GPU
// kind's: devices[i].kind, else simulation.gpu_kind, an H200's 141 GB by default).
// `only_simulated`: the caller never measures (`placer predict`), so absent GPUs are allowed
// whatever the evaluator.
graph::DeviceSet ResolveDevices(const config::Config& config, bool only_simulated = false);

}  // namespace placer::setup
