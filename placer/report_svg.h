// Pictures of a placement for the comparison report, as people judge one first: the step's
// schedule as a timeline per device (ops as bars, every transfer channel a lane of its own) and
// the model as a strip of its groups coloured by device. SVG, inline in report.html. Torch-free.
#pragma once

#include <string>
#include <vector>

#include "graph/evaluator.h"

namespace placer::search {

// One group of the model (the groups the search places), in the model's topological order.
struct LayerCell {
  std::string label;         // its first forward op ("/layer1/layer1.0/conv1/Conv")
  int ops = 0;               // its forward ops
  std::vector<int> devices;  // indices into PlacementPicture::devices its replicas run on
};

struct PlacementPicture {
  std::string method;       // the report row it shows: "learned", "m-ETF", ...
  std::string description;  // "2 replicas (hybrid): 12 groups on {cpu:0,cpu:1}, 3 on {cpu:0}"
  std::vector<std::string> devices;
  double step_seconds = 0;  // of the schedule below
  std::string source;       // where the schedule comes from: "simulated", "measured"
  std::vector<graph::TraceEvent> schedule;  // device lanes and "from->to" lanes
  std::vector<LayerCell> layers;
  std::vector<std::string> trace_files;  // Perfetto traces beside the report (relative paths)
};

// The colour of device `index` (the same in every picture of a report).
std::string DeviceColour(int index);

// `text` with the characters XML and HTML give meaning (< > & ") written as entities.
std::string EscapeXml(const std::string& text);

// The schedule: one lane per device, then one per transfer channel that carried something;
// consecutive events closer than a pixel are drawn as one bar (its tooltip says how many).
std::string ScheduleSvg(const PlacementPicture& picture);
// The groups left to right, each filled with the colours of the devices it runs on.
std::string LayerStripSvg(const PlacementPicture& picture);
// Both pictures of every placement with headings, legend and trace links: a section of the HTML.
std::string PicturesHtml(const std::vector<PlacementPicture>& pictures);

}  // namespace placer::search
