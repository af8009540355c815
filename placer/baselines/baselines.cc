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

namespace {

// Every algorithm by name, in BaselineNames' order: a new baseline is its files and a row here.
struct Algorithm {
  std::string_view name;
  BaselineResult (*run)(const PlacementProblem&);
};
constexpr Algorithm kAlgorithms[] = {
    {"m-topo", [](const PlacementProblem& p) { return MTopo(p); }},
    {"m-etf", [](const PlacementProblem& p) { return MEtf(p); }},
    {"m-sct", [](const PlacementProblem& p) { return MSct(p); }},
    {"heft", [](const PlacementProblem& p) { return Heft(p); }},
    {"cpop", [](const PlacementProblem& p) { return Cpop(p); }},
    {"metis", [](const PlacementProblem& p) { return MetisPartition(p); }},
    {"scotch", [](const PlacementProblem& p) { return ScotchMapping(p); }},
};

}  // namespace

const std::vector<std::string>& BaselineNames() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const Algorithm& a : kAlgorithms) out.emplace_back(a.name);
    return out;
  }();
  return names;
}

BaselineResult RunBaseline(std::string_view name, const PlacementProblem& problem) {
  for (const Algorithm& a : kAlgorithms) {
    if (a.name == name) return a.run(problem);
  }
  throw std::invalid_argument(fmt::format("unknown baseline '{}'; the baselines are: {}", name,
                                          fmt::join(BaselineNames(), ", ")));
}

}  // namespace placer::baselines
