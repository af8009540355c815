#include "graph/ring_all_reduce.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>

#include "graph/ops.h"
#include "graph/training_step.h"

namespace placer::graph {

std::vector<TensorId> RingAllReduce(const Graph& graph, const std::vector<TensorId>& values,
                                    int axis, const AddRingOp& add) {
  const size_t members = values.size();
  const int64_t length = graph.tensor(values[0]).shape.at(static_cast<size_t>(axis));
  const auto chunks = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(members), length));
  std::vector<int64_t> sizes(chunks, length / static_cast<int64_t>(chunks));
  for (size_t j = 0; j < static_cast<size_t>(length % static_cast<int64_t>(chunks)); ++j)
    ++sizes[j];
  auto ring_op = [&](size_t member, std::string step, const char* type,
                     std::vector<TensorId> inputs) {
    RingOp op{.member = member, .step = std::move(step), .type = type, .inputs = std::move(inputs)};
    op.attrs.Set(std::string(kCollectiveHop), int64_t{1});
    if (op.type == op_types::kSplit || op.type == op_types::kConcat) {
      op.attrs.Set("axis", int64_t{axis});
    }
    if (op.type == op_types::kSplit) op.attrs.Set("sizes", sizes);
    return add(std::move(op));
  };
  // pieces[m][j]: member m's value of chunk j (its own, then partial or full sums).
  std::vector<std::vector<TensorId>> pieces(members);
  for (size_t m = 0; m < members; ++m) {
    pieces[m] = chunks == 1 ? std::vector<TensorId>{values[m]}
                            : ring_op(m, "split", op_types::kSplit, {values[m]});
  }
  for (size_t j = 0; j < chunks; ++j) {
    // Reduce-scatter: from member j + 1 around the ring to member j.
    TensorId partial = pieces[(j + 1) % members][j];
    for (size_t hop = 2; hop <= members; ++hop) {
      const size_t m = (j + hop) % members;
      partial = ring_op(m, fmt::format("reduce{}", j), op_types::kAddN, {partial, pieces[m][j]})[0];
    }
    pieces[j][j] = partial;
    // All-gather: from member j around the ring.
    for (size_t hop = 1; hop < members; ++hop) {
      const size_t m = (j + hop) % members;
      pieces[m][j] = ring_op(m, fmt::format("gather{}", j), op_types::kIdentity,
                             {pieces[(m + members - 1) % members][j]})[0];
    }
  }
  std::vector<TensorId> sums(members);
  for (size_t m = 0; m < members; ++m) {
    sums[m] = chunks == 1 ? pieces[m][0] : ring_op(m, "concat", op_types::kConcat, pieces[m])[0];
  }
  return sums;
}

}  // namespace placer::graph
