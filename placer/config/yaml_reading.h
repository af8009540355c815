// Reading YAML values with errors that name the file, line, column and key path: what
// config.cc's section readers and field_reading.h's visitor are made of (Value, Mapping, the
// scalar and list conversions). Internal to placer_config.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <map>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "placer/config/config.h"

namespace placer::config::reading {

// Text as it may appear in a message: control bytes are escaped and long text is cut, so that
// binary garbage can neither mangle the terminal nor flood it.
inline std::string Printable(const std::string& text, size_t max_chars = 40) {
  std::string printable;
  for (size_t i = 0; i < text.size() && i < max_chars; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    printable +=
        byte < 0x20 || byte == 0x7f ? fmt::format("\\x{:02x}", byte) : std::string(1, text[i]);
  }
  return text.size() > max_chars ? printable + "..." : printable;
}

// fmt rather than operator+: GCC 12 -O3 raises a false -Wrestrict on "'" + std::string.
inline std::string Quote(const std::string& text) { return fmt::format("'{}'", Printable(text)); }

inline std::string Describe(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a mapping";
    default:
      return "nothing";
  }
}

// A YAML value together with what an error about it must report.
struct Value {
  const std::string* file;
  YAML::Node node;
  // The key's position for mapping entries (a null value has no useful position of its own), the
  // item's for list items.
  YAML::Mark mark;
  std::string path;

  [[noreturn]] void Fail(const std::string& message) const {
    throw ConfigError(*file, mark.line + 1, mark.column + 1, path, message);
  }
};

// A mapping checked against its allowed keys up front: unknown, repeated and non-string keys are
// rejected, so readers only look up known names.
class Mapping {
 public:
  Mapping(const Value& value, const std::vector<std::string_view>& allowed) : value_(value) {
    if (value.node.IsNull()) return;  // `section:` with nothing under it keeps the defaults
    if (!value.node.IsMap()) value.Fail("expected a mapping, got " + Describe(value.node));
    for (const auto& entry : value.node) {
      const YAML::Node& key = entry.first;
      if (!key.IsScalar()) {
        Value{value.file, key, key.Mark(), value.path}.Fail("expected a key name, got " +
                                                            Describe(key));
      }
      const std::string& name = key.Scalar();
      Value child{value.file, entry.second, key.Mark(),
                  value.path.empty() ? Printable(name) : value.path + "." + Printable(name)};
      if (std::find(allowed.begin(), allowed.end(), name) == allowed.end()) {
        child.Fail(fmt::format("unknown key {}; expected one of: {}", Quote(name),
                               fmt::join(allowed, ", ")));
      }
      auto [previous, inserted] = entries_.emplace(name, child);
      if (!inserted) {
        child.Fail(
            fmt::format("duplicate key; first given on line {}", previous->second.mark.line + 1));
      }
    }
  }

  const Value* Find(std::string_view key) const {
    auto it = entries_.find(key);
    return it == entries_.end() ? nullptr : &it->second;
  }

  const Value& Require(std::string_view key) const {
    if (const Value* found = Find(key)) return *found;
    value_.Fail(fmt::format("missing required key '{}'", key));
  }

 private:
  Value value_;
  std::map<std::string, Value, std::less<>> entries_;
};

template <typename T>
T ToInteger(const Value& value) {
  if (value.node.IsScalar()) {
    const std::string& text = value.node.Scalar();
    T result{};
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), result);
    if (error == std::errc() && end == text.data() + text.size()) return result;
    if (error == std::errc::result_out_of_range) value.Fail(Quote(text) + " is out of range");
  }
  value.Fail(fmt::format("expected {} integer, got {}",
                         std::is_signed_v<T> ? "an" : "a non-negative", Describe(value.node)));
}

inline double ToNumber(const Value& value) {
  if (value.node.IsScalar()) {
    const std::string& text = value.node.Scalar();
    double result = 0;
    auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), result);
    if (error == std::errc() && end == text.data() + text.size() && std::isfinite(result)) {
      return result;
    }
  }
  value.Fail("expected a number, got " + Describe(value.node));
}

inline bool ToBool(const Value& value) {
  if (value.node.IsScalar()) {
    const std::string& text = value.node.Scalar();
    if (text == "true") return true;
    if (text == "false") return false;
  }
  value.Fail("expected true or false, got " + Describe(value.node));
}

inline std::string ToString(const Value& value) {
  if (!value.node.IsScalar()) value.Fail("expected a string, got " + Describe(value.node));
  if (value.node.Scalar().empty()) value.Fail("must not be empty");
  return value.node.Scalar();
}

// Sets *out from `key` when present. type_identity keeps `minimum` from fighting over T.
template <typename T>
void ReadInteger(const Mapping& mapping, std::string_view key, std::type_identity_t<T> minimum,
                 T* out) {
  if (const Value* value = mapping.Find(key)) {
    const T number = ToInteger<T>(*value);
    if (number < minimum) value->Fail(fmt::format("must be >= {}, got {}", minimum, number));
    *out = number;
  }
}

template <typename T>
void ReadUnsigned(const Mapping& mapping, std::string_view key, T* out) {
  if (const Value* value = mapping.Find(key)) *out = ToInteger<T>(*value);
}

inline void ReadPositive(const Mapping& mapping, std::string_view key, double* out) {
  if (const Value* value = mapping.Find(key)) {
    const double number = ToNumber(*value);
    if (number <= 0) value->Fail(fmt::format("must be > 0, got {}", number));
    *out = number;
  }
}

// A non-empty list of integers in [minimum, maximum] (`what`: "hosts, one per process, e.g. [0,
// 0, 1, 1]"), appended to *out.
inline void ReadIntegers(const Mapping& mapping, std::string_view key, int64_t minimum,
                         int64_t maximum, std::string_view what, std::vector<int>* out) {
  const Value* list = mapping.Find(key);
  if (list == nullptr) return;
  if (!list->node.IsSequence() || list->node.size() == 0) {
    list->Fail(fmt::format("expected a non-empty list of {}", what));
  }
  for (size_t i = 0; i < list->node.size(); ++i) {
    const Value item{list->file, list->node[i], list->node[i].Mark(),
                     fmt::format("{}[{}]", list->path, i)};
    const int64_t number = ToInteger<int64_t>(item);
    if (number < minimum || number > maximum) {
      item.Fail(fmt::format("must be in [{}, {}], got {}", minimum, maximum, number));
    }
    out->push_back(static_cast<int>(number));
  }
}

// A non-empty list of counts in [1, 4096] (`what`: "replica counts, e.g. [1, 2, 4]").
inline void ReadCounts(const Mapping& mapping, std::string_view key, std::string_view what,
                       std::vector<int>* out) {
  ReadIntegers(mapping, key, 1, 4096, what, out);
}

// "'a' or 'b'", "'a', 'b' or 'c'".
inline std::string Alternatives(const std::vector<std::string_view>& choices) {
  std::string text;
  for (size_t k = 0; k < choices.size(); ++k) {
    if (k > 0) text += k + 1 == choices.size() ? " or " : ", ";
    text += fmt::format("'{}'", choices[k]);
  }
  return text;
}

}  // namespace placer::config::reading
