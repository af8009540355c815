// `placer inspect`: the training step as a table (ops, shapes, parameters, FLOPs, bytes).
#pragma once

#include <ostream>
#include <string>

#include "graph/grouping.h"
#include "graph/ir.h"

namespace placer::cli {

void PrintInspection(const graph::Graph& graph, std::ostream& out);

// The groups the search would place (`name` says how they were made): per group its forward ops,
// first and last op, and its share of the step's FLOPs (backward and update ops included).
void PrintGroups(const graph::Graph& graph, const graph::Grouping& grouping,
                 const std::string& name, std::ostream& out);

}  // namespace placer::cli
