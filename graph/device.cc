#include "graph/device.h"

#include <stdexcept>

namespace placer::graph {

namespace {

// A run of decimal digits below a million (no sign, no spaces), or null.
std::optional<int> ParseSmallNumber(std::string_view digits) {
  if (digits.empty() || digits.size() > 6) return std::nullopt;
  int value = 0;
  for (const char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
    value = value * 10 + (c - '0');
  }
  return value;
}

}  // namespace

std::optional<DeviceName> ParseDeviceName(std::string_view name) {
  DeviceName parsed;
  if (const size_t slash = name.find('/'); slash != std::string_view::npos) {
    if (slash < 2 || name[0] != 'w') return std::nullopt;
    const std::optional<int> process = ParseSmallNumber(name.substr(1, slash - 1));
    if (!process) return std::nullopt;
    parsed.process = *process;
    name = name.substr(slash + 1);
  }
  const size_t colon = name.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::optional<DeviceType> type = ParseDeviceType(name.substr(0, colon));
  const std::optional<int> index = ParseSmallNumber(name.substr(colon + 1));
  if (!type || !index) return std::nullopt;
  parsed.type = *type;
  parsed.index = *index;
  return parsed;
}

Device DeviceFromName(const std::string& name) {
  const std::optional<DeviceName> parsed = ParseDeviceName(name);
  if (!parsed) {
    throw std::invalid_argument("'" + name + "' is not a device name: expected cpu:N or cuda:N" +
                                " (w<K>/cpu:N for process K's)");
  }
  return {.name = name, .type = parsed->type, .index = parsed->index};
}

int DeviceProcess(std::string_view name) {
  const std::optional<DeviceName> parsed = ParseDeviceName(name);
  return parsed ? parsed->process : -1;
}

std::vector<std::string> DeviceNames(const DeviceSet& devices) {
  std::vector<std::string> names;
  names.reserve(devices.size());
  for (const Device& device : devices) names.push_back(device.name);
  return names;
}

std::string_view DeviceTypeName(DeviceType type) {
  return type == DeviceType::kCuda ? "cuda" : "cpu";
}

std::optional<DeviceType> ParseDeviceType(std::string_view name) {
  if (name == "cpu") return DeviceType::kCpu;
  if (name == "cuda") return DeviceType::kCuda;
  return std::nullopt;
}

}  // namespace placer::graph
