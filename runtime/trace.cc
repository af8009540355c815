#include "runtime/trace.h"

#include <map>
#include <nlohmann/json.hpp>

#include "graph/placement.h"

namespace placer::runtime {

std::string ChromeTraceJson(const std::vector<graph::TraceEvent>& events,
                            const std::string& process) {
  // Device lanes first, then transfer channels ("from->to"), each sorted by name.
  std::map<std::pair<bool, std::string>, int> order;
  for (const graph::TraceEvent& e : events)
    order.emplace(std::pair{e.lane.find("->") != std::string::npos, e.lane}, 0);
  std::map<std::string, int> tid_of;
  nlohmann::json trace = nlohmann::json::array();
  trace.push_back(
      {{"ph", "M"}, {"pid", 1}, {"name", "process_name"}, {"args", {{"name", process}}}});
  int tid = 0;
  for (const auto& [key, unused] : order) {
    tid_of[key.second] = ++tid;
    trace.push_back({{"ph", "M"},
                     {"pid", 1},
                     {"tid", tid},
                     {"name", "thread_name"},
                     {"args", {{"name", key.second}}}});
    trace.push_back({{"ph", "M"},
                     {"pid", 1},
                     {"tid", tid},
                     {"name", "thread_sort_index"},
                     {"args", {{"sort_index", tid}}}});
  }
  for (const graph::TraceEvent& e : events) {
    trace.push_back({{"ph", "X"},
                     {"pid", 1},
                     {"tid", tid_of.at(e.lane)},
                     {"name", e.name},
                     {"ts", e.start_us},
                     {"dur", e.duration_us}});
  }
  return nlohmann::json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump() + "\n";
}

void WriteChromeTrace(const std::filesystem::path& file,
                      const std::vector<graph::TraceEvent>& events, const std::string& process) {
  graph::WriteFileAtomically(file, ChromeTraceJson(events, process));
}

}  // namespace placer::runtime
