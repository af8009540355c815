// ProfiledCostModel's file (`placer profile` writes it, simulation.profile reads it): JSON with
// the measured ops, links and contention, and what they were measured on.
#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/placement.h"
#include "runtime/sim/cost_model.h"

namespace placer::sim {

using graph::DeviceType;

std::string ProfiledCostModel::ToJson() const {
  using nlohmann::json;
  json devices = json::array();
  for (const auto& device : metadata_.devices) {
    devices.push_back({{"name", device.name}, {"type", device.type}});
  }
  json ops = json::array();
  for (const auto& [key, seconds] : op_seconds_) {
    ops.push_back({{"op", key.first}, {"device", key.second}, {"seconds", seconds}});
  }
  json links = json::array();
  for (const auto& [key, link] : links_) {
    links.push_back({{"from", key.first},
                     {"to", key.second},
                     {"seconds_per_byte", link.seconds_per_byte},
                     {"latency_seconds", link.latency_seconds},
                     {"receive_seconds_per_byte", link.receive_seconds_per_byte}});
  }
  json contention = json::array();
  for (const auto& [type, spec] : contention_) {
    contention.push_back({{"device_type", std::string(graph::DeviceTypeName(type))},
                          {"devices", spec.devices},
                          {"slowdown", spec.slowdown}});
  }
  json document = {{"version", kFormatVersion},
                   {"model", metadata_.model},
                   {"libtorch_version", metadata_.libtorch_version},
                   {"date", metadata_.date},
                   {"devices", devices},
                   {"ops", ops},
                   {"links", links},
                   {"contention", contention}};
  return document.dump(2) + "\n";
}

namespace {

// Reads fields of one JSON object, naming the source and the object's path in every error.
class FieldReader {
 public:
  FieldReader(const nlohmann::json& object, const std::string& source, std::string path)
      : object_(object), source_(source), path_(std::move(path)) {
    if (!object_.is_object())
      Fail(fmt::format("expected an object, found {}", object_.type_name()));
  }

  const nlohmann::json& Get(const char* key) const {
    auto it = object_.find(key);
    if (it == object_.end()) Fail(fmt::format("missing field '{}'", key));
    return *it;
  }
  std::string String(const char* key) const {
    const nlohmann::json& value = Get(key);
    if (!value.is_string()) Mistyped(key, "a string", value);
    return value.get<std::string>();
  }
  double Number(const char* key) const {
    const nlohmann::json& value = Get(key);
    if (!value.is_number()) Mistyped(key, "a number", value);
    return value.get<double>();
  }
  const nlohmann::json& Array(const char* key) const {
    const nlohmann::json& value = Get(key);
    if (!value.is_array()) Mistyped(key, "an array", value);
    return value;
  }
  std::string Where(const std::string& child) const {
    return path_.empty() ? child : fmt::format("{}.{}", path_, child);
  }
  [[noreturn]] void Fail(const std::string& message) const {
    throw ProfileError(path_.empty() ? fmt::format("{}: {}", source_, message)
                                     : fmt::format("{}: {}: {}", source_, path_, message));
  }

 private:
  [[noreturn]] void Mistyped(const char* key, const char* expected,
                             const nlohmann::json& value) const {
    Fail(fmt::format("field '{}' must be {}, found {}", key, expected, value.type_name()));
  }

  const nlohmann::json& object_;
  const std::string& source_;
  std::string path_;
};

}  // namespace

ProfiledCostModel ProfiledCostModel::FromJson(const std::string& text, const std::string& source,
                                              RooflineCostModel fallback) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& error) {
    throw ProfileError(fmt::format("{}: malformed JSON: {}", source, error.what()));
  }
  ProfiledCostModel model(std::move(fallback));
  FieldReader top(document, source, "");
  const double version = top.Number("version");
  if (version != kFormatVersion) {
    top.Fail(fmt::format("unsupported profile version {}; this build reads version {}", version,
                         kFormatVersion));
  }
  model.metadata_.model = top.String("model");
  model.metadata_.libtorch_version = top.String("libtorch_version");
  model.metadata_.date = top.String("date");
  const nlohmann::json& devices = top.Array("devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    FieldReader device(devices[i], source, fmt::format("devices[{}]", i));
    model.metadata_.devices.push_back({device.String("name"), device.String("type")});
  }
  const nlohmann::json& ops = top.Array("ops");
  for (size_t i = 0; i < ops.size(); ++i) {
    FieldReader entry(ops[i], source, fmt::format("ops[{}]", i));
    std::string op = entry.String("op");
    std::string device = entry.String("device");
    const double seconds = entry.Number("seconds");
    if (!(seconds >= 0)) entry.Fail(fmt::format("'seconds' must be non-negative, got {}", seconds));
    if (model.FindOpSeconds(op, device)) {
      entry.Fail(fmt::format("a second entry for op '{}' on {}", op, device));
    }
    model.SetOpSeconds(op, device, seconds);
  }
  // Links are optional: a profile may time ops only.
  if (document.contains("links")) {
    const nlohmann::json& links = top.Array("links");
    for (size_t i = 0; i < links.size(); ++i) {
      FieldReader entry(links[i], source, fmt::format("links[{}]", i));
      std::string from = entry.String("from");
      std::string to = entry.String("to");
      LinkSpec link{.seconds_per_byte = entry.Number("seconds_per_byte"),
                    .latency_seconds = entry.Number("latency_seconds")};
      // Profiles written before the receive cost existed lack it: nothing measured, 0.
      if (links[i].contains("receive_seconds_per_byte")) {
        link.receive_seconds_per_byte = entry.Number("receive_seconds_per_byte");
      }
      try {
        model.SetLink(from, to, link);  // checks every field
      } catch (const std::invalid_argument& error) {
        entry.Fail(error.what());
      }
    }
  }
  // Profiles written before contention was measured lack it: devices alone, as they were timed.
  if (document.contains("contention")) {
    const nlohmann::json& contention = top.Array("contention");
    for (size_t i = 0; i < contention.size(); ++i) {
      FieldReader entry(contention[i], source, fmt::format("contention[{}]", i));
      const std::string kind = entry.String("device_type");
      const std::optional<DeviceType> parsed = graph::ParseDeviceType(kind);
      if (!parsed) {
        entry.Fail(fmt::format("'device_type' must be \"cpu\" or \"cuda\", got \"{}\"", kind));
      }
      const DeviceType type = *parsed;
      const double devices = entry.Number("devices");
      if (devices != std::floor(devices) || devices < 2 || devices > 1e6) {
        entry.Fail(fmt::format("'devices' must be a whole number of at least 2, got {}", devices));
      }
      if (model.FindContention(type)) {
        entry.Fail(fmt::format("a second entry for {} devices", kind));
      }
      try {
        model.SetContention(
            type, {.devices = static_cast<int>(devices), .slowdown = entry.Number("slowdown")});
      } catch (const std::invalid_argument& error) {
        entry.Fail(error.what());
      }
    }
  }
  return model;
}

void ProfiledCostModel::Save(const std::filesystem::path& file) const {
  try {
    graph::WriteFileAtomically(file, ToJson());
  } catch (const std::exception& error) {
    throw ProfileError(
        fmt::format("{}: cannot write the profile: {}", file.string(), error.what()));
  }
}

ProfiledCostModel ProfiledCostModel::Load(const std::filesystem::path& file,
                                          RooflineCostModel fallback) {
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw ProfileError(fmt::format("{}: cannot open: {}", file.string(), std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw ProfileError(fmt::format("{}: cannot read", file.string()));
  return FromJson(text.str(), file.string(), std::move(fallback));
}

}  // namespace placer::sim
