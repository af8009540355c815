// `placer worker`: one evaluation worker of a search's pool (cluster/worker_loop.h).
#pragma once

#include "cli/commands.h"

namespace placer::cli {

int RunWorkerCommand(const Commands& c);

}  // namespace placer::cli
