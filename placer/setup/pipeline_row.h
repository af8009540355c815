// The pipeline baseline's row of `placer compare` (placer/baselines/pipeline.h): the model's
// contiguous stages over every device, at the micro-batch count and schedule with the shortest
// simulated step, and every (M, schedule) it tried, for the log.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "placer/report.h"
#include "placer/report_svg.h"
#include "placer/setup/search_setup.h"

namespace placer::setup {

struct PipelineRow {
  search::ReportRow row;
  std::vector<std::string> log;  // one line per micro-batch count and schedule tried
  std::optional<search::PlacementPicture> picture;  // of the fastest, when one is valid
};

// Simulated with the setup's cost model. The micro-batch counts are 1, 2, 4, ... up to 32 that
// divide the batch, that the model can be built for (an ONNX export with a fixed batch only at 1)
// and whose M copies of the step stay under 250k ops; the log says which were left out and why.
// The picture's simulated schedule is also written as a Perfetto trace into `directory`
// (trace_pipeline.simulated.json).
PipelineRow PipelineRowFor(const SearchSetup& setup, const std::filesystem::path& directory);

}  // namespace placer::setup
