#include <fmt/format.h>
#include <metis.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "placer/baselines/partitioners.h"

namespace placer::baselines {

static_assert(sizeof(idx_t) == sizeof(int32_t), "PartitionGraph holds 32-bit METIS indices");

BaselineResult MetisPartition(const PlacementProblem& problem, const MetisOptions& options) {
  const Stopwatch stopwatch;
  const TaskGraph tasks(problem);
  CheckMemoryCanFit(tasks);
  const int num_tasks = tasks.num_tasks();
  const std::vector<double> shares = DeviceSpeedShares(tasks);

  // The devices that get a part: all of them, or the fastest when there are fewer tasks.
  std::vector<int> devices(static_cast<size_t>(tasks.num_devices()));
  std::iota(devices.begin(), devices.end(), 0);
  std::stable_sort(devices.begin(), devices.end(), [&](int a, int b) {
    return shares[static_cast<size_t>(a)] > shares[static_cast<size_t>(b)];
  });
  devices.resize(static_cast<size_t>(std::min(tasks.num_devices(), num_tasks)));
  std::sort(devices.begin(), devices.end());

  std::vector<int> task_devices(static_cast<size_t>(num_tasks), devices.empty() ? 0 : devices[0]);
  if (devices.size() > 1) {
    const PartitionGraph graph = BuildPartitionGraph(tasks);
    std::vector<idx_t> xadj(graph.offsets.begin(), graph.offsets.end());
    std::vector<idx_t> adjncy(graph.neighbours.begin(), graph.neighbours.end());
    std::vector<idx_t> vwgt(graph.vertex_weights.begin(), graph.vertex_weights.end());
    std::vector<idx_t> adjwgt(graph.edge_weights.begin(), graph.edge_weights.end());
    idx_t nvtxs = num_tasks, ncon = 1, nparts = static_cast<idx_t>(devices.size()), objval = 0;
    double share_sum = 0;
    for (int d : devices) share_sum += shares[static_cast<size_t>(d)];
    std::vector<real_t> tpwgts;
    for (int d : devices) {
      tpwgts.push_back(static_cast<real_t>(shares[static_cast<size_t>(d)] / share_sum));
    }
    real_t ubvec = static_cast<real_t>(1 + options.imbalance);
    idx_t metis_options[METIS_NOPTIONS];
    METIS_SetDefaultOptions(metis_options);
    metis_options[METIS_OPTION_SEED] = options.seed;
    metis_options[METIS_OPTION_NUMBERING] = 0;
    std::vector<idx_t> part(static_cast<size_t>(num_tasks), 0);
    const int status = METIS_PartGraphKway(&nvtxs, &ncon, xadj.data(), adjncy.data(), vwgt.data(),
                                           /*vsize=*/nullptr, adjwgt.data(), &nparts, tpwgts.data(),
                                           &ubvec, metis_options, &objval, part.data());
    if (status != METIS_OK) {
      throw BaselineError(
          fmt::format("METIS_PartGraphKway failed with status {} on {} tasks into {} parts", status,
                      num_tasks, nparts));
    }
    for (int task = 0; task < num_tasks; ++task) {
      const idx_t p = part[static_cast<size_t>(task)];
      if (p < 0 || p >= nparts) {
        throw BaselineError(
            fmt::format("METIS_PartGraphKway put task {} in part {} of {}", task, p, nparts));
      }
      task_devices[static_cast<size_t>(task)] = devices[static_cast<size_t>(p)];
    }
  }
  return MakeResult("METIS", tasks, task_devices, stopwatch);
}

}  // namespace placer::baselines
