// Reading a section whose keys an options struct declares in Fields() (graph/model_options.h,
// placer/option_visitor.h, placer/config/config_visitor.h): the section's key list and its reader
// both visit the declarations, and the struct's Check() runs after. Every section is read so, but
// for what config.cc's readers say they read by hand. Internal to placer_config.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/device.h"
#include "placer/config/config_visitor.h"
#include "placer/config/yaml_reading.h"
#include "runtime/sim/gpu_kinds.h"

namespace placer::config::reading {

// The keys of an options struct's fields.
class FieldKeys final : public ConfigVisitor {
 public:
  void Int(std::string_view key, int64_t&, int64_t, std::string_view) override { Add(key); }
  void Int(std::string_view key, int&, int64_t, std::string_view) override { Add(key); }
  void Positive(std::string_view key, double&, std::string_view) override { Add(key); }
  void Choice(std::string_view key, std::string&, const std::vector<std::string_view>&,
              std::string_view) override {
    Add(key);
  }
  void Unsigned(std::string_view key, uint64_t&, std::string_view) override { Add(key); }
  void NonNegative(std::string_view key, double&, std::string_view) override { Add(key); }
  void Bool(std::string_view key, bool&, std::string_view) override { Add(key); }
  void OneOf(std::string_view key, size_t&, std::span<const std::string_view>,
             std::string_view) override {
    Add(key);
  }
  void Counts(std::string_view key, std::optional<std::vector<int>>&, std::string_view,
              std::string_view, std::string_view) override {
    Add(key);
  }
  void Path(std::string_view key, std::filesystem::path&, std::string_view) override { Add(key); }
  void Text(std::string_view key, std::string&, std::string_view) override { Add(key); }
  void Required(std::string_view key, std::string&, std::string_view, std::string_view) override {
    Add(key);
  }
  void NamedOneOf(std::string_view key, size_t&, std::span<const std::string_view>,
                  std::string_view, std::string_view) override {
    Add(key);
  }
  void GpuKindName(std::string_view key, std::string&, const GpuKindRule&,
                   std::string_view) override {
    Add(key);
  }
  void ByteSize(std::string_view key, std::optional<int64_t>&, std::string_view) override {
    Add(key);
  }
  void Integers(std::string_view key, std::vector<int>&, int64_t, int64_t, std::string_view,
                std::string_view) override {
    Add(key);
  }
  std::vector<std::string_view> views() const { return {keys_.begin(), keys_.end()}; }

 private:
  void Add(std::string_view key) { keys_.emplace_back(key); }
  std::vector<std::string> keys_;
};

// Reads an options struct's fields from its section, with the fields' own bounds.
class YamlFields final : public ConfigVisitor {
 public:
  explicit YamlFields(const Mapping& mapping) : mapping_(mapping) {}
  void Int(std::string_view key, int64_t& value, int64_t minimum, std::string_view) override {
    ReadInteger(mapping_, key, minimum, &value);
  }
  void Int(std::string_view key, int& value, int64_t minimum, std::string_view) override {
    ReadInteger(mapping_, key, static_cast<int>(minimum), &value);
  }
  void Positive(std::string_view key, double& value, std::string_view) override {
    ReadPositive(mapping_, key, &value);
  }
  void Choice(std::string_view key, std::string& value,
              const std::vector<std::string_view>& choices, std::string_view) override {
    const Value* found = mapping_.Find(key);
    if (!found) return;
    std::string chosen = ToString(*found);
    if (std::find(choices.begin(), choices.end(), chosen) == choices.end()) {
      found->Fail(
          fmt::format("unknown {} {}; expected {}", key, Quote(chosen), Alternatives(choices)));
    }
    value = chosen;
  }
  void Unsigned(std::string_view key, uint64_t& value, std::string_view) override {
    ReadUnsigned(mapping_, key, &value);
  }
  void NonNegative(std::string_view key, double& value, std::string_view) override {
    if (const Value* found = mapping_.Find(key)) {
      const double number = ToNumber(*found);
      if (number < 0) found->Fail(fmt::format("must be >= 0, got {}", number));
      value = number;
    }
  }
  void Bool(std::string_view key, bool& value, std::string_view) override {
    if (const Value* found = mapping_.Find(key)) value = ToBool(*found);
  }
  // "unknown budget split 'x'; expected 'fixed' or 'earned'".
  void OneOf(std::string_view key, size_t& index, std::span<const std::string_view> names,
             std::string_view meaning) override {
    std::string noun(key);
    std::replace(noun.begin(), noun.end(), '_', ' ');
    NamedOneOf(key, index, names, noun, meaning);
  }
  void Counts(std::string_view key, std::optional<std::vector<int>>& value, std::string_view what,
              std::string_view, std::string_view) override {
    if (mapping_.Find(key) != nullptr) ReadCounts(mapping_, key, what, &value.emplace());
  }
  void Path(std::string_view key, std::filesystem::path& value, std::string_view) override {
    if (const Value* found = mapping_.Find(key)) value = ToString(*found);
  }
  void Text(std::string_view key, std::string& value, std::string_view) override {
    if (const Value* found = mapping_.Find(key)) value = ToString(*found);
  }
  // "missing required key 'name'", at the section.
  void Required(std::string_view key, std::string& value, std::string_view unless,
                std::string_view) override {
    if (!unless.empty() && mapping_.Find(key) == nullptr && mapping_.Find(unless) != nullptr) {
      return;
    }
    value = ToString(mapping_.Require(key));
  }
  // "unknown precision 'fp64'; expected 'fp32', 'tf32', 'bf16' or 'fp16'".
  void NamedOneOf(std::string_view key, size_t& index, std::span<const std::string_view> names,
                  std::string_view noun, std::string_view) override {
    const Value* found = mapping_.Find(key);
    if (!found) return;
    const std::string chosen = ToString(*found);
    const auto it = std::find(names.begin(), names.end(), chosen);
    if (it == names.end()) {
      found->Fail(fmt::format("unknown {} {}; expected {}", noun, Quote(chosen),
                              Alternatives({names.begin(), names.end()})));
    }
    index = static_cast<size_t>(it - names.begin());
  }
  void GpuKindName(std::string_view key, std::string& value, const GpuKindRule& rule,
                   std::string_view) override {
    const Value* found = mapping_.Find(key);
    if (!found) return;
    if (!rule.device.empty()) {
      const std::optional<graph::DeviceName> device = graph::ParseDeviceName(rule.device);
      if (device && device->type != graph::DeviceType::kCuda) {
        found->Fail(fmt::format("a GPU kind for {}, which is not a GPU (cuda:N)",
                                Quote(std::string(rule.device))));
      }
    }
    const std::string name = ToString(*found);
    const sim::GpuKind* kind = sim::FindGpuKind(name);
    if (kind == nullptr) {
      found->Fail(
          fmt::format("unknown GPU kind {}; known kinds: {}", Quote(name), sim::GpuKindNameList()));
    }
    if (rule.nvlink && kind->nvlink_bytes_per_second <= 0) {
      found->Fail(fmt::format("GPU kind {} has no NVLink, but simulation.gpu_link is 'nvlink'",
                              Quote(name)));
    }
    value = name;
  }
  void ByteSize(std::string_view key, std::optional<int64_t>& value, std::string_view) override {
    const Value* found = mapping_.Find(key);
    if (!found) return;
    const std::optional<int64_t> bytes =
        found->node.IsScalar() ? ParseByteSize(found->node.Scalar()) : std::nullopt;
    if (!bytes) {
      found->Fail("expected a byte size like '4GiB', '512MiB' or a byte count, got " +
                  Describe(found->node));
    }
    if (*bytes <= 0) found->Fail(fmt::format("must be > 0, got {}", *bytes));
    value = *bytes;
  }
  void Integers(std::string_view key, std::vector<int>& value, int64_t minimum, int64_t maximum,
                std::string_view what, std::string_view) override {
    if (mapping_.Find(key) == nullptr) return;
    value.clear();
    ReadIntegers(mapping_, key, minimum, maximum, what, &value);
  }

 private:
  const Mapping& mapping_;
};

// The keys `options.Fields()` declares, in declaration order.
template <typename Options>
std::vector<std::string> KeysOf(Options& options) {
  FieldKeys keys;
  options.Fields(keys);
  const std::vector<std::string_view> views = keys.views();
  return {views.begin(), views.end()};
}

// Reads `mapping` (of `section`) into `options` through its Fields(), over its defaults: values
// out of bounds are errors, and so are broken rules of its Check() (where it has one), at the
// first field of the rule's that the section gives.
template <typename Options>
void VisitFields(const Value& section, const Mapping& mapping, Options& options) {
  YamlFields reader(mapping);
  options.Fields(reader);
  if constexpr (requires { options.Check(); }) {
    if (std::optional<graph::FieldError> error = options.Check()) {
      for (const std::string& field : error->fields) {
        if (const Value* value = mapping.Find(field)) value->Fail(error->message);
      }
      section.Fail(error->message);
    }
  }
}

// Reads `section` into `options`: its keys are the declared ones (others are errors), read as
// VisitFields does. The section's entries, for rules read by hand after.
template <typename Options>
Mapping ReadFields(const Value& section, Options& options) {
  const std::vector<std::string> keys = KeysOf(options);
  Mapping mapping(section, {keys.begin(), keys.end()});
  VisitFields(section, mapping, options);
  return mapping;
}

}  // namespace placer::config::reading
