// `placer compare`: every baseline and the learned search, evaluated alike, in one report.
#pragma once

#include "cli/commands.h"

namespace placer::cli {

int RunCompareCommand(const Commands& commands);

}  // namespace placer::cli
