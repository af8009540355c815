// The common input and output of the algorithmic baselines: the placements a learned policy has to
// beat (Baechi's m-TOPO, m-ETF and m-SCT, HEFT, METIS and Scotch). Torch-free.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph/device.h"
#include "graph/grouping.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "runtime/sim/cost_model.h"

namespace placer::baselines {

// The index of the trial (anything with a graph::EvaluationResult `result`) whose valid step is
// the shortest, the first of equals; -1 when none is valid. For the grids of the pipeline and
// Megatron-style baselines.
template <class Trial>
int FastestValid(const std::vector<Trial>& trials) {
  int best = -1;
  for (size_t i = 0; i < trials.size(); ++i) {
    if (trials[i].result.valid &&
        (best < 0 ||
         trials[i].result.step_seconds < trials[static_cast<size_t>(best)].result.step_seconds)) {
      best = static_cast<int>(i);
    }
  }
  return best;
}

// How the baselines count a group's memory against Device::memory_capacity (0 = unlimited).
enum class MemoryModel : uint8_t {
  // The parameters its ops own and the forward values (activations) they write, plus a copy of each
  // forward value or parameter it reads from another device or from host memory: what lives at the
  // turn from forward to backward, Baechi's persistent + output memory. An estimate: gradients are
  // left out, so a device can still run out in the simulator (about 10% above it for LeNet).
  kParametersAndActivations,
  // Everything its ops write (gradients too) and a copy of everything they read from elsewhere,
  // never freed: an upper bound on the simulator's peak, so an accepted placement never runs out,
  // at the price of refusing capacities that would do (about 1.8x the peak for LeNet).
  kEverythingWritten,
};

// What every baseline places: the groups of `grouping` (forward ops; backward and update ops run
// with their forward op) over `devices`, with op and transfer times from `costs`. The pointers are
// not owned and must outlive the call.
struct PlacementProblem {
  const graph::Graph* graph = nullptr;
  const graph::Grouping* grouping = nullptr;
  graph::DeviceSet devices;
  const sim::CostModel* costs = nullptr;
  MemoryModel memory_model = MemoryModel::kParametersAndActivations;
};

// A problem no placement can solve, or one an algorithm could not solve (m-TOPO running out of
// devices, m-ETF finding no device that holds a group). The message names the group and the
// device.
class BaselineError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct BaselineResult {
  std::string algorithm;           // "m-ETF", "METIS", ...
  graph::Placement placement;      // per op, as graph::ToPlacement writes it
  std::vector<int> group_devices;  // per group of the problem's grouping
  double seconds_to_place = 0;     // wall time to produce the placement, preprocessing included
  // The makespan of the algorithm's own schedule, for the list schedulers; an estimate under their
  // model (see task_graph.h), not the simulator's step time.
  std::optional<double> estimated_step_seconds;
  // Empty unless an algorithm that ignores memory (HEFT, METIS, Scotch, a single device) produced a
  // placement that may not fit: names each device over its capacity. The memory-aware algorithms
  // throw instead.
  std::string memory_warning;
};

// Wall time since construction, for BaselineResult::seconds_to_place.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  double Seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

}  // namespace placer::baselines
