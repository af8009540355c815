// The kinds of field an options struct of the search declares, beyond a built-in model's
// (graph/model_options.h): an options struct names each configurable field once, with its key,
// bound and one-line meaning, in a Fields(OptionVisitor&) method, and its rules across fields in
// Check(); the config reader (placer/config), its key list and configs/SCHEMA.md's table all visit
// that list. Torch-free.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "graph/model_options.h"

namespace placer::search {

class OptionVisitor : public graph::FieldVisitor {
 public:
  using graph::FieldVisitor::Int;
  // An int of at least `minimum`.
  virtual void Int(std::string_view key, int& value, int64_t minimum, std::string_view meaning) = 0;
  // Any 64-bit unsigned integer (a seed).
  virtual void Unsigned(std::string_view key, uint64_t& value, std::string_view meaning) = 0;
  // A finite number of at least 0.
  virtual void NonNegative(std::string_view key, double& value, std::string_view meaning) = 0;
  virtual void Bool(std::string_view key, bool& value, std::string_view meaning) = 0;
  // One of `names`; `index` is the chosen one's.
  virtual void OneOf(std::string_view key, size_t& index, std::span<const std::string_view> names,
                     std::string_view meaning) = 0;
  // A non-empty list of counts in [1, 4096], of `what` (for messages: "replica counts, e.g. [1,
  // 2, 4]"); nullopt when not given, which means `fallback`.
  virtual void Counts(std::string_view key, std::optional<std::vector<int>>& value,
                      std::string_view what, std::string_view fallback,
                      std::string_view meaning) = 0;
  // A file, as written (relative to the config's folder); empty when not given.
  virtual void Path(std::string_view key, std::filesystem::path& value,
                    std::string_view meaning) = 0;
  // What the schema adds to `key`'s bound: a rule that Check() (or the set-up) enforces.
  virtual void Constraint(std::string_view /*key*/, std::string_view /*text*/) {}

  // An enum chosen by name, `names` in enum order.
  template <typename Enum, size_t N>
  void OneOf(std::string_view key, Enum& value, const std::array<std::string_view, N>& names,
             std::string_view meaning) {
    auto index = static_cast<size_t>(value);
    OneOf(key, index, std::span<const std::string_view>(names), meaning);
    value = static_cast<Enum>(index);
  }
  // Counts whose empty list means `fallback`.
  void Counts(std::string_view key, std::vector<int>& value, std::string_view what,
              std::string_view fallback, std::string_view meaning) {
    std::optional<std::vector<int>> given;
    if (!value.empty()) given = value;
    Counts(key, given, what, fallback, meaning);
    value = given.value_or(std::vector<int>{});
  }
};

}  // namespace placer::search
