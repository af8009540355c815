// The pictures of `placer compare`'s report (placer/report_svg.h) for candidates of a search
// set-up: the step's schedule and the devices of every group.
#pragma once

#include <filesystem>
#include <string>

#include "placer/report_svg.h"
#include "placer/setup/search_setup.h"

namespace placer::setup {

// The picture of `candidate`, shown as `method`. Its schedule is the search's simulator's
// (profiled costs where the config measures) or, where the config measures, the last timed step
// of a real run of its own; each is also written as a Perfetto trace into `directory`, named
// `<file_stem>.json` (measured) and `<file_stem>.simulated.json`, which the picture links. Where
// the simulator finds the placement invalid there is no schedule, and the picture says why.
search::PlacementPicture PictureOf(const SearchSetup& setup, const std::string& method,
                                   const search::Candidate& candidate,
                                   const std::filesystem::path& directory,
                                   const std::string& file_stem);

}  // namespace placer::setup
