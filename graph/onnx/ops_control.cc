// ONNX control flow: If whose condition is known at load time, inlined as the branch it takes.
// The IR has static shapes and no control flow; a condition computed from the minibatch or the
// weights is refused, naming it.
#include <fmt/format.h>

#include "graph/onnx/loader.h"

namespace placer::graph::onnx {
namespace {

void ConvertIf(Loader& l) {
  const Known& condition =
      l.KnownData(0, "If's condition, which must choose the branch when the model is loaded");
  if (condition.size() != 1) {
    throw GraphError(fmt::format("the condition has {} elements, not 1", condition.size()));
  }
  l.InlineBranch(condition.F(0) != 0 ? "then_branch" : "else_branch");
}

}  // namespace

void AddControlOps(OpTable& table) { table["If"] = {nullptr, ConvertIf}; }

}  // namespace placer::graph::onnx
