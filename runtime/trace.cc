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
  // The document is written event by event, each event dumped on its own: a DOM of the whole
  // trace takes several hundred bytes an event, and a 4-replica NMT step has half a million.
  // The text is what dumping the DOM gives (its keys sorted, so "displayTimeUnit" comes first).
  std::string out = R"({"displayTimeUnit":"ms","traceEvents":[)";
  auto append = [&out, first = true](const nlohmann::json& event) mutable {
    if (!first) out += ',';
    first = false;
    out += event.dump();
  };
  append({{"ph", "M"}, {"pid", 1}, {"name", "process_name"}, {"args", {{"name", process}}}});
  int tid = 0;
  for (const auto& [key, unused] : order) {
    tid_of[key.second] = ++tid;
    append({{"ph", "M"},
            {"pid", 1},
            {"tid", tid},
            {"name", "thread_name"},
            {"args", {{"name", key.second}}}});
    append({{"ph", "M"},
            {"pid", 1},
            {"tid", tid},
            {"name", "thread_sort_index"},
            {"args", {{"sort_index", tid}}}});
  }
  for (const graph::TraceEvent& e : events) {
    append({{"ph", "X"},
            {"pid", 1},
            {"tid", tid_of.at(e.lane)},
            {"name", e.name},
            {"ts", e.start_us},
            {"dur", e.duration_us}});
  }
  out += "]}\n";
  return out;
}

void WriteChromeTrace(const std::filesystem::path& file,
                      const std::vector<graph::TraceEvent>& events, const std::string& process) {
  graph::WriteFileAtomically(file, ChromeTraceJson(events, process));
}

}  // namespace placer::runtime
