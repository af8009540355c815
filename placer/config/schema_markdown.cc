// configs/SCHEMA.md's generated blocks: the model sections, from the built-in models' options, and
// the GPU kinds' table, from their registry (a test checks that the file holds them).
#include <fmt/format.h>

#include <cmath>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builtin_models.h"
#include "placer/config/config.h"

namespace placer::config {

namespace {

// A built-in model's fields as rows of the schema's tables.
class FieldRows final : public graph::FieldVisitor {
 public:
  void Int(std::string_view key, int64_t& value, int64_t minimum,
           std::string_view meaning) override {
    Row(key, "integer", fmt::format("`{}`", value), fmt::format(">= {}", minimum), meaning);
  }
  void Positive(std::string_view key, double& value, std::string_view meaning) override {
    const std::string shown =
        value == std::floor(value) ? fmt::format("{:.1f}", value) : fmt::format("{}", value);
    Row(key, "number", fmt::format("`{}`", shown), "> 0", meaning);
  }
  void Choice(std::string_view key, std::string& value,
              const std::vector<std::string_view>& choices, std::string_view meaning) override {
    std::vector<std::string> quoted;
    for (std::string_view choice : choices) quoted.push_back(fmt::format("`{}`", choice));
    std::string constraint;
    for (size_t k = 0; k < quoted.size(); ++k) {
      if (k > 0) constraint += k + 1 == quoted.size() ? " or " : ", ";
      constraint += quoted[k];
    }
    Row(key, "string", fmt::format("`{}`", value), constraint, meaning);
  }
  const std::string& rows() const { return rows_; }

 private:
  void Row(std::string_view key, std::string_view type, const std::string& fallback,
           const std::string& constraint, std::string_view meaning) {
    rows_ +=
        fmt::format("| `{}` | {} | {} | {} | {} |\n", key, type, fallback, constraint, meaning);
  }
  std::string rows_;
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

namespace {

// "1,555"; "494.5" (the data sheets' figures are whole but for a few TFLOP/s).
std::string Thousands(double value) {
  value = std::round(value * 100) / 100;  // 362.05 TFLOP/s, not 362.04999999999995
  const auto whole = static_cast<int64_t>(std::llround(value));
  if (static_cast<double>(whole) != value) return fmt::format("{}", value);
  std::string digits = std::to_string(whole);
  for (int at = static_cast<int>(digits.size()) - 3; at > 0; at -= 3) {
    digits.insert(static_cast<size_t>(at), ",");
  }
  return digits;
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
