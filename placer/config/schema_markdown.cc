// configs/SCHEMA.md's generated blocks: the model sections, from the built-in models' options, the
// search table, from the search section's declarations (SearchConfig::Fields), and the GPU kinds'
// table, from their registry (a test checks that the file holds them).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builtin_models.h"
#include "placer/config/config.h"

namespace placer::config {

namespace {

// An options struct's fields as rows of the schema's tables.
class FieldRows final : public search::OptionVisitor {
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
  void Constraint(std::string_view key, std::string_view text) override {
    for (Cells& row : rows_) {
      if (row.key != key) continue;
      row.constraint += row.constraint.empty() ? std::string(text) : fmt::format("; {}", text);
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
  std::vector<std::string> names, sections;
  std::map<int64_t, std::vector<std::string>> by_batch;
  for (const graph::ModelEntry& entry : graph::BuiltinModels()) {
    names.push_back(fmt::format("`{}`", entry.name));
    sections.push_back(fmt::format("`{}`", entry.name));
    by_batch[entry.defaults()->default_batch_size()].push_back(std::string(entry.name));
  }
  std::vector<std::string> batches;
  for (const auto& [batch, models] : by_batch) {
    batches.push_back(fmt::format("`{}` ({})", batch, fmt::join(models, ", ")));
  }
  std::string text(kTableHead);
  text += fmt::format(
      "| `builtin` | string | — (required unless `onnx` is given) | one of: {} | built-in model "
      "whose training step is placed (the registry: `graph/builtin_models.h`) |\n",
      fmt::join(names, ", "));
  text +=
      "| `onnx` | string | (none) | an ONNX file; not together with `builtin` | the model of an "
      "ONNX file instead of a built-in one (see [ONNX models](#onnx-models)); a relative path is "
      "relative to the config file's folder |\n";
  text += fmt::format(
      "| `batch_size` | integer | the model's: {}; an ONNX file's own (the batch its inputs fix; "
      "required when they leave it dynamic) | >= 1 | examples per training step; for an ONNX "
      "file, the extent of axis 0 of every graph input |\n",
      fmt::join(batches, ", "));
  const ModelConfig defaults;
  text += fmt::format(
      "| `learning_rate` | number | `{}` | > 0 | SGD step size |\n"
      "| `init_seed` | integer | `{}` | >= 0 | seed of the weight initialisation |\n"
      "| `replicas` | integer | `{}` | >= 1, <= batch_size | for `evaluate`, `train`, `profile` "
      "and `inspect`: run R replicas of the model, each on 1/R of the minibatch (even shards), "
      "gradients all-reduced before the update; replica r's ops are named `r<r>/<op>`. A "
      "placement file's `replicas:` key takes precedence. The search chooses the replica count "
      "itself (`search.replicas`) |\n",
      defaults.learning_rate, defaults.init_seed, defaults.replicas);
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
