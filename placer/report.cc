#include "placer/report.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "placer/report_svg.h"

namespace placer::search {
namespace {

struct References {
  double single = std::numeric_limits<double>::infinity();
  double data_parallel = std::numeric_limits<double>::infinity();
};

References ReferencesOf(const ComparisonReport& r) {
  References refs;
  for (const ReportRow& row : r.rows) {
    if (!row.valid) continue;
    if (row.method.starts_with("single device"))
      refs.single = std::min(refs.single, row.step_seconds);
    if (row.method.starts_with("data parallel")) refs.data_parallel = row.step_seconds;
  }
  return refs;
}

std::string Ratio(double reference, double value) {
  return std::isfinite(reference) && value > 0 ? fmt::format("{:.3f}x", reference / value) : "-";
}

// A row's step time over a reference's: paired by round with its interval when the row was judged
// side by side, else the ratio of the step times.
std::string TimeRatio(const PairedRatio& paired, double reference, const ReportRow& row) {
  if (paired.rounds > 0) return FormatRatio(paired);
  return std::isfinite(reference) && row.step_seconds > 0
             ? fmt::format("{:.3f}", row.step_seconds / reference)
             : "-";
}

std::string Seconds(double s) {
  if (s <= 0) return "-";
  if (s < 1e-3) return fmt::format("{:.0f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.1f} ms", s * 1e3);
  return fmt::format("{:.1f} s", s);
}

std::string Memory(const std::vector<int64_t>& bytes) {
  if (bytes.empty()) return "-";
  std::vector<std::string> parts;
  for (int64_t b : bytes)
    parts.push_back(fmt::format("{:.1f}", static_cast<double>(b) / (1 << 20)));
  return fmt::format("{} MiB", fmt::join(parts, " / "));
}

// Horizontal bars, one per valid method, with the lower bound as a dashed line.
std::string BarChart(const ComparisonReport& r) {
  double longest = r.lower_bound_seconds;
  int bars = 0;
  for (const ReportRow& row : r.rows) {
    if (row.valid) {
      longest = std::max(longest, row.step_seconds);
      ++bars;
    }
  }
  const int label = 220, width = 460, bar = 18, gap = 6, top = 10;
  const int height = top + bars * (bar + gap) + 30;
  auto x = [&](double s) { return label + static_cast<int>(width * s / longest); };
  std::ostringstream svg;
  svg << fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
      label + width + 90, height);
  int y = top;
  for (const ReportRow& row : r.rows) {
    if (!row.valid) continue;
    bool learned = row.method.starts_with("learned");
    svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", label - 6, y + 13,
                       EscapeXml(row.method));
    svg << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>)", label, y,
                       x(row.step_seconds) - label, bar, learned ? "#d95f02" : "#7570b3");
    svg << fmt::format(R"(<text x="{}" y="{}">{}</text>)", x(row.step_seconds) + 4, y + 13,
                       Seconds(row.step_seconds));
    y += bar + gap;
  }
  if (r.lower_bound_seconds > 0) {
    int lx = x(r.lower_bound_seconds);
    svg << fmt::format(
        R"(<line x1="{0}" y1="{1}" x2="{0}" y2="{2}" stroke="#1b9e77" stroke-dasharray="4 3"/>)",
        lx, top - 4, y);
    svg << fmt::format(R"(<text x="{}" y="{}" fill="#1b9e77">lower bound {}</text>)", lx, y + 14,
                       Seconds(r.lower_bound_seconds));
  }
  svg << "</svg>";
  return svg.str();
}

// Step time (ms) against evaluations or wall seconds, one polyline per series.
struct Series {
  std::string name;
  std::string colour;
  std::vector<std::pair<double, double>> points;
};

std::string LineChart(const std::vector<Series>& series, const std::string& x_label) {
  double max_x = 0, min_y = std::numeric_limits<double>::infinity(), max_y = 0;
  for (const Series& s : series) {
    for (auto [px, py] : s.points) {
      max_x = std::max(max_x, px);
      min_y = std::min(min_y, py);
      max_y = std::max(max_y, py);
    }
  }
  if (max_x <= 0 || !std::isfinite(min_y)) return "<p>(no data)</p>";
  if (max_y <= min_y) max_y = min_y * 1.1 + 1e-9;
  const int left = 60, w = 520, h = 220, top = 10;
  auto px = [&](double v) { return left + w * v / max_x; };
  auto py = [&](double v) { return top + h - h * (v - min_y) / (max_y - min_y); };
  std::ostringstream svg;
  svg << fmt::format(
      R"(<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{}" font-family="sans-serif" font-size="12">)",
      left + w + 20, top + h + 60);
  svg << fmt::format(R"(<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#999"/>)",
                     left, top, w, h);
  svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", left - 4, top + 10,
                     Seconds(max_y));
  svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="end">{}</text>)", left - 4, top + h,
                     Seconds(min_y));
  svg << fmt::format(R"(<text x="{}" y="{}" text-anchor="middle">{} (0 to {:.0f})</text>)",
                     left + w / 2, top + h + 18, x_label, max_x);
  int legend_x = left;
  for (const Series& s : series) {
    std::vector<std::string> coords;
    for (auto [x, y] : s.points) coords.push_back(fmt::format("{:.1f},{:.1f}", px(x), py(y)));
    svg << fmt::format(R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"/>)",
                       s.colour, fmt::join(coords, " "));
    svg << fmt::format(R"(<text x="{}" y="{}" fill="{}">{}</text>)", legend_x, top + h + 40,
                       s.colour, EscapeXml(s.name));
    legend_x += 170;
  }
  svg << "</svg>";
  return svg.str();
}

std::vector<std::pair<double, double>> Points(const std::vector<CurvePoint>& curve, bool by_wall,
                                              bool best) {
  std::vector<std::pair<double, double>> points;
  for (const CurvePoint& p : curve) {
    double y = best ? p.best_seconds : p.mean_seconds;
    if (std::isfinite(y) && y > 0) {
      points.emplace_back(by_wall ? p.wall_seconds : static_cast<double>(p.evaluations), y);
    }
  }
  return points;
}

std::string Verdict(const ComparisonReport& r) {
  const LearnedVersusBest v = CompareLearned(r);
  if (v.ratio <= 0) return "";
  return fmt::format("learned / best other ({}): {:.3f}", v.best_other, v.ratio);
}

// The judgements a search spent (the warm starts' included); "-" for a row no search produced.
std::string Evaluations(const ReportRow& row) {
  return row.evaluations > 0 ? std::to_string(row.evaluations) : "-";
}

}  // namespace

LearnedVersusBest CompareLearned(const ComparisonReport& r) {
  const ReportRow* learned = nullptr;
  const ReportRow* best = nullptr;
  for (const ReportRow& row : r.rows) {
    if (!row.valid) continue;
    if (row.kind == ReportRow::Kind::kLearned) learned = &row;
    if (row.kind == ReportRow::Kind::kBaseline &&
        (best == nullptr || row.step_seconds < best->step_seconds)) {
      best = &row;
    }
  }
  if (learned == nullptr || best == nullptr) return {};
  return {learned->step_seconds / best->step_seconds, best->method};
}

std::string ReportTable(const ComparisonReport& r) {
  References refs = ReferencesOf(r);
  std::ostringstream out;
  // Step-time ratios (below 1: faster than the reference), with their 95% intervals.
  out << fmt::format("{:<30} {:>11} {:>22} {:>22} {:<7} {:>12} {:>11} {:>22}\n", "method",
                     "step time", "time / best single", "time / DP", "tie", "to produce",
                     "evaluations", "peak memory");
  for (const ReportRow& row : r.rows) {
    if (!row.valid) {
      out << fmt::format("{:<30} {:>11} {}\n", row.method, "invalid", row.invalid_reason);
      continue;
    }
    out << fmt::format("{:<30} {:>11} {:>22} {:>22} {:<7} {:>12} {:>11} {:>22}\n", row.method,
                       Seconds(row.step_seconds), TimeRatio(row.to_best_single, refs.single, row),
                       TimeRatio(row.to_data_parallel, refs.data_parallel, row), row.tie,
                       Seconds(row.seconds_to_produce), Evaluations(row),
                       Memory(row.peak_memory_bytes));
  }
  if (r.lower_bound_seconds > 0) {
    out << fmt::format(
        "lower bound: {} (over every replica count: critical path on the fastest devices, free "
        "communication; or total work / devices)\n",
        Seconds(r.lower_bound_seconds));
  }
  for (const ReportRow& row : r.rows) {
    if (!row.placement.empty()) out << fmt::format("{}: {}\n", row.method, row.placement);
  }
  if (const std::string verdict = Verdict(r); !verdict.empty()) out << verdict << '\n';
  out << r.answer;
  return out.str();
}

std::string ReportMarkdown(const ComparisonReport& r) {
  References refs = ReferencesOf(r);
  std::ostringstream out;
  out << fmt::format(
      "# placer compare: {}\n\nDevices: {}. Evaluator: {}. Every placement below "
      "was evaluated by that evaluator in this run.\n\n",
      r.model, fmt::join(r.devices, ", "), r.evaluator);
  out << "| method | step time | speed-up vs best single device | vs data parallel | step time / "
         "data parallel [95% interval] | tie | step time / lower bound | time to produce | "
         "evaluations | "
         "valid | peak memory per device |\n";
  out << "| --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | --- | --- |\n";
  for (const ReportRow& row : r.rows) {
    if (!row.valid) {
      out << fmt::format("| {} | - | - | - | - | | - | {} | {} | no: {} | - |\n", row.method,
                         Seconds(row.seconds_to_produce), Evaluations(row), row.invalid_reason);
      continue;
    }
    out << fmt::format(
        "| {} | {} | {} | {} | {} | {} | {} | {} | {} | yes | {} |\n", row.method,
        Seconds(row.step_seconds), Ratio(refs.single, row.step_seconds),
        Ratio(refs.data_parallel, row.step_seconds),
        TimeRatio(row.to_data_parallel, refs.data_parallel, row), row.tie,
        r.lower_bound_seconds > 0 ? fmt::format("{:.2f}", row.step_seconds / r.lower_bound_seconds)
                                  : "-",
        Seconds(row.seconds_to_produce), Evaluations(row), Memory(row.peak_memory_bytes));
  }
  if (r.lower_bound_seconds > 0) {
    out << fmt::format(
        "\nLower bound: {} (the least over the replica counts of the critical path on the "
        "fastest devices with free communication, and of the total work over the devices).\n",
        Seconds(r.lower_bound_seconds));
  }
  if (!r.answer.empty()) out << "\n```\n" << r.answer << "```\n";
  if (const std::string verdict = Verdict(r); !verdict.empty()) {
    out << "\n"
        << verdict << ". Baselines: single devices, data parallelism, the expert, the "
        << "algorithms and random search; the policy alone and refinement alone are ablations "
        << "of the search, not baselines.\n";
  }
  bool described = false;
  for (const ReportRow& row : r.rows) {
    if (row.placement.empty()) continue;
    if (!described) out << "\n## What the searches chose\n\n";
    described = true;
    out << fmt::format("- {} ({} evaluations): {}\n", row.method, row.evaluations, row.placement);
  }
  if (!r.learned_curve.empty()) {
    out << "\n## Learned search\n\n| evaluations | wall | best so far | mean of the step |\n"
           "| ---: | ---: | ---: | ---: |\n";
    size_t stride = std::max<size_t>(1, r.learned_curve.size() / 12);
    for (size_t i = 0; i < r.learned_curve.size(); i += stride) {
      const CurvePoint& p = r.learned_curve[i];
      out << fmt::format("| {} | {:.1f} s | {} | {} |\n", p.evaluations, p.wall_seconds,
                         std::isfinite(p.best_seconds) ? Seconds(p.best_seconds) : "-",
                         Seconds(p.mean_seconds));
    }
  }
  out << "\nCharts: report.html";
  for (const PlacementPicture& p : r.pictures) {
    out << fmt::format("; {}: schedule and devices per group there, trace {}", p.method,
                       fmt::join(p.trace_files, ", "));
  }
  out << ".\n";
  return out.str();
}

std::string ReportHtml(const ComparisonReport& r) {
  std::ostringstream out;
  out << "<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>placer compare: "
      << EscapeXml(r.model)
      << "</title><style>body{font-family:sans-serif;max-width:960px;margin:2em "
         "auto}table{border-collapse:collapse}td,th{border:1px solid #ccc;"
         "padding:3px 8px;text-align:right}td:first-child{text-align:left}"
         "</style></head><body>";
  out << "<h1>placer compare: " << EscapeXml(r.model)
      << "</h1><p>Devices: " << EscapeXml(fmt::format("{}", fmt::join(r.devices, ", ")))
      << ". Evaluator: " << EscapeXml(r.evaluator) << ".</p>";
  out << "<h2>Step time per method</h2>" << BarChart(r);
  out << PicturesHtml(r.pictures);
  out << "<h2>Learned search</h2>";
  std::vector<Series> by_evaluations = {
      {"learned: best so far", "#d95f02", Points(r.learned_curve, false, true)},
      {"learned: mean of step", "#e6ab02", Points(r.learned_curve, false, false)},
      {"random search: best so far", "#7570b3", Points(r.random_curve, false, true)}};
  out << "<h3>Step time against evaluations</h3>" << LineChart(by_evaluations, "evaluations");
  std::vector<Series> by_wall = {
      {"learned: best so far", "#d95f02", Points(r.learned_curve, true, true)},
      {"learned: mean of step", "#e6ab02", Points(r.learned_curve, true, false)}};
  out << "<h3>Step time against wall time</h3>" << LineChart(by_wall, "seconds");
  // The same table as report.md.
  References refs = ReferencesOf(r);
  out << "<h2>Table</h2><table><tr><th>method</th><th>step time</th><th>vs best single</th>"
         "<th>vs data parallel</th><th>step time / data parallel [95% interval]</th><th>tie</th>"
         "<th>time to produce</th><th>evaluations</th><th>valid</th><th>peak memory</th></tr>";
  for (const ReportRow& row : r.rows) {
    out << "<tr><td>" << EscapeXml(row.method) << "</td><td>"
        << (row.valid ? Seconds(row.step_seconds) : "-") << "</td><td>"
        << (row.valid ? Ratio(refs.single, row.step_seconds) : "-") << "</td><td>"
        << (row.valid ? Ratio(refs.data_parallel, row.step_seconds) : "-") << "</td><td>"
        << (row.valid ? TimeRatio(row.to_data_parallel, refs.data_parallel, row) : "-")
        << "</td><td>" << row.tie << "</td><td>" << Seconds(row.seconds_to_produce) << "</td><td>"
        << Evaluations(row) << "</td><td>"
        << (row.valid ? "yes" : EscapeXml("no: " + row.invalid_reason)) << "</td><td>"
        << Memory(row.peak_memory_bytes) << "</td></tr>";
  }
  out << "</table>";
  if (!r.answer.empty()) out << "<pre>" << EscapeXml(r.answer) << "</pre>";
  out << "</body></html>\n";
  return out.str();
}

namespace {

// Null for a row not judged side by side.
nlohmann::json RatioJson(const PairedRatio& ratio) {
  if (ratio.rounds == 0) return nullptr;
  return {
      {"ratio", ratio.ratio}, {"low", ratio.low}, {"high", ratio.high}, {"rounds", ratio.rounds}};
}

}  // namespace

std::string ReportJson(const ComparisonReport& r) {
  nlohmann::json rows = nlohmann::json::array();
  for (const ReportRow& row : r.rows) {
    rows.push_back({{"kind", row.kind == ReportRow::Kind::kBaseline   ? "baseline"
                             : row.kind == ReportRow::Kind::kAblation ? "ablation"
                                                                      : "learned"},
                    {"method", row.method},
                    {"valid", row.valid},
                    {"invalid_reason", row.invalid_reason},
                    {"step_seconds", row.step_seconds},
                    {"seconds_to_produce", row.seconds_to_produce},
                    {"evaluations", row.evaluations},
                    {"placement", row.placement},
                    {"hybrid", row.hybrid},
                    {"peak_memory_bytes", row.peak_memory_bytes},
                    {"to_data_parallel", RatioJson(row.to_data_parallel)},
                    {"to_best_single", RatioJson(row.to_best_single)},
                    {"tie", row.tie}});
  }
  nlohmann::json pictures = nlohmann::json::array();
  for (const PlacementPicture& p : r.pictures) {
    pictures.push_back({{"method", p.method},
                        {"source", p.source},
                        {"step_seconds", p.step_seconds},
                        {"trace_files", p.trace_files}});
  }
  const LearnedVersusBest verdict = CompareLearned(r);
  nlohmann::json json = {{"model", r.model},
                         {"devices", r.devices},
                         {"evaluator", r.evaluator},
                         {"lower_bound_seconds", r.lower_bound_seconds},
                         {"rows", rows},
                         {"pictures", pictures},
                         {"learned_over_best_other", verdict.ratio},
                         {"best_other", verdict.best_other},
                         {"answer", r.answer}};
  return json.dump(2) + "\n";
}

}  // namespace placer::search
