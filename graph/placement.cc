#include "graph/placement.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <fnmatch.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "graph/micro_batches.h"
#include "graph/training_step.h"

namespace placer::graph {

Placement Placement::AllOn(const Graph& graph, std::vector<std::string> devices, int device) {
  Placement placement{.devices = std::move(devices),
                      .device_of_op = std::vector<int>(static_cast<size_t>(graph.num_ops()), -1)};
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

std::vector<int> HomeDevices(const Graph& graph, const std::vector<int>& op_device) {
  std::vector<int> home(static_cast<size_t>(graph.num_tensors()), kHostDevice);
  for (TensorId t = 0; t < graph.num_tensors(); ++t) {
    const Tensor& tensor = graph.tensor(t);
    if (tensor.producer != kNoOp) {
      home[static_cast<size_t>(t)] = op_device[static_cast<size_t>(tensor.producer)];
    } else if (tensor.kind == TensorKind::kParameter) {
      home[static_cast<size_t>(t)] = op_device[static_cast<size_t>(OwnerOf(graph, t))];
    }
  }
  return home;
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

namespace {

// What a placement mapping is read against.
struct PlacementBody {
  const std::filesystem::path& file;
  const Graph& graph;
  const std::vector<std::string>& devices;
};

std::string Describe(const YAML::Node& node) {
  if (node.IsScalar()) return fmt::format("'{}'", node.Scalar());
  if (node.IsMap()) return "a mapping";
  return node.IsSequence() ? "a list" : "nothing";
}

// Applies `default`, `placement` (exact names, first) and `rules` (glob patterns in order, first
// match wins) of one mapping to `placement`. `path` prefixes key names in messages
// ("variants[1]." inside a variant).
void ApplyBody(const PlacementBody& body, const YAML::Node& node, const std::string& path,
               Placement& placement) {
  const std::filesystem::path& file = body.file;
  const Graph& graph = body.graph;
  int fallback = -1;
  if (const YAML::Node value = node["default"]) {
    fallback = DeviceIndex(body.devices, value.Scalar(), Where(file, value), path + "default");
  }
  const YAML::Node ops = node["placement"];
  if (ops && !ops.IsMap()) {
    throw PlacementError(fmt::format("{}: {}placement: expected a mapping of op name to device",
                                     Where(file, ops), path));
  }
  if (ops) {
    for (const auto& entry : ops) {
      const std::string name = entry.first.Scalar();
      std::string key = path + "placement." + name;
      auto id = graph.FindOp(name);
      if (!id || graph.op(*id).phase != Phase::kForward) {
        throw PlacementError(fmt::format("{}: {}: the model has no forward op '{}'",
                                         Where(file, entry.first), key, name));
      }
      placement.device_of_op[static_cast<size_t>(*id)] =
          DeviceIndex(body.devices, entry.second.Scalar(), Where(file, entry.second), key);
    }
  }
  const YAML::Node rules = node["rules"];
  if (rules && !rules.IsSequence()) {
    throw PlacementError(
        fmt::format("{}: {}rules: expected a list of {{match: PATTERN, device: DEVICE}}",
                    Where(file, rules), path));
  }
  if (rules) {
    struct Rule {
      std::string pattern;
      int device;
      std::string where, key;
      int placed = 0;
    };
    std::vector<Rule> parsed;
    for (size_t i = 0; i < rules.size(); ++i) {
      const YAML::Node rule = rules[i];
      const std::string key = fmt::format("{}rules[{}]", path, i);
      if (!rule.IsMap()) {
        throw PlacementError(
            fmt::format("{}: {}: expected {{match: PATTERN, device: DEVICE}}, got {}",
                        Where(file, rule), key, Describe(rule)));
      }
      for (const auto& field : rule) {
        const std::string name = field.first.Scalar();
        if (name != "match" && name != "device") {
          throw PlacementError(fmt::format("{}: {}: unknown key '{}'; expected match, device",
                                           Where(file, field.first), key, name));
        }
      }
      const YAML::Node match = rule["match"];
      const YAML::Node device = rule["device"];
      if (!match || !match.IsScalar() || match.Scalar().empty()) {
        throw PlacementError(
            fmt::format("{}: {}: needs 'match', an op name pattern", Where(file, rule), key));
      }
      if (!device || !device.IsScalar()) {
        throw PlacementError(fmt::format("{}: {}: needs 'device'", Where(file, rule), key));
      }
      parsed.push_back(
          {match.Scalar(),
           DeviceIndex(body.devices, device.Scalar(), Where(file, device), key + ".device"),
           Where(file, rule), key});
    }
    for (OpId id : graph.OpsInPhase(Phase::kForward)) {
      int& device = placement.device_of_op[static_cast<size_t>(id)];
      if (device != -1) continue;  // named exactly under `placement`
      for (Rule& rule : parsed) {
        // No flags: '*' also matches '/', so "enc/l0/*" covers every time step of the layer.
        if (::fnmatch(rule.pattern.c_str(), graph.op(id).name.c_str(), 0) == 0) {
          device = rule.device;
          ++rule.placed;
          break;
        }
      }
    }
    // A rule that places nothing is a typo or a rule for another model size: both are errors.
    for (const Rule& rule : parsed) {
      if (rule.placed == 0) {
        throw PlacementError(fmt::format(
            "{}: {} (match '{}'): places no op: no forward op of the model matches it, or every "
            "op it matches is placed by an earlier rule or by 'placement'",
            rule.where, rule.key, rule.pattern));
      }
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
        fmt::format("{}: {}placement misses {} forward ops (first: {}); list them, add rules "
                    "or give a 'default' device",
                    file.string(), path, unplaced.size(),
                    fmt::join(unplaced.begin(),
                              unplaced.begin() + std::min<size_t>(5, unplaced.size()), ", ")));
  }
}

// Keys a placement mapping (the file, or one variant) may hold: `allowed`, and `silent` ones that
// placer itself writes (they are not offered in messages).
void CheckBodyKeys(const std::filesystem::path& file, const YAML::Node& node,
                   const std::string& path, const std::vector<std::string>& allowed,
                   const std::vector<std::string>& silent = {}) {
  for (const auto& entry : node) {
    const std::string key = entry.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end() ||
        std::find(silent.begin(), silent.end(), key) != silent.end()) {
      continue;
    }
    throw PlacementError(fmt::format("{}: {}unknown key '{}'; expected {}",
                                     Where(file, entry.first), path, key,
                                     fmt::join(allowed, ", ")));
  }
}

YAML::Node LoadPlacementRoot(const std::filesystem::path& file) {
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
  return root;
}

// The count under `key` of the file's root, 1 when absent; PlacementError naming `what` when it is
// not a number >= 1.
int ReadCount(const std::filesystem::path& file, const char* key, const char* what) {
  const YAML::Node root = LoadPlacementRoot(file);
  const YAML::Node value = root[key];
  if (!value) return 1;
  int count = 0;
  try {
    count = value.as<int>();
  } catch (const YAML::Exception&) {
  }
  if (count < 1) {
    throw PlacementError(fmt::format("{}: {}: expected {} >= 1, got {}", Where(file, value), key,
                                     what, Describe(value)));
  }
  return count;
}

}  // namespace

int ReadPlacementReplicas(const std::filesystem::path& file) {
  return ReadCount(file, "replicas", "a replica count");
}

int ReadPlacementTensorWays(const std::filesystem::path& file) {
  return ReadCount(file, "tensor_ways", "a count of shards");
}

namespace {

PipelineSettings ParsePipeline(const std::filesystem::path& file, const YAML::Node& root) {
  PipelineSettings settings;
  if (const YAML::Node value = root["micro_batches"]) {
    int count = 0;
    try {
      count = value.as<int>();
    } catch (const YAML::Exception&) {
    }
    if (count < 1) {
      throw PlacementError(
          fmt::format("{}: micro_batches: expected a micro-batch count >= 1, got {}",
                      Where(file, value), Describe(value)));
    }
    settings.micro_batches = count;
  }
  if (const YAML::Node value = root["schedule"]) {
    try {
      if (!value.IsScalar()) throw GraphError("expected gpipe or 1f1b");
      settings.schedule = ParsePipelineSchedule(value.Scalar());
    } catch (const GraphError&) {
      throw PlacementError(fmt::format("{}: schedule: expected gpipe or 1f1b, got {}",
                                       Where(file, value), Describe(value)));
    }
  }
  return settings;
}

// Whether `graph` is the step micro-batched `micro_batches` times: every forward op is named
// "m<k>/<op>", k up to M - 1. Any graph will do for M = 1.
bool IsMicroBatched(const Graph& graph, int micro_batches) {
  if (micro_batches == 1) return true;
  int highest = -1;
  for (OpId id : graph.OpsInPhase(Phase::kForward)) {
    const std::optional<int> k = MicroBatchOfName(graph.op(id).name);
    if (!k) return false;
    highest = std::max(highest, *k);
  }
  return highest == micro_batches - 1;
}

}  // namespace

PipelineSettings ReadPlacementPipeline(const std::filesystem::path& file) {
  return ParsePipeline(file, LoadPlacementRoot(file));
}

Placement ReadPlacementYaml(const std::filesystem::path& file, const Graph& graph,
                            const std::vector<std::string>& devices,
                            const std::map<std::string, std::string>& facts) {
  const YAML::Node root = LoadPlacementRoot(file);
  CheckBodyKeys(file, root, "",
                {"devices", "replicas", "micro_batches", "schedule", "tensor_ways", "default",
                 "placement", "rules", "variants"},
                {"model", "step_time_seconds"});
  const PipelineSettings pipeline = ParsePipeline(file, root);
  if (!IsMicroBatched(graph, pipeline.micro_batches)) {
    throw PlacementError(fmt::format(
        "{}: micro_batches: {}: the model it is read against is not micro-batched that many times "
        "(build it with graph::BuildMicroBatched at the count ReadPlacementPipeline gives)",
        file.string(), pipeline.micro_batches));
  }
  if (const YAML::Node value = root["devices"]) {
    if (!value.IsSequence()) {
      throw PlacementError(fmt::format("{}: devices: expected a list", Where(file, value)));
    }
    for (const auto& device : value) {
      DeviceIndex(devices, device.Scalar(), Where(file, device), "devices");
    }
  }
  Placement placement{.devices = devices,
                      .device_of_op = std::vector<int>(static_cast<size_t>(graph.num_ops()), -1),
                      .micro_batches = pipeline.micro_batches,
                      .schedule = pipeline.schedule};
  const PlacementBody body{file, graph, devices};
  const YAML::Node variants = root["variants"];
  if (!variants) {
    ApplyBody(body, root, "", placement);
    return placement;
  }

  // Variants: the first whose `when` holds is the placement. "devices" is the device count; the
  // other conditions are facts about the model given by the caller (e.g. its layer count).
  if (root["default"] || root["placement"] || root["rules"]) {
    throw PlacementError(fmt::format(
        "{}: a file with 'variants' keeps default, placement and rules inside each variant",
        file.string()));
  }
  if (!variants.IsSequence() || variants.size() == 0) {
    throw PlacementError(fmt::format(
        "{}: variants: expected a non-empty list of {{when: {{...}}, default, placement, rules}}",
        Where(file, variants)));
  }
  std::map<std::string, std::string> known = facts;
  known["devices"] = std::to_string(devices.size());
  std::vector<std::string> tried;
  for (size_t i = 0; i < variants.size(); ++i) {
    const YAML::Node variant = variants[i];
    const std::string path = fmt::format("variants[{}].", i);
    if (!variant.IsMap()) {
      throw PlacementError(fmt::format("{}: {}: expected a mapping with 'when'",
                                       Where(file, variant), path.substr(0, path.size() - 1)));
    }
    CheckBodyKeys(file, variant, path, {"when", "default", "placement", "rules"});
    const YAML::Node when = variant["when"];
    if (!when || !when.IsMap() || when.size() == 0) {
      throw PlacementError(
          fmt::format("{}: {}when: expected a mapping of conditions, e.g. {{devices: 4}}",
                      Where(file, variant), path));
    }
    bool holds = true;
    std::vector<std::string> conditions;
    for (const auto& condition : when) {
      const std::string key = condition.first.Scalar();
      auto fact = known.find(key);
      if (fact == known.end()) {
        std::vector<std::string> names;
        for (const auto& [name, value] : known) names.push_back(name);
        throw PlacementError(fmt::format("{}: {}when.{}: unknown condition; this model offers: {}",
                                         Where(file, condition.first), path, key,
                                         fmt::join(names, ", ")));
      }
      if (!condition.second.IsScalar()) {
        throw PlacementError(fmt::format("{}: {}when.{}: expected a value",
                                         Where(file, condition.first), path, key));
      }
      conditions.push_back(fmt::format("{}={}", key, condition.second.Scalar()));
      holds = holds && fact->second == condition.second.Scalar();
    }
    if (holds) {
      ApplyBody(body, variant, path, placement);
      return placement;
    }
    tried.push_back(
        fmt::format("line {} ({})", variant.Mark().line + 1, fmt::join(conditions, ", ")));
  }
  std::vector<std::string> have;
  for (const auto& [name, value] : known) have.push_back(fmt::format("{}={}", name, value));
  throw PlacementError(fmt::format("{}: no variant is for {}; the variants are for: {}",
                                   file.string(), fmt::join(have, ", "), fmt::join(tried, "; ")));
}

std::string PlacementToYaml(const Graph& graph, const Placement& placement, int replicas,
                            int tensor_ways) {
  YAML::Emitter out;
  out << YAML::BeginMap;
  out << YAML::Key << "devices" << YAML::Value << YAML::Flow << placement.devices;
  if (replicas > 1) out << YAML::Key << "replicas" << YAML::Value << replicas;
  if (tensor_ways > 1) out << YAML::Key << "tensor_ways" << YAML::Value << tensor_ways;
  if (placement.micro_batches > 1) {
    out << YAML::Key << "micro_batches" << YAML::Value << placement.micro_batches;
    out << YAML::Key << "schedule" << YAML::Value << ToString(placement.schedule);
  }
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
                        const Placement& placement, int replicas) {
  WriteFileAtomically(file, PlacementToYaml(graph, placement, replicas));
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
