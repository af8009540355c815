// `placer worker`: one evaluation worker of a search's pool (cluster/worker_loop.h).
#pragma once

#include <memory>

#include "cli/commands.h"
#include "graph/device.h"

namespace placer::runtime {
struct Processes;
}

namespace placer::cli {

int RunWorkerCommand(const Commands& c);

// For a placement across processes (devices named "w<k>/cpu:N"): this process joins the Gloo
// group of the others torchrun-style (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK; rank 0 hosts
// the store) and says which it is. Null when every device is this process's.
std::shared_ptr<const runtime::Processes> JoinProcessesOf(const graph::DeviceSet& devices);

}  // namespace placer::cli
