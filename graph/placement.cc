#include "graph/placement.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

namespace placer::graph {

Placement Placement::AllOn(const Graph& graph, std::vector<std::string> devices, int device) {
  Placement placement{std::move(devices),
                      std::vector<int>(static_cast<size_t>(graph.num_ops()), -1)};
  for (OpId id : graph.OpsInPhase(Phase::kForward)) {
    placement.device_of_op[static_cast<size_t>(id)] = device;
  }
  return placement;
}

std::vector<int> ExpandPlacement(const Graph& graph, const Placement& placement) {
  if (placement.device_of_op.size() != static_cast<size_t>(graph.num_ops())) {
    throw GraphError(fmt::format("the placement covers {} ops, the graph has {}",
                                 placement.device_of_op.size(), graph.num_ops()));
  }
  const int num_devices = static_cast<int>(placement.devices.size());
  std::vector<int> devices(static_cast<size_t>(graph.num_ops()), -1);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    OpId anchor = op.phase == Phase::kForward ? id : op.forward_op;
    int device = placement.device_of_op[static_cast<size_t>(anchor)];
    if (device < 0 || device >= num_devices) {
      throw GraphError(fmt::format("op '{}' is not placed on any of the {} devices",
                                   graph.op(anchor).name, num_devices));
    }
    devices[static_cast<size_t>(id)] = device;
  }
  return devices;
}

namespace {

std::string Where(const std::filesystem::path& file, const YAML::Node& node) {
  return fmt::format("{}:{}", file.string(), node.Mark().line + 1);
}

// A device by name ("cpu:1") or by position in the device list ("1"), so that hand-written
// placements can be shared between machines.
int DeviceIndex(const std::vector<std::string>& devices, const std::string& name,
                const std::string& where, const std::string& key) {
  if (!name.empty() && name.find_first_not_of("0123456789") == std::string::npos &&
      name.size() < 6 && std::stoi(name) < static_cast<int>(devices.size())) {
    return std::stoi(name);
  }
  auto it = std::find(devices.begin(), devices.end(), name);
  if (it == devices.end()) {
    throw PlacementError(fmt::format("{}: {}: unknown device '{}'; the devices are: {}", where, key,
                                     name, fmt::join(devices, ", ")));
  }
  return static_cast<int>(it - devices.begin());
}

}  // namespace

Placement ReadPlacementYaml(const std::filesystem::path& file, const Graph& graph,
                            const std::vector<std::string>& devices) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw PlacementError(fmt::format("{}: cannot read: {}", file.string(), std::strerror(errno)));
  }
  std::stringstream text;
  text << in.rdbuf();
  YAML::Node root;
  try {
    root = YAML::Load(text.str());
  } catch (const YAML::Exception& error) {
    throw PlacementError(fmt::format("{}:{}: not a placement file: {}", file.string(),
                                     error.mark.line + 1, error.msg));
  }
  if (!root.IsMap()) {
    throw PlacementError(
        fmt::format("{}: a placement file is a mapping with a 'placement' key", file.string()));
  }
  Placement placement{devices, std::vector<int>(static_cast<size_t>(graph.num_ops()), -1)};
  int fallback = -1;
  for (const auto& entry : root) {
    const std::string key = entry.first.Scalar();
    const YAML::Node& value = entry.second;
    if (key == "devices") {
      if (!value.IsSequence()) {
        throw PlacementError(fmt::format("{}: devices: expected a list", Where(file, value)));
      }
      for (const auto& device : value) {
        DeviceIndex(devices, device.Scalar(), Where(file, device), "devices");
      }
    } else if (key == "default") {
      fallback = DeviceIndex(devices, value.Scalar(), Where(file, value), "default");
    } else if (key != "placement" && key != "model" && key != "step_time_seconds") {
      throw PlacementError(
          fmt::format("{}: unknown key '{}'; expected devices, default, "
                      "placement",
                      Where(file, entry.first), key));
    }
  }
  const YAML::Node ops = root["placement"];
  if (ops && !ops.IsMap()) {
    throw PlacementError(
        fmt::format("{}: placement: expected a mapping of op name to device", Where(file, ops)));
  }
  if (ops) {
    for (const auto& entry : ops) {
      const std::string name = entry.first.Scalar();
      std::string key = "placement." + name;
      auto id = graph.FindOp(name);
      if (!id || graph.op(*id).phase != Phase::kForward) {
        throw PlacementError(fmt::format("{}: {}: the model has no forward op '{}'",
                                         Where(file, entry.first), key, name));
      }
      placement.device_of_op[static_cast<size_t>(*id)] =
          DeviceIndex(devices, entry.second.Scalar(), Where(file, entry.second), key);
    }
  }
  std::vector<std::string> unplaced;
  for (OpId id : graph.OpsInPhase(Phase::kForward)) {
    int& device = placement.device_of_op[static_cast<size_t>(id)];
    if (device == -1) device = fallback;
    if (device == -1) unplaced.push_back(graph.op(id).name);
  }
  if (!unplaced.empty()) {
    throw PlacementError(
        fmt::format("{}: placement misses {} forward ops (first: {}); list them "
                    "or give a 'default' device",
                    file.string(), unplaced.size(),
                    fmt::join(unplaced.begin(),
                              unplaced.begin() + std::min<size_t>(5, unplaced.size()), ", ")));
  }
  return placement;
}

std::string PlacementToYaml(const Graph& graph, const Placement& placement) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "devices" << YAML::Value << YAML::Flow << placement.devices;
  out << YAML::Key << "placement" << YAML::Value << YAML::BeginMap;
  for (OpId id : graph.TopologicalOrder()) {
    if (graph.op(id).phase != Phase::kForward) continue;
    out << YAML::Key << graph.op(id).name << YAML::Value
        << placement.devices.at(
               static_cast<size_t>(placement.device_of_op[static_cast<size_t>(id)]));
  }
  out << YAML::EndMap << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

void WritePlacementYaml(const std::filesystem::path& file, const Graph& graph,
                        const Placement& placement) {
  WriteFileAtomically(file, PlacementToYaml(graph, placement));
}

void WriteFileAtomically(const std::filesystem::path& file, const std::string& contents) {
  if (file.has_parent_path()) {
    std::error_code ignored;  // a failure shows up as a clear error at open() below
    std::filesystem::create_directories(file.parent_path(), ignored);
  }
  std::filesystem::path tmp = file;
  tmp += fmt::format(".tmp.{}", ::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) {
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", file.string(), std::strerror(errno)));
  }
  size_t written = 0;
  while (written < contents.size()) {
    ssize_t n = ::write(fd, contents.data() + written, contents.size() - written);
    if (n < 0) {
      int error = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error(
          fmt::format("cannot write {}: {}", file.string(), std::strerror(error)));
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", file.string(), std::strerror(error)));
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    int error = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", file.string(), std::strerror(error)));
  }
}

}  // namespace placer::graph
