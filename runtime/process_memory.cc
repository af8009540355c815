#include "runtime/process_memory.h"

#include <fmt/format.h>
#include <sys/resource.h>

namespace placer::runtime {

int64_t PeakResidentBytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  // Linux reports ru_maxrss in kibibytes (getrusage(2)).
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

std::string DescribePeakMemory() {
  const double bytes = static_cast<double>(PeakResidentBytes());
  return bytes >= 1e9
             ? fmt::format("peak memory: {:.2f} GB resident (this process's high-water mark)",
                           bytes / 1e9)
             : fmt::format("peak memory: {:.0f} MB resident (this process's high-water mark)",
                           bytes / 1e6);
}

}  // namespace placer::runtime
