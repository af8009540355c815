// Reading a section whose keys an options struct declares in Fields() (graph/model_options.h,
// placer/option_visitor.h): the section's key list and its reader both visit the declarations, and
// the struct's Check() runs after. A built-in model's section and the search section are read so.
// Internal to placer_config.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "placer/config/yaml_reading.h"
#include "placer/option_visitor.h"

namespace placer::config::reading {

// The keys of an options struct's fields.
class FieldKeys final : public search::OptionVisitor {
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
  std::vector<std::string_view> views() const { return {keys_.begin(), keys_.end()}; }

 private:
  void Add(std::string_view key) { keys_.emplace_back(key); }
  std::vector<std::string> keys_;
};

// Reads an options struct's fields from its section, with the fields' own bounds.
class YamlFields final : public search::OptionVisitor {
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
             std::string_view) override {
    const Value* found = mapping_.Find(key);
    if (!found) return;
    const std::string chosen = ToString(*found);
    const auto it = std::find(names.begin(), names.end(), chosen);
    if (it == names.end()) {
      std::string what(key);
      std::replace(what.begin(), what.end(), '_', ' ');
      found->Fail(fmt::format("unknown {} {}; expected {}", what, Quote(chosen),
                              Alternatives({names.begin(), names.end()})));
    }
    index = static_cast<size_t>(it - names.begin());
  }
  void Counts(std::string_view key, std::optional<std::vector<int>>& value, std::string_view what,
              std::string_view, std::string_view) override {
    if (mapping_.Find(key) != nullptr) ReadCounts(mapping_, key, what, &value.emplace());
  }
  void Path(std::string_view key, std::filesystem::path& value, std::string_view) override {
    if (const Value* found = mapping_.Find(key)) value = ToString(*found);
  }

 private:
  const Mapping& mapping_;
};

// Reads `section` into `options` (an options struct with Fields() and Check(), over its defaults):
// unknown keys, values out of bounds and broken rules are errors, the latter at the first field
// of the rule's that the section gives.
template <typename Options>
void ReadFields(const Value& section, Options& options) {
  FieldKeys keys;
  options.Fields(keys);
  const std::vector<std::string_view> allowed = keys.views();
  Mapping mapping(section, allowed);
  YamlFields reader(mapping);
  options.Fields(reader);
  if (std::optional<graph::FieldError> error = options.Check()) {
    for (const std::string& field : error->fields) {
      if (const Value* value = mapping.Find(field)) value->Fail(error->message);
    }
    section.Fail(error->message);
  }
}

}  // namespace placer::config::reading
