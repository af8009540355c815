#include "placer/baselines/m_topo.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

#include "placer/baselines/task_graph.h"

namespace placer::baselines {

BaselineResult MTopo(const PlacementProblem& problem, const MTopoOptions& options) {
  const Stopwatch stopwatch;
  const TaskGraph tasks(problem);
  CheckMemoryCanFit(tasks);
  const int devices = tasks.num_devices();

  int64_t total_bytes = 0, largest_bytes = 0;
  for (int task = 0; task < tasks.num_tasks(); ++task) {
    total_bytes += tasks.memory_bytes(task);
    largest_bytes = std::max(largest_bytes, tasks.memory_bytes(task));
  }
  const int64_t share = (total_bytes + devices - 1) / devices + largest_bytes;

  MemoryLedger ledger(tasks);
  std::vector<int64_t> own_bytes(static_cast<size_t>(devices), 0);
  std::vector<int> task_devices(static_cast<size_t>(tasks.num_tasks()), 0);
  int device = 0;
  for (int task = 0; task < tasks.num_tasks(); ++task) {
    while (true) {
      const bool last = device + 1 == devices;
      const bool over_share =
          options.uniform && !last &&
          own_bytes[static_cast<size_t>(device)] + tasks.memory_bytes(task) > share;
      const std::string why = ledger.WhyItDoesNotFit(task, device);
      if (!over_share && why.empty()) break;
      if (last) {
        throw BaselineError(fmt::format("m-TOPO ran out of devices: {}, and no device follows {}",
                                        why, tasks.device_names().back()));
      }
      ++device;
    }
    ledger.Place(task, device);
    own_bytes[static_cast<size_t>(device)] += tasks.memory_bytes(task);
    task_devices[static_cast<size_t>(task)] = device;
  }
  return MakeResult(options.uniform ? "m-TOPO (uniform)" : "m-TOPO", tasks, task_devices,
                    stopwatch);
}

}  // namespace placer::baselines
