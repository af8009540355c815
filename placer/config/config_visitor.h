// The kinds of field the config's own sections declare (model, devices, measurement, simulation,
// cluster, output), beyond the search's (placer/option_visitor.h): each section's struct
// (config.h) names its keys once, with default (the member's initialiser), bound and one-line
// meaning, in a Fields(ConfigVisitor&) method (placer/config/sections.cc); the YAML reader, its
// key lists and configs/SCHEMA.md's tables all visit those lists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "placer/option_visitor.h"

namespace placer::config {

// What a GPU kind (runtime/sim/gpu_kinds.h) must be besides one of the registry's kinds.
struct GpuKindRule {
  // The device the kind is for (devices[i].kind): one named but not a GPU (cuda:N) is refused.
  // Empty: not a device's (simulation.gpu_kind).
  std::string_view device;
  bool nvlink = false;  // simulation.gpu_link is nvlink: a kind with NVLink
};

class ConfigVisitor : public search::OptionVisitor {
 public:
  // A non-empty string; not given, `value` stays.
  virtual void Text(std::string_view key, std::string& value, std::string_view meaning) = 0;
  // A non-empty string the section must give, unless it gives the key `unless` (empty: always).
  virtual void Required(std::string_view key, std::string& value, std::string_view unless,
                        std::string_view meaning) = 0;
  // One of `names`, called `noun` in messages ("unknown GPU efficiency 'x'; expected ...").
  virtual void NamedOneOf(std::string_view key, size_t& index,
                          std::span<const std::string_view> names, std::string_view noun,
                          std::string_view meaning) = 0;
  // A GPU kind's name, of the registry and within `rule`.
  virtual void GpuKindName(std::string_view key, std::string& value, const GpuKindRule& rule,
                           std::string_view meaning) = 0;
  // A byte size above 0 ("4GiB", "512MiB", a byte count: ParseByteSize); nullopt: unlimited.
  virtual void ByteSize(std::string_view key, std::optional<int64_t>& value,
                        std::string_view meaning) = 0;
  // A non-empty list of integers in [minimum, maximum], of `what` (for messages: "hosts, one per
  // process, e.g. [0, 0, 1, 1]"); not given, `value` stays.
  virtual void Integers(std::string_view key, std::vector<int>& value, int64_t minimum,
                        int64_t maximum, std::string_view what, std::string_view meaning) = 0;
  // What the schema's Default column says of `key` instead of its value: a default that something
  // else decides (the model's batch), or that is another field's.
  virtual void DefaultText(std::string_view /*key*/, std::string_view /*text*/) {}

  // An enum chosen by name, `names` in enum order.
  template <typename Enum>
  void NamedOneOf(std::string_view key, Enum& value, std::span<const std::string_view> names,
                  std::string_view noun, std::string_view meaning) {
    auto index = static_cast<size_t>(value);
    NamedOneOf(key, index, names, noun, meaning);
    value = static_cast<Enum>(index);
  }
};

}  // namespace placer::config
