// The YAML config loader either accepts a document or rejects it with a ConfigError (file, line,
// key path). Any other exception, crash, leak or undefined behaviour is a finding.
#include <cstddef>
#include <cstdint>
#include <string>

#include "placer/config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    placer::config::Config config = placer::config::ParseConfig(text, "fuzz.yaml");
    // An accepted config is complete: every device entry has a name.
    for (const auto& device : config.devices.devices) {
      if (device.name.empty()) __builtin_trap();
    }
  } catch (const placer::config::ConfigError&) {
    // A clear rejection is the expected outcome for most inputs.
  }
  return 0;
}
