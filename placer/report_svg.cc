#include "placer/report_svg.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <map>
#include <optional>
#include <sstream>

#include "graph/micro_batches.h"

namespace placer::search {
namespace {

// Geometry shared by both pictures, so that they line up one above the other.
constexpr int kLabelWidth = 150;  // lane and strip labels, right-aligned
constexpr int kPlotWidth = 760;

std::string Time(double us) {
  if (us < 1000) return fmt::format("{:.0f} us", us);
  if (us < 1e6) return fmt::format("{:.2f} ms", us / 1e3);
  return fmt::format("{:.2f} s", us / 1e6);
}

std::string SvgOpen(int width, int height, const std::string& title) {
  return fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" )"
      R"(font-size="11" role="img" aria-label="{}">)",
      width, height, EscapeXml(title));
}

int IndexOf(const std::vector<std::string>& devices, const std::string& name) {
  auto it = std::find(devices.begin(), devices.end(), name);
  return it == devices.end() ? -1 : static_cast<int>(it - devices.begin());
}

// A lane's events drawn as bars: neighbours closer than half a pixel merge, unless they belong to
// different micro-batches of a pipelined step (a stage's micro-batches run back to back, and each
// is drawn, so that the picture shows them per stage).
struct Bar {
  double x0 = 0, x1 = 0;
  double start_us = 0, end_us = 0;
  int count = 0;
  std::string first, last;
};

std::vector<Bar> BarsOf(std::vector<const graph::TraceEvent*> events, double total_us) {
  std::sort(events.begin(), events.end(),
            [](const auto* a, const auto* b) { return a->start_us < b->start_us; });
  std::vector<Bar> bars;
  for (const graph::TraceEvent* e : events) {
    const double end = e->start_us + e->duration_us;
    const double x0 = kLabelWidth + kPlotWidth * e->start_us / total_us;
    const double x1 = kLabelWidth + kPlotWidth * end / total_us;
    if (!bars.empty() && x0 <= bars.back().x1 + 0.5 &&
        graph::MicroBatchOfName(e->name) == graph::MicroBatchOfName(bars.back().first)) {
      Bar& b = bars.back();
      b.x1 = std::max(b.x1, x1);
      b.end_us = std::max(b.end_us, end);
      b.last = e->name;
      ++b.count;
    } else {
      bars.push_back({x0, x1, e->start_us, end, 1, e->name, e->name});
    }
  }
  return bars;
}

// "/layer1/layer1.0/conv1/Conv" -> "layer1/layer1.0/conv1", cut to `chars`.
std::string ShortLabel(const std::string& op, size_t chars) {
  std::string label = op;
  if (!label.empty() && label.front() == '/') label.erase(0, 1);
  if (size_t slash = label.rfind('/'); slash != std::string::npos && slash > 0) {
    label.erase(slash);
  }
  if (label.size() > chars) label = chars > 1 ? label.substr(0, chars - 1) + "…" : "";
  return label;
}

}  // namespace

std::string DeviceColour(int index) {
  // Tableau 10: distinguishable, also for most colour-blind readers.
  static constexpr std::array<const char*, 10> kPalette = {
      "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
      "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};
  return index < 0 ? "#999999" : kPalette[static_cast<size_t>(index) % kPalette.size()];
}

std::string ScheduleSvg(const PlacementPicture& p) {
  std::map<std::string, std::vector<const graph::TraceEvent*>> by_lane;
  double total_us = p.step_seconds * 1e6;
  for (const graph::TraceEvent& e : p.schedule) {
    by_lane[e.lane].push_back(&e);
    total_us = std::max(total_us, e.start_us + e.duration_us);
  }
  if (p.schedule.empty() || total_us <= 0) return "<p>(no schedule)</p>";
  // Every device, in the placement's order, then the channels that carried something: the
  // minibatch's ("host->...") first.
  std::vector<std::string> lanes = p.devices;
  std::vector<std::string> channels;
  for (const auto& [lane, unused] : by_lane) {
    if (IndexOf(p.devices, lane) < 0) channels.push_back(lane);
  }
  std::stable_partition(channels.begin(), channels.end(),
                        [](const std::string& c) { return c.starts_with("host->"); });
  lanes.insert(lanes.end(), channels.begin(), channels.end());

  const int lane_height = 16, gap = 4, top = 6, axis = 28;
  const int height = top + static_cast<int>(lanes.size()) * (lane_height + gap) + axis;
  std::ostringstream svg;
  svg << SvgOpen(kLabelWidth + kPlotWidth + 30, height, p.method + ": schedule of one step");
  // Lane labels and backgrounds, the time axis's lines over them, then the bars on top.
  const int bottom = top + static_cast<int>(lanes.size()) * (lane_height + gap);
  for (size_t i = 0; i < lanes.size(); ++i) {
    const int y = top + static_cast<int>(i) * (lane_height + gap);
    const bool transfer = IndexOf(p.devices, lanes[i]) < 0;
    svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end"{}>{}</text>)", kLabelWidth - 6,
                       y + lane_height - 4, transfer ? R"( fill="#555")" : "", EscapeXml(lanes[i]));
    svg << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="#f2f2f2"/>)",
                       kLabelWidth, y, kPlotWidth, lane_height);
  }
  for (int k = 0; k <= 4; ++k) {
    const double x = kLabelWidth + kPlotWidth * k / 4.0;
    svg << fmt::format(R"(<line x1="{0:.1f}" y1="{1}" x2="{0:.1f}" y2="{2}" stroke="#ccc"/>)", x,
                       top, bottom);
    svg << fmt::format(R"(<text x="{:.1f}" y="{}" text-anchor="middle" fill="#555">{}</text>)", x,
                       bottom + 14, Time(total_us * k / 4.0));
  }
  int y = top;
  for (const std::string& lane : lanes) {
    const bool transfer = IndexOf(p.devices, lane) < 0;
    // A transfer is coloured as the device it leaves (grey for host memory).
    const std::string from = transfer ? lane.substr(0, lane.find("->")) : lane;
    const std::string colour = DeviceColour(IndexOf(p.devices, from));
    auto events = by_lane.find(lane);
    if (events != by_lane.end()) {
      for (const Bar& b : BarsOf(events->second, total_us)) {
        const std::string what = b.count == 1
                                     ? b.first
                                     : fmt::format("{} {}: {} ... {}", b.count,
                                                   transfer ? "copies" : "ops", b.first, b.last);
        // A pipelined step's micro-batches alternate in shade and carry their number, so that
        // each stage's micro-batches and the bubble between them show.
        const int micro_batch =
            transfer ? -1 : graph::MicroBatchOfName(b.first).value_or(-1);  // -1: none
        std::string shade = transfer ? R"( fill-opacity="0.7")" : "";
        if (micro_batch % 2 == 1) shade = R"( fill-opacity="0.55")";
        svg << fmt::format(R"(<rect x="{:.2f}" y="{}" width="{:.2f}" height="{}" fill="{}"{}>)"
                           R"(<title>{}: {} to {}</title></rect>)",
                           b.x0, y + (transfer ? 3 : 0), std::max(b.x1 - b.x0, 0.6),
                           lane_height - (transfer ? 6 : 0), colour, shade, EscapeXml(what),
                           Time(b.start_us), Time(b.end_us));
        if (micro_batch >= 0 && b.x1 - b.x0 >= 12 &&
            graph::MicroBatchOfName(b.last).value_or(-1) == micro_batch) {
          svg << fmt::format(
              R"(<text x="{:.2f}" y="{}" text-anchor="middle" fill="#fff" font-size="9">{}</text>)",
              0.5 * (b.x0 + b.x1), y + lane_height - 4, micro_batch);
        }
      }
    }
    y += lane_height + gap;
  }
  svg << "</svg>";
  return svg.str();
}

std::string LayerStripSvg(const PlacementPicture& p) {
  if (p.layers.empty()) return "<p>(no groups)</p>";
  const int top = 4, strip = 26, label_rows = 2, row = 12;
  const double cell = static_cast<double>(kPlotWidth) / static_cast<double>(p.layers.size());
  std::ostringstream svg;
  svg << SvgOpen(kLabelWidth + kPlotWidth + 30, top + strip + label_rows * row + 8,
                 p.method + ": device of every group");
  svg << R"(<g shape-rendering="crispEdges">)";  // no seams between cells of one colour
  svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">input → loss</text>)",
                     kLabelWidth - 6, top + strip / 2 + 4);
  // A segment is a run of groups on the same devices; each is labelled with its first group
  // where there is room.
  size_t segment_start = 0;
  int labels = 0;
  for (size_t k = 0; k < p.layers.size(); ++k) {
    const LayerCell& layer = p.layers[k];
    const double x = kLabelWidth + cell * static_cast<double>(k);
    std::vector<std::string> names;
    for (int d : layer.devices) names.push_back(p.devices.at(static_cast<size_t>(d)));
    svg << fmt::format("<g><title>group {}: {} ({} op{}) on {}</title>", k, EscapeXml(layer.label),
                       layer.ops, layer.ops == 1 ? "" : "s",
                       EscapeXml(fmt::format("{}", fmt::join(names, ", "))));
    const double stripe = static_cast<double>(strip) / std::max<size_t>(1, layer.devices.size());
    for (size_t j = 0; j < layer.devices.size(); ++j) {
      svg << fmt::format(
          R"(<rect x="{:.2f}" y="{:.2f}" width="{:.2f}" height="{:.2f}" fill="{}"/>)", x,
          top + stripe * static_cast<double>(j), cell, stripe, DeviceColour(layer.devices[j]));
    }
    svg << "</g>";
    const bool last = k + 1 == p.layers.size();
    if (last || p.layers[k + 1].devices != layer.devices) {
      const double x0 = kLabelWidth + cell * static_cast<double>(segment_start);
      const double width = cell * static_cast<double>(k + 1 - segment_start);
      if (segment_start > 0) {
        svg << fmt::format(R"(<line x1="{0:.2f}" y1="{1}" x2="{0:.2f}" y2="{2}" stroke="#222"/>)",
                           x0, top - 2, top + strip + 2);
      }
      if (width >= 40) {
        const int row_y = top + strip + row * (1 + labels % label_rows);
        svg << fmt::format(
            R"(<text x="{:.2f}" y="{}" fill="#333" font-size="10">{}</text>)", x0 + 2, row_y,
            EscapeXml(ShortLabel(p.layers[segment_start].label, static_cast<size_t>(width / 6.0))));
        ++labels;
      }
      segment_start = k + 1;
    }
  }
  svg << "</g></svg>";
  return svg.str();
}

std::string PicturesHtml(const std::vector<PlacementPicture>& pictures) {
  if (pictures.empty()) return "";
  std::ostringstream out;
  out << "<h2>What runs where, and when</h2><p>For the learned placement and the best baseline: "
         "the model's groups (what the search places) from input to loss, each in the colour of "
         "the device it runs on (striped when its replicas run on several), and one training "
         "step per device: ops as bars, each transfer channel on a lane of its own. Hover over a "
         "bar or a group for its ops.</p><p>";
  for (size_t d = 0; d < pictures.front().devices.size(); ++d) {
    out << fmt::format(R"(<span style="display:inline-block;width:12px;height:12px;background:{};)"
                       R"(margin:0 4px 0 12px;vertical-align:middle"></span>{})",
                       DeviceColour(static_cast<int>(d)), EscapeXml(pictures.front().devices[d]));
  }
  out << "</p>";
  for (const PlacementPicture& p : pictures) {
    out << fmt::format("<h3>{}</h3><p>{}. The step drawn: {} ({}).</p>", EscapeXml(p.method),
                       EscapeXml(p.description), Time(p.step_seconds * 1e6), EscapeXml(p.source));
    out << LayerStripSvg(p) << ScheduleSvg(p);
    if (!p.trace_files.empty()) {
      out << "<p>Perfetto traces (open in ui.perfetto.dev or chrome://tracing):";
      for (const std::string& file : p.trace_files) {
        out << fmt::format(R"( <a href="{0}">{0}</a>)", EscapeXml(file));
      }
      out << "</p>";
    }
  }
  return out.str();
}

std::string EscapeXml(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

}  // namespace placer::search
