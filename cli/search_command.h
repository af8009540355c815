// `placer search`: the learned placement search on a config, with its final side-by-side check.
#pragma once

#include "cli/commands.h"

namespace placer::cli {

int RunSearchCommand(const Commands& commands);

}  // namespace placer::cli
