// configs/SCHEMA.md's generated blocks: every section's table from its declarations (the model's
// from ModelConfig's, with one section per built-in model from its options; the search's from
// SearchConfig::Fields; devices, measurement, simulation, cluster and output from theirs,
// placer/config/sections.cc), and the GPU kinds' table from their registry (config_test checks
// that the file holds them).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builtin_models.h"
#include "placer/config/config.h"

namespace placer::config {

namespace {

// An options struct's fields as rows of the schema's tables.
class FieldRows final : public ConfigVisitor {
 public:
  void Int(std::string_view key, int64_t& value, int64_t minimum,
           std::string_view meaning) override {
    Row(key, "integer", fmt::format("`{}`", value), fmt::format(">= {}", minimum), meaning);
  }
  void Int(std::string_view key, int& value, int64_t minimum, std::string_view meaning) override {
    int64_t wide = value;
    Int(key, wide, minimum, meaning);
  }
  void Positive(std::string_view key, double& value, std::string_view meaning) override {
    Row(key, "number", fmt::format("`{}`", Shown(value)), "> 0", meaning);
  }
  void Choice(std::string_view key, std::string& value,
              const std::vector<std::string_view>& choices, std::string_view meaning) override {
    Row(key, "string", fmt::format("`{}`", value), Alternatives(choices), meaning);
  }
  void Unsigned(std::string_view key, uint64_t& value, std::string_view meaning) override {
    Row(key, "integer", fmt::format("`{}`", value), ">= 0 (64-bit)", meaning);
  }
  void NonNegative(std::string_view key, double& value, std::string_view meaning) override {
    Row(key, "number", fmt::format("`{}`", Shown(value)), ">= 0", meaning);
  }
  void Bool(std::string_view key, bool& value, std::string_view meaning) override {
    Row(key, "boolean", value ? "`true`" : "`false`", "", meaning);
  }
  void OneOf(std::string_view key, size_t& index, std::span<const std::string_view> names,
             std::string_view meaning) override {
    Row(key, "string", fmt::format("`{}`", names[index]),
        Alternatives({names.begin(), names.end()}), meaning);
  }
  void Counts(std::string_view key, std::optional<std::vector<int>>& value, std::string_view,
              std::string_view fallback, std::string_view meaning) override {
    Row(key, "list of integers",
        value ? fmt::format("`[{}]`", fmt::join(*value, ", ")) : std::string(fallback),
        "each in [1, 4096]", meaning);
  }
  void Path(std::string_view key, std::filesystem::path& value, std::string_view meaning) override {
    Row(key, "path", value.empty() ? "none" : fmt::format("`{}`", value.string()), "", meaning);
  }
  void Text(std::string_view key, std::string& value, std::string_view meaning) override {
    Row(key, "string", fmt::format("`{}`", value.empty() ? "\"\"" : value), "", meaning);
  }
  void Required(std::string_view key, std::string&, std::string_view unless,
                std::string_view meaning) override {
    Row(key, "string",
        unless.empty() ? "— (required)" : fmt::format("— (required unless `{}` is given)", unless),
        "", meaning);
  }
  void NamedOneOf(std::string_view key, size_t& index, std::span<const std::string_view> names,
                  std::string_view, std::string_view meaning) override {
    OneOf(key, index, names, meaning);
  }
  void GpuKindName(std::string_view key, std::string& value, const GpuKindRule&,
                   std::string_view meaning) override {
    Row(key, "string", value.empty() ? "none" : fmt::format("`{}`", value),
        "one of the [GPU kinds](#gpu-kinds)", meaning);
  }
  void ByteSize(std::string_view key, std::optional<int64_t>& value,
                std::string_view meaning) override {
    Row(key, "byte size", value ? fmt::format("`{}`", *value) : "unlimited", "> 0", meaning);
  }
  void Integers(std::string_view key, std::vector<int>& value, int64_t minimum, int64_t maximum,
                std::string_view, std::string_view meaning) override {
    Row(key, "list of integers", fmt::format("`[{}]`", fmt::join(value, ", ")),
        fmt::format("each in [{}, {}]", minimum, maximum), meaning);
  }
  void Constraint(std::string_view key, std::string_view text) override {
    for (Cells& row : rows_) {
      if (row.key != key) continue;
      row.constraint += row.constraint.empty() ? std::string(text) : fmt::format("; {}", text);
    }
  }
  void DefaultText(std::string_view key, std::string_view text) override {
    for (Cells& row : rows_) {
      if (row.key == key) row.fallback = text;
    }
  }
  std::string rows() const {
    std::string text;
    for (const Cells& row : rows_) {
      text += fmt::format("| `{}` | {} | {} | {} | {} |\n", row.key, row.type, row.fallback,
                          row.constraint, row.meaning);
    }
    return text;
  }

 private:
  struct Cells {
    std::string key, type, fallback, constraint, meaning;
  };
  // "60.0", "0.0005".
  static std::string Shown(double value) {
    return value == std::floor(value) ? fmt::format("{:.1f}", value) : fmt::format("{}", value);
  }
  // "`a` or `b`", "`a`, `b` or `c`".
  static std::string Alternatives(const std::vector<std::string_view>& choices) {
    std::string text;
    for (size_t k = 0; k < choices.size(); ++k) {
      if (k > 0) text += k + 1 == choices.size() ? " or " : ", ";
      text += fmt::format("`{}`", choices[k]);
    }
    return text;
  }
  void Row(std::string_view key, std::string_view type, const std::string& fallback,
           const std::string& constraint, std::string_view meaning) {
    rows_.push_back(
        {std::string(key), std::string(type), fallback, constraint, std::string(meaning)});
  }
  std::vector<Cells> rows_;
};

constexpr std::string_view kTableHead =
    "| Key | Type | Default | Constraint | Meaning |\n|---|---|---|---|---|\n";

}  // namespace

std::string ModelSchemaMarkdown() {
  std::vector<std::string> sections;
  for (const graph::ModelEntry& entry : graph::BuiltinModels()) {
    sections.push_back(fmt::format("`{}`", entry.name));
  }
  ModelConfig defaults;
  FieldRows rows;
  defaults.SourceFields(rows);
  defaults.Fields(rows);
  std::string text = std::string(kTableHead) + rows.rows();
  // Read by hand (config.cc's ReadModel): a mapping, whose keys are the model's own.
  text += fmt::format(
      "| {} | mapping | see below | | sizes of that built-in model. Only the section of the "
      "model named by `builtin` may be given (another's would be silently unused) |\n",
      fmt::join(sections, ", "));
  for (const graph::ModelEntry& entry : graph::BuiltinModels()) {
    std::unique_ptr<graph::ModelOptions> options = entry.defaults();
    FieldRows rows;
    options->Fields(rows);
    text += fmt::format("\n### `model.{}`\n\n{}\n\n{}{}", entry.name, entry.description, kTableHead,
                        rows.rows());
  }
  return text;
}

std::string SearchSchemaMarkdown() {
  SearchConfig defaults;
  FieldRows rows;
  defaults.Fields(rows);
  return std::string(kTableHead) + rows.rows();
}

std::string SectionSchemaMarkdown(std::string_view section) {
  FieldRows rows;
  std::string text;
  if (section == "devices") {
    // The list itself is read by hand (config.cc's ReadDevices); its entries' keys are declared.
    text = fmt::format("{}\n\n", kDevicesShape);
    DeviceConfig{}.Fields(rows);
  } else if (section == "measurement") {
    MeasurementConfig{}.Fields(rows);
  } else if (section == "simulation") {
    SimulationConfig{}.Fields(rows);
  } else if (section == "cluster") {
    ClusterConfig{}.Fields(rows);
  } else if (section == "output") {
    OutputConfig{}.Fields(rows);
  } else {
    throw std::invalid_argument(fmt::format("no generated schema block for '{}'", section));
  }
  return text + std::string(kTableHead) + rows.rows();
}

namespace {

// "1,555"; "494.5" (the data sheets' figures are whole but for a few TFLOP/s).
std::string Thousands(double value) {
  value = std::round(value * 100) / 100;  // 362.05 TFLOP/s, not 362.04999999999995
  const auto whole = static_cast<int64_t>(std::llround(value));
  if (static_cast<double>(whole) != value) return fmt::format("{}", value);
  const std::string digits = std::to_string(whole);
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
}

std::string Ordinal(int n) {
  return fmt::format("{}{}", n, n == 1 ? "st" : n == 2 ? "nd" : n == 3 ? "rd" : "th");
}

}  // namespace

std::string GpuKindSchemaMarkdown() {
  std::string text =
      "| Kind | FP32 | TF32 | BF16 | FP16 | Memory | Bandwidth | NVLink | PCIe | NVSwitch | SMs | "
      "Source |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const sim::GpuKind& kind : sim::GpuKinds()) {
    const std::string nvlink =
        kind.nvlink_generation == 0
            ? "none"
            : fmt::format("{} gen{}, {} GB/s", Ordinal(kind.nvlink_generation),
                          kind.nvswitch ? "" : " bridge",
                          Thousands(kind.nvlink_bytes_per_second / 1e9));
    text +=
        fmt::format("| `{}` | {} | {} | {} | {} | {} GB | {} GB/s | {} | Gen{} | {} | {} | {} |\n",
                    kind.name, Thousands(kind.fp32_flops / 1e12), Thousands(kind.tf32_flops / 1e12),
                    Thousands(kind.bf16_flops / 1e12), Thousands(kind.fp16_flops / 1e12),
                    Thousands(static_cast<double>(kind.memory_bytes) / 1e9),
                    Thousands(kind.memory_bandwidth / 1e9), nvlink, kind.pcie_generation,
                    kind.nvswitch ? "yes" : "no", kind.streaming_multiprocessors, kind.source);
  }
  return text;
}

}  // namespace placer::config
