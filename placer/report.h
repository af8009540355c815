// The comparison report of `placer compare`: every method's step time against the lower bound,
// the learned search's curves, as a terminal table, Markdown and self-contained HTML with SVG.
// Torch-free.
#pragma once

#include <string>
#include <vector>

#include "placer/search.h"

namespace placer::search {

struct ReportRow {
  std::string method;
  bool valid = false;
  std::string invalid_reason;
  double step_seconds = 0;
  double seconds_to_produce = 0;           // search or algorithm time; 0 for fixed placements
  std::vector<int64_t> peak_memory_bytes;  // per device, when the evaluator reports it
};

struct ComparisonReport {
  std::string model;
  std::vector<std::string> devices;
  std::string evaluator;
  double lower_bound_seconds = 0;  // 0 when unknown
  std::vector<ReportRow> rows;
  std::vector<CurvePoint> learned_curve;
  std::vector<CurvePoint> random_curve;
};

// Speed-ups are relative to the best valid single-device row and to the data-parallel row (rows
// whose method starts with "single device" and "data parallel").
std::string ReportTable(const ComparisonReport& report);
std::string ReportMarkdown(const ComparisonReport& report);
std::string ReportHtml(const ComparisonReport& report);

}  // namespace placer::search
