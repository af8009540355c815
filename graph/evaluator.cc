#include "graph/evaluator.h"

#include <algorithm>

namespace placer::graph {

static_assert(
    [] {
      for (size_t k = 0; k < kEvaluatorKinds.size(); ++k) {
        if (static_cast<size_t>(kEvaluatorKinds[k].kind) != k) return false;
      }
      return true;
    }(),
    "kEvaluatorKinds lists the kinds in enum order (Describe indexes it by the enum)");

const EvaluatorKindInfo& Describe(EvaluatorKind kind) {
  return kEvaluatorKinds.at(static_cast<size_t>(kind));
}

std::string_view ToString(EvaluatorKind kind) { return Describe(kind).name; }

std::optional<EvaluatorKind> ParseEvaluatorKind(std::string_view name) {
  const auto* it = std::find_if(kEvaluatorKinds.begin(), kEvaluatorKinds.end(),
                                [&](const EvaluatorKindInfo& info) { return info.name == name; });
  if (it == kEvaluatorKinds.end()) return std::nullopt;
  return it->kind;
}

}  // namespace placer::graph
