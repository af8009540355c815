#include "placer/baselines/baselines.h"

#include <fmt/format.h>

#include <stdexcept>

#include "placer/baselines/task_graph.h"

namespace placer::baselines {

BaselineResult SingleDevice(const PlacementProblem& problem, int device) {
  const Stopwatch stopwatch;
  const TaskGraph tasks(problem);
  if (device < 0 || device >= tasks.num_devices()) {
    throw std::invalid_argument(fmt::format("device index {} is out of range: there are {} devices",
                                            device, tasks.num_devices()));
  }
  CheckMemoryCanFit(tasks);
  return MakeResult(fmt::format("single device ({})", tasks.device_names()[device]), tasks,
                    std::vector<int>(static_cast<size_t>(tasks.num_tasks()), device), stopwatch);
}

const std::vector<std::string>& BaselineNames() {
  static const std::vector<std::string> names = {"m-topo", "m-etf", "m-sct",
                                                 "heft",   "metis", "scotch"};
  return names;
}

BaselineResult RunBaseline(std::string_view name, const PlacementProblem& problem) {
  if (name == "m-topo") return MTopo(problem);
  if (name == "m-etf") return MEtf(problem);
  if (name == "m-sct") return MSct(problem);
  if (name == "heft") return Heft(problem);
  if (name == "metis") return MetisPartition(problem);
  if (name == "scotch") return ScotchMapping(problem);
  throw std::invalid_argument(fmt::format("unknown baseline '{}'; the baselines are: {}", name,
                                          fmt::join(BaselineNames(), ", ")));
}

}  // namespace placer::baselines
