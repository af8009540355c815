// One process of cross_process_test: joins the Gloo group torchrun-style (MASTER_ADDR,
// MASTER_PORT, WORLD_SIZE, RANK), runs its part of a placement across processes for
// cross_process::kSteps steps and writes the parameters its devices hold.
// Usage: cross_process_step CASE OUTPUT_FILE
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <exception>

#include "runtime/cluster/process_group.h"
#include "runtime/processes.h"
#include "tests/cross_process_cases.h"

int main(int argc, char** argv) {
  using namespace placer;
  if (argc != 3) {
    fmt::print(stderr, "usage: cross_process_step CASE OUTPUT_FILE\n");
    return 2;
  }
  try {
    at::set_num_threads(1);  // 1-thread workers: libgomp's spinning slows localhost transfers
    const cluster::Rendezvous rendezvous = cluster::RendezvousFromEnvironment();
    cross_process::Case c = cross_process::MakeCase(argv[1]);
    const bool gpus = std::any_of(c.devices.begin(), c.devices.end(),
                                  [](const auto& d) { return d.type == graph::DeviceType::kCuda; });
    cluster::ProcessGroups groups =
        cluster::JoinProcessGroups(rendezvous, std::chrono::seconds(60), gpus);
    auto processes = std::make_shared<runtime::Processes>(
        runtime::Processes{std::move(groups.gloo), std::move(groups.nccl)});
    runtime::ExecutorOptions options;
    options.processes = processes;
    runtime::Executor executor(c.graph, c.devices, c.placement, c.parameters, options);
    for (int step = 0; step < cross_process::kSteps; ++step) {
      runtime::StepResult r = executor.RunStep(c.batch, /*time_limit_seconds=*/120);
      // Bytes this process sent to devices of other processes by send/recv (the test checks that
      // data parallelism sends none: its gradients cross by allreduce).
      int64_t sent = 0;
      for (const graph::TransferStats& transfer : r.transfers) {
        if (transfer.from != "host" &&
            graph::DeviceProcess(transfer.from) != graph::DeviceProcess(transfer.to)) {
          sent += transfer.bytes;
        }
      }
      fmt::print("rank {} step {}: {:.3f} s, loss {:.6f}, {} bytes sent to other processes\n",
                 rendezvous.rank, step, r.seconds, r.loss, sent);
    }
    cross_process::WriteParameters(argv[2], executor.Parameters());
    return 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "cross_process_step: {}\n", e.what());
    return 1;
  }
}
