#include "placer/config/config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string_view>
#include <type_traits>
#include <utility>

#include "graph/device.h"
#include "graph/onnx_loader.h"
#include "placer/config/field_reading.h"
#include "placer/config/yaml_reading.h"

namespace placer::config {
namespace {

using namespace reading;  // the readers of yaml_reading.h and field_reading.h, below

std::string FormatError(const std::string& file, int line, int column, const std::string& key_path,
                        const std::string& message) {
  // Line 0 means "no position" (e.g. the file could not be opened at all).
  std::string where = line > 0 ? fmt::format("{}:{}:{}", file, line, column) : file;
  if (key_path.empty()) return fmt::format("{}: {}", where, message);
  return fmt::format("{}: {}: {}", where, key_path, message);
}

// model: which model (builtin or onnx) is chosen by hand here: exactly one of the two, the
// choice deciding which model.<builtin> section may be given (a mapping, read into that model's
// options struct) and batch_size's default; every other key through ModelConfig::Fields().
ModelConfig ReadModel(const Value& value) {
  ModelConfig model;
  FieldKeys keys;
  model.SourceFields(keys);
  model.Fields(keys);
  std::vector<std::string_view> allowed = keys.views();
  const std::vector<std::string_view> models = graph::BuiltinModelNames();
  allowed.insert(allowed.end(), models.begin(), models.end());
  Mapping mapping(value, allowed);
  const Value* onnx = mapping.Find("onnx");
  if (onnx && mapping.Find("builtin")) onnx->Fail("give model.builtin or model.onnx, not both");
  YamlFields reader(mapping);
  model.SourceFields(reader);
  if (onnx) {
    // The file itself is read by LoadConfig (its own batch) and when the model is built
    // (placer/setup/model_factory.cc), which report its problems with the file's name.
    model.builtin.clear();
    model.options = nullptr;
    model.batch_size = 0;  // the file's own, for LoadConfig to read
    for (std::string_view section : models) {
      if (const Value* sizes = mapping.Find(section)) {
        sizes->Fail(
            fmt::format("sizes of built-in model '{}' do not apply to model.onnx", section));
      }
    }
  } else {
    const graph::ModelEntry* entry = graph::FindBuiltinModel(model.builtin);
    if (!entry) {
      mapping.Find("builtin")->Fail(fmt::format("unknown model {}; known models: {}",
                                                Quote(model.builtin), fmt::join(models, ", ")));
    }
    // Only the section of the configured model may be given: another model's sizes would be
    // silently ignored.
    for (std::string_view section : models) {
      if (section == model.builtin) continue;
      if (const Value* other = mapping.Find(section)) {
        other->Fail(fmt::format("sizes of model '{}', but model.builtin is {}", section,
                                Quote(model.builtin)));
      }
    }
    std::unique_ptr<graph::ModelOptions> options = entry->defaults();
    if (const Value* section = mapping.Find(model.builtin)) ReadFields(*section, *options);
    model.batch_size = options->default_batch_size();
    model.options = std::move(options);
  }
  VisitFields(value, mapping, model);
  return model;
}

// A device given as a mapping, read through DeviceConfig::Fields() under simulation.gpu_link.
struct DeviceEntry {
  DeviceConfig& device;
  GpuLink link;
  void Fields(ConfigVisitor& v) { device.Fields(v, link); }
};

// devices: the word 'auto' or a list, read by hand (the visitor has no kind for a list of
// mappings); each entry a name, or a mapping read through DeviceConfig::Fields(); then each
// name's form and its uniqueness in the list.
DevicesConfig ReadDevices(const Value& value, const SimulationConfig& simulation) {
  DevicesConfig result;
  if (value.node.IsScalar() && value.node.Scalar() == "auto") return result;
  if (!value.node.IsSequence()) {
    value.Fail("expected a list of devices or 'auto', got " + Describe(value.node));
  }
  if (value.node.size() == 0) value.Fail("at least one device is required (or 'auto')");
  result.automatic = false;
  std::map<std::string, int> line_of_device;
  for (const YAML::Node& item_node : value.node) {
    const Value item{value.file, item_node, item_node.Mark(),
                     fmt::format("{}[{}]", value.path, result.devices.size())};
    DeviceConfig device;
    device.line = item.mark.line + 1;
    Value name = item;
    if (item.node.IsMap()) {
      DeviceEntry entry{device, simulation.gpu_link};
      name = *ReadFields(item, entry).Find("name");
    } else if (!item.node.IsScalar()) {
      item.Fail("expected a device name like 'cpu:0' or a mapping with 'name', got " +
                Describe(item.node));
    } else {
      device.name = ToString(name);
    }
    if (!graph::ParseDeviceName(device.name)) {
      name.Fail(
          fmt::format("invalid device name {}; expected 'cpu:N' or 'cuda:N'", Quote(device.name)));
    }
    auto [first, inserted] = line_of_device.emplace(device.name, device.line);
    if (!inserted) {
      name.Fail(fmt::format("duplicate device '{}' on line {}; first declared on line {}",
                            device.name, device.line, first->second));
    }
    result.devices.push_back(std::move(device));
  }
  return result;
}

// Sees only where documents start; the tree itself is built by YAML::Load.
class DocumentStarts : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> marks;

  void OnDocumentStart(const YAML::Mark& mark) override { marks.push_back(mark); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t,
                const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// Rejects a second document, which YAML::Load would silently drop. YAML::LoadAll is no option: in
// yaml-cpp 0.7 a stray ',' where a document starts makes the parser report empty documents forever
// without consuming it, and LoadAll collects them until memory runs out. Here a document that
// starts where the previous one did is that stuck parser, and a syntax error.
void CheckSingleDocument(const std::string& text, const std::string& file_name) {
  std::istringstream stream(text);
  YAML::Parser parser(stream);
  DocumentStarts starts;
  const std::vector<YAML::Mark>& marks = starts.marks;
  while (marks.size() < 3 && parser.HandleNextDocument(starts)) {
    const YAML::Mark& last = marks.back();
    if (marks.size() >= 2 && marks[marks.size() - 2].pos == last.pos) {
      const std::string token = text.substr(static_cast<size_t>(last.pos), 1);
      throw ConfigError(file_name, last.line + 1, last.column + 1, "",
                        "invalid YAML: unexpected " + Quote(token));
    }
  }
  if (marks.size() > 1) {
    throw ConfigError(file_name, marks[1].line + 1, marks[1].column + 1, "",
                      "a second YAML document starts here; expected exactly one");
  }
}

Config ReadConfig(const YAML::Node& root, const std::string& file_name) {
  const Value top{&file_name, root, root.Mark(), ""};
  if (!root.IsMap()) top.Fail("the top level must be a mapping of sections, got " + Describe(root));
  Mapping sections(
      top, {"model", "devices", "measurement", "search", "simulation", "cluster", "output"});
  Config config;
  config.source = file_name;
  config.model = ReadModel(sections.Require("model"));
  // The simulation first: a device's GPU kind is checked against its gpu_link.
  if (const Value* simulation = sections.Find("simulation")) {
    ReadFields(*simulation, config.simulation);
  }
  if (const Value* devices = sections.Find("devices")) {
    config.devices = ReadDevices(*devices, config.simulation);
  }
  if (const Value* measurement = sections.Find("measurement")) {
    ReadFields(*measurement, config.measurement);
  }
  if (const Value* search = sections.Find("search")) ReadFields(*search, config.search);
  if (const Value* cluster = sections.Find("cluster")) ReadFields(*cluster, config.cluster);
  if (const Value* output = sections.Find("output")) ReadFields(*output, config.output);
  return config;
}

// An ONNX model without model.batch_size takes the batch its file fixes; a file whose batch axis
// is dynamic needs one. Errors point at model.onnx.
void ResolveOnnxBatch(Config& config, const std::string& text) {
  YAML::Mark mark;  // of the key, as every error about a mapping entry
  for (const auto& entry : YAML::Load(text)["model"]) {
    if (entry.first.Scalar() == "onnx") mark = entry.first.Mark();
  }
  const std::string file = config.source.string();
  auto fail = [&](const std::string& message) -> ConfigError {
    return ConfigError(file, mark.line + 1, mark.column + 1, "model.onnx", message);
  };
  graph::OnnxBatch batch;
  try {
    batch = graph::ReadOnnxBatch(config.model.onnx);
  } catch (const graph::GraphError& error) {
    throw fail(error.what());
  }
  if (!batch.fixed) {
    throw fail(
        fmt::format("{}: input '{}' leaves its batch axis (axis 0) dynamic; set model.batch_size",
                    config.model.onnx.string(), batch.input));
  }
  config.model.batch_size = *batch.fixed;
  if (config.model.replicas > config.model.batch_size) {
    throw fail(fmt::format("{} replicas cannot share the file's batch of {}; set model.batch_size",
                           config.model.replicas, config.model.batch_size));
  }
}

}  // namespace

ConfigError::ConfigError(std::string file, int line, int column, std::string key_path,
                         std::string message)
    : std::runtime_error(FormatError(file, line, column, key_path, message)),
      file_(std::move(file)),
      line_(line),
      key_path_(std::move(key_path)) {}

Config ParseConfig(const std::string& yaml_text, const std::string& file_name) {
  try {
    CheckSingleDocument(yaml_text, file_name);
    const YAML::Node root = YAML::Load(yaml_text);
    if (root.IsNull()) {
      throw ConfigError(file_name, 1, 1, "",
                        "no settings found; expected a mapping with at least a 'model' section");
    }
    return ReadConfig(root, file_name);
  } catch (const YAML::Exception& error) {
    // Syntax errors, and a safety net for anything yaml-cpp throws while the tree is read.
    throw ConfigError(file_name, error.mark.line + 1, error.mark.column + 1, "",
                      "invalid YAML: " + Printable(error.msg, 200));
  }
}

Config LoadConfig(const std::filesystem::path& file) {
  const std::string file_name = file.string();
  std::error_code ignored;
  // Opening a directory succeeds on Linux; only the read would fail, with a vaguer reason.
  if (std::filesystem::is_directory(file, ignored)) {
    throw ConfigError(file_name, 0, 0, "", fmt::format("cannot read: {}", std::strerror(EISDIR)));
  }
  std::ifstream stream(file, std::ios::binary);
  if (!stream) {
    throw ConfigError(file_name, 0, 0, "", fmt::format("cannot read: {}", std::strerror(errno)));
  }
  std::ostringstream text;
  text << stream.rdbuf();
  if (stream.bad()) {
    throw ConfigError(file_name, 0, 0, "", fmt::format("cannot read: {}", std::strerror(errno)));
  }
  return ConfigFromText(text.str(), file);
}

Config ConfigFromText(const std::string& yaml_text, const std::filesystem::path& file) {
  Config config = ParseConfig(yaml_text, file.string());
  config.source = file;
  if (config.output.directory.is_relative()) {
    config.output.directory = (file.parent_path() / config.output.directory).lexically_normal();
  }
  if (!config.simulation.profile.empty() && config.simulation.profile.is_relative()) {
    config.simulation.profile = (file.parent_path() / config.simulation.profile).lexically_normal();
  }
  if (!config.model.onnx.empty() && config.model.onnx.is_relative()) {
    config.model.onnx = (file.parent_path() / config.model.onnx).lexically_normal();
  }
  if (!config.cluster.key_file.empty() && config.cluster.key_file.is_relative()) {
    config.cluster.key_file = (file.parent_path() / config.cluster.key_file).lexically_normal();
  }
  if (!config.model.onnx.empty() && config.model.batch_size == 0)
    ResolveOnnxBatch(config, yaml_text);
  return config;
}

}  // namespace placer::config
