// `placer inspect`: the training step as a table (ops, shapes, parameters, FLOPs, bytes).
#pragma once

#include <ostream>

#include "graph/ir.h"

namespace placer::cli {

void PrintInspection(const graph::Graph& graph, std::ostream& out);

}  // namespace placer::cli
