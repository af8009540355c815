// Graph partitioning baselines: METIS k-way partitioning and Scotch static mapping of the task
// graph (task_graph.h) onto the devices. They balance compute and minimise the bytes cut, ignoring
// precedence (so they are a floor, not competitors: REFERENCES.md 2.4) and memory (an
// over-capacity placement is reported in memory_warning).
#pragma once

#include <cstdint>
#include <vector>

#include "placer/baselines/problem.h"
#include "placer/baselines/task_graph.h"

namespace placer::baselines {

// Each device's share of the compute speed (summing to 1): proportional to 1 / (the time all tasks
// take on it), which a general cost model, where each op ranks the devices its own way, reduces to.
// Equal shares when no task costs anything.
std::vector<double> DeviceSpeedShares(const TaskGraph& tasks);

// The undirected weighted graph both partitioners read, in compressed rows (each edge stored in
// both directions, no self loops). Vertex weight: the task's work, its time on each device relative
// to that device's total, averaged over the devices (device-independent, summing to about
// kTotalVertexWeight), at least 1. Edge weight: the bytes between the two tasks both ways (forward
// values, their gradients, side traffic), scaled down when they would sum past kTotalEdgeWeight so
// 32-bit partitioner integers do not overflow, at least 1.
struct PartitionGraph {
  static constexpr int64_t kTotalVertexWeight = 1'000'000;
  static constexpr int64_t kTotalEdgeWeight = 100'000'000;
  std::vector<int32_t> offsets;  // num_tasks + 1
  std::vector<int32_t> neighbours;
  std::vector<int32_t> vertex_weights;
  std::vector<int32_t> edge_weights;  // parallel to neighbours
};
PartitionGraph BuildPartitionGraph(const TaskGraph& tasks);

struct MetisOptions {
  int seed = 1;
  double imbalance = 0.05;  // each part may exceed its target weight by this fraction
};

// METIS_PartGraphKway into one part per device with target weights (tpwgts) by DeviceSpeedShares;
// part i goes to device i. One device, or no tasks: all on device 0. Fewer tasks than devices:
// one part per task, on the fastest devices (METIS 5.1's k-way is unreliable when parts outnumber
// vertices).
BaselineResult MetisPartition(const PlacementProblem& problem, const MetisOptions& options = {});

struct ScotchOptions {
  int seed = 1;
  double imbalance = 0.05;
};

// SCOTCH_graphMap onto a weighted complete architecture (SCOTCH_archCmpltw) whose vertex weights
// are the devices' speed shares, with the default mapping strategy. Run single-threaded in a
// context of its own with a fixed seed, so the mapping is deterministic.
BaselineResult ScotchMapping(const PlacementProblem& problem, const ScotchOptions& options = {});

}  // namespace placer::baselines
