// Parameter values shared by every graph that holds the same ones. A step builds its forward once
// per replica, micro-batch or shard, and an ONNX export is read again for each (its shape
// subgraphs depend on the batch): OPT-350m's 1.3 GB of initializers were kept once per replica,
// 8.3 GB resident for two. Interned, equal values are one vector while any graph holds them.
#pragma once

#include <memory>
#include <vector>

namespace placer::graph {

// `values`, or an equal vector a live graph already holds. Thread-safe.
std::shared_ptr<const std::vector<float>> SharedValues(std::vector<float> values);

}  // namespace placer::graph
