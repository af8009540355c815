// The comparison report of `placer compare`: every method's step time against the lower bound,
// the learned search's curves, as a terminal table, Markdown and self-contained HTML with SVG.
// Torch-free.
#pragma once

#include <string>
#include <vector>

#include "placer/paired_comparison.h"
#include "placer/report_svg.h"
#include "placer/search.h"

namespace placer::search {

struct ReportRow {
  // What a row stands for: a baseline (what the search must beat: single devices, data
  // parallelism, the expert, the algorithms, random search), an ablation of the search (the policy
  // alone, refinement alone), or the search's answer.
  enum class Kind { kBaseline, kAblation, kLearned };
  Kind kind = Kind::kBaseline;
  std::string method;
  bool valid = false;
  std::string invalid_reason;
  double step_seconds = 0;
  double seconds_to_produce = 0;           // search or algorithm time; 0 for fixed placements
  std::vector<int64_t> peak_memory_bytes;  // per device, when the evaluator reports it
  int evaluations = 0;                     // searches: distinct candidates judged
  std::string placement;                   // what the placement is, in a few words
  bool hybrid = false;                     // data and model parallelism at once (IsHybrid)
  // Rows judged in the closing side-by-side: the step time over data parallelism's and over the
  // best single device's, paired by round (rounds 0 for other rows: the ratio of step times
  // then), and "fastest", "tied" (with the fastest) or "".
  PairedRatio to_data_parallel;
  PairedRatio to_best_single;
  std::string tie;
};

struct ComparisonReport {
  std::string model;
  std::vector<std::string> devices;
  std::string evaluator;
  double lower_bound_seconds = 0;  // 0 when unknown
  std::vector<ReportRow> rows;
  std::vector<CurvePoint> learned_curve;
  std::vector<CurvePoint> random_curve;
  std::vector<PlacementPicture> pictures;  // the learned placement's and the best baseline's
  // What the learned row is and why, with its tie stated (placer/setup/verdict.h).
  std::string answer;
};

// Speed-ups are relative to the best valid single-device row and to the data-parallel row (rows
// whose method starts with "single device" and "data parallel").
// The learned row against the best baseline row: step time ratio and the baseline's method; a
// ratio of 0 when either is missing.
struct LearnedVersusBest {
  double ratio = 0;
  std::string best_other;
};
LearnedVersusBest CompareLearned(const ComparisonReport& report);
std::string ReportTable(const ComparisonReport& report);
std::string ReportMarkdown(const ComparisonReport& report);
std::string ReportHtml(const ComparisonReport& report);
// Every field above as JSON (report.json), for scripts that collect reports.
std::string ReportJson(const ComparisonReport& report);

}  // namespace placer::search
