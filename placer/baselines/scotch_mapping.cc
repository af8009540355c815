#include <fmt/format.h>
#include <scotch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "placer/baselines/partitioners.h"

namespace placer::baselines {

static_assert(sizeof(SCOTCH_Num) == sizeof(int32_t), "PartitionGraph holds 32-bit Scotch numbers");

namespace {

void Check(int status, const char* call) {
  if (status != 0) {
    throw BaselineError(fmt::format("Scotch: {} failed (it printed why on standard error)", call));
  }
}

// Scotch objects, released in reverse order of construction.
struct ScotchGraph {
  SCOTCH_Graph graph;
  ScotchGraph() { Check(SCOTCH_graphInit(&graph), "SCOTCH_graphInit"); }
  ~ScotchGraph() { SCOTCH_graphExit(&graph); }
  ScotchGraph(const ScotchGraph&) = delete;
  ScotchGraph& operator=(const ScotchGraph&) = delete;
};
struct ScotchArch {
  SCOTCH_Arch arch;
  ScotchArch() { Check(SCOTCH_archInit(&arch), "SCOTCH_archInit"); }
  ~ScotchArch() { SCOTCH_archExit(&arch); }
  ScotchArch(const ScotchArch&) = delete;
  ScotchArch& operator=(const ScotchArch&) = delete;
};
struct ScotchStrat {
  SCOTCH_Strat strat;
  ScotchStrat() { Check(SCOTCH_stratInit(&strat), "SCOTCH_stratInit"); }
  ~ScotchStrat() { SCOTCH_stratExit(&strat); }
  ScotchStrat(const ScotchStrat&) = delete;
  ScotchStrat& operator=(const ScotchStrat&) = delete;
};
struct ScotchContext {
  SCOTCH_Context context;
  ScotchContext() { Check(SCOTCH_contextInit(&context), "SCOTCH_contextInit"); }
  ~ScotchContext() { SCOTCH_contextExit(&context); }
  ScotchContext(const ScotchContext&) = delete;
  ScotchContext& operator=(const ScotchContext&) = delete;
};

}  // namespace

BaselineResult ScotchMapping(const PlacementProblem& problem, const ScotchOptions& options) {
  const Stopwatch stopwatch;
  const TaskGraph tasks(problem);
  CheckMemoryCanFit(tasks);
  const int num_tasks = tasks.num_tasks();
  const int num_devices = tasks.num_devices();
  std::vector<int> task_devices(static_cast<size_t>(num_tasks), 0);
  if (num_devices > 1 && num_tasks > 0) {
    const PartitionGraph partition_graph = BuildPartitionGraph(tasks);
    std::vector<SCOTCH_Num> verttab(partition_graph.offsets.begin(), partition_graph.offsets.end());
    std::vector<SCOTCH_Num> velotab(partition_graph.vertex_weights.begin(),
                                    partition_graph.vertex_weights.end());
    std::vector<SCOTCH_Num> edgetab(partition_graph.neighbours.begin(),
                                    partition_graph.neighbours.end());
    std::vector<SCOTCH_Num> edlotab(partition_graph.edge_weights.begin(),
                                    partition_graph.edge_weights.end());
    ScotchGraph graph;
    Check(
        SCOTCH_graphBuild(&graph.graph, /*baseval=*/0, num_tasks, verttab.data(),
                          /*vendtab=*/nullptr, velotab.data(), /*vlbltab=*/nullptr,
                          static_cast<SCOTCH_Num>(edgetab.size()), edgetab.data(), edlotab.data()),
        "SCOTCH_graphBuild");
    Check(SCOTCH_graphCheck(&graph.graph), "SCOTCH_graphCheck");

    // Device weights: speed shares relative to the slowest device's, in thousandths.
    const std::vector<double> shares = DeviceSpeedShares(tasks);
    const double slowest = *std::min_element(shares.begin(), shares.end());
    std::vector<SCOTCH_Num> device_weights;
    for (double share : shares) {
      device_weights.push_back(static_cast<SCOTCH_Num>(std::llround(1000 * share / slowest)));
    }
    ScotchArch arch;
    Check(SCOTCH_archCmpltw(&arch.arch, num_devices, device_weights.data()), "SCOTCH_archCmpltw");

    ScotchStrat strat;
    Check(SCOTCH_stratGraphMapBuild(&strat.strat, SCOTCH_STRATDEFAULT, num_devices,
                                    options.imbalance),
          "SCOTCH_stratGraphMapBuild");

    // Debian's Scotch 7 is threaded; one thread and a fixed seed make its result repeatable.
    ScotchContext context;
    Check(SCOTCH_contextThreadSpawn(&context.context, 1, nullptr), "SCOTCH_contextThreadSpawn");
    Check(SCOTCH_contextRandomClone(&context.context), "SCOTCH_contextRandomClone");
    SCOTCH_contextRandomSeed(&context.context, options.seed);
    Check(SCOTCH_contextOptionSetNum(&context.context, SCOTCH_OPTIONNUMDETERMINISTIC, 1),
          "SCOTCH_contextOptionSetNum");
    ScotchGraph bound;
    Check(SCOTCH_contextBindGraph(&context.context, &graph.graph, &bound.graph),
          "SCOTCH_contextBindGraph");

    std::vector<SCOTCH_Num> parttab(static_cast<size_t>(num_tasks), 0);
    Check(SCOTCH_graphMap(&bound.graph, &arch.arch, &strat.strat, parttab.data()),
          "SCOTCH_graphMap");
    for (int task = 0; task < num_tasks; ++task) {
      const SCOTCH_Num device = parttab[static_cast<size_t>(task)];
      if (device < 0 || device >= num_devices) {
        throw BaselineError(fmt::format("SCOTCH_graphMap put task {} on terminal {} of {}", task,
                                        device, num_devices));
      }
      task_devices[static_cast<size_t>(task)] = device;
    }
  }
  return MakeResult("Scotch", tasks, task_devices, stopwatch);
}

}  // namespace placer::baselines
