// How much memory this process has held: what `search` and `compare` print at their end, so that
// a user planning a large model sees the planner's own footprint.
#pragma once

#include <cstdint>
#include <string>

namespace placer::runtime {

// The process's peak resident set so far (getrusage's ru_maxrss), in bytes.
int64_t PeakResidentBytes();

// "peak memory: 1.23 GB resident (this process's high-water mark)".
std::string DescribePeakMemory();

}  // namespace placer::runtime
