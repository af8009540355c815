// Chrome trace files (chrome://tracing, Perfetto): one lane per device and per transfer channel.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "graph/evaluator.h"

namespace placer::runtime {

std::string ChromeTraceJson(const std::vector<graph::TraceEvent>& events,
                            const std::string& process);
void WriteChromeTrace(const std::filesystem::path& file,
                      const std::vector<graph::TraceEvent>& events, const std::string& process);

}  // namespace placer::runtime
