// The report's pictures (placer/report_svg.h): what the SVG holds for a known schedule and strip.
// That they draw in a browser is tests/report_browser_test.py's business.
#include "placer/report_svg.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

namespace placer::search {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

int Count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

PlacementPicture TwoDevices() {
  PlacementPicture p{.method = "learned",
                     .description = "2 replicas (hybrid)",
                     .devices = {"cuda:0", "cuda:1"},
                     .step_seconds = 1e-3,
                     .source = "simulated"};
  p.schedule = {
      {.lane = "cuda:1", .name = "late", .start_us = 900, .duration_us = 100},
      {.lane = "cuda:0", .name = "conv<1>", .start_us = 0, .duration_us = 400},
      // Two ops a nanosecond apart: one bar of two at this scale.
      {.lane = "cuda:0", .name = "relu", .start_us = 400.001, .duration_us = 100},
      {.lane = "cuda:0->cuda:1", .name = "copy", .start_us = 500, .duration_us = 200},
      {.lane = "host->cuda:0", .name = "images", .start_us = 0, .duration_us = 10},
  };
  p.layers = {{.label = "/features/features.0/Conv", .ops = 3, .devices = {0}},
              {.label = "/features/features.1/Relu", .ops = 1, .devices = {0}},
              {.label = "/classifier/Gemm", .ops = 2, .devices = {0, 1}}};
  p.trace_files = {"trace_learned.json", "trace_learned.simulated.json"};
  return p;
}

TEST(ReportSvgTest, ScheduleHasALanePerDeviceThenPerChannelAndMergesNeighbours) {
  const std::string svg = ScheduleSvg(TwoDevices());
  EXPECT_THAT(svg, HasSubstr(R"(aria-label="learned: schedule of one step")"));
  // Devices first, then the minibatch's channel, then the others.
  const size_t cuda1 = svg.find(">cuda:1</text>");
  const size_t host = svg.find(">host-&gt;cuda:0</text>");
  const size_t copy = svg.find(">cuda:0-&gt;cuda:1</text>");
  ASSERT_NE(cuda1, std::string::npos);
  ASSERT_NE(host, std::string::npos);
  ASSERT_NE(copy, std::string::npos);
  EXPECT_LT(cuda1, host);
  EXPECT_LT(host, copy);
  // Names escaped; the two neighbours merged into one bar that says so.
  EXPECT_THAT(svg, HasSubstr("<title>2 ops: conv&lt;1&gt; ... relu: 0 us to 500 us</title>"));
  EXPECT_THAT(svg, HasSubstr("<title>late: 900 us to 1.00 ms</title>"));
  EXPECT_THAT(svg, HasSubstr("<title>copy: 500 us to 700 us</title>"));
  EXPECT_EQ(Count(svg, "<title>"), 4);
  // cuda:0's bars in its colour, the copy in its source's, the minibatch's grey.
  EXPECT_EQ(DeviceColour(0), "#4e79a7");
  EXPECT_EQ(Count(svg, R"(fill="#4e79a7")"), 2);
  EXPECT_THAT(svg, HasSubstr(R"(fill="#f28e2b")"));
  EXPECT_THAT(svg, HasSubstr(R"(fill="#999999")"));
  // The axis ends at the step's end.
  EXPECT_THAT(svg, HasSubstr(">1.00 ms</text>"));
}

// A pipelined step: each stage's micro-batches alternate in shade and carry their number.
TEST(ReportSvgTest, MicroBatchesAlternateInShadeAndAreNumbered) {
  PlacementPicture p{.method = "pipeline", .devices = {"cpu:0", "cpu:1"}, .step_seconds = 1e-3};
  p.schedule = {
      {.lane = "cpu:0", .name = "m0/conv1", .start_us = 0, .duration_us = 200},
      {.lane = "cpu:0", .name = "m1/conv1", .start_us = 300, .duration_us = 200},
      {.lane = "cpu:1", .name = "m0/fc1", .start_us = 250, .duration_us = 200},
  };
  const std::string svg = ScheduleSvg(p);
  EXPECT_EQ(Count(svg, R"(fill-opacity="0.55")"), 1);  // micro-batch 1 only
  EXPECT_EQ(Count(svg, R"(font-size="9">0</text>)"), 2);
  EXPECT_EQ(Count(svg, R"(font-size="9">1</text>)"), 1);
  // Back to back, a stage's micro-batches stay bars of their own (ops of one merge).
  p.schedule = {
      {.lane = "cpu:0", .name = "m0/conv1", .start_us = 0, .duration_us = 200},
      {.lane = "cpu:0", .name = "m0/relu1", .start_us = 200, .duration_us = 100},
      {.lane = "cpu:0", .name = "m1/conv1", .start_us = 300, .duration_us = 200},
      {.lane = "cpu:0", .name = "m1/relu1", .start_us = 500, .duration_us = 100},
  };
  const std::string back_to_back = ScheduleSvg(p);
  EXPECT_THAT(back_to_back, HasSubstr("<title>2 ops: m0/conv1 ... m0/relu1"));
  EXPECT_THAT(back_to_back, HasSubstr("<title>2 ops: m1/conv1 ... m1/relu1"));
  EXPECT_EQ(Count(back_to_back, R"(fill-opacity="0.55")"), 1);
}

TEST(ReportSvgTest, StripColoursEveryGroupByItsDevicesAndLabelsRuns) {
  const std::string svg = LayerStripSvg(TwoDevices());
  EXPECT_THAT(svg, HasSubstr(R"(aria-label="learned: device of every group")"));
  EXPECT_THAT(svg,
              HasSubstr("<title>group 0: /features/features.0/Conv (3 ops) on cuda:0</title>"));
  EXPECT_THAT(svg, HasSubstr("<title>group 2: /classifier/Gemm (2 ops) on cuda:0, cuda:1</title>"));
  // One stripe per device of each group: 1 + 1 + 2.
  EXPECT_EQ(Count(svg, "<rect"), 4);
  // Two runs of devices, labelled by their first group's module path.
  EXPECT_THAT(svg,
              AllOf(HasSubstr(">features/features.0</text>"), HasSubstr(">classifier</text>")));
  EXPECT_THAT(svg, Not(HasSubstr(">features/features.1</text>")));
}

TEST(ReportSvgTest, HtmlShowsBothPicturesTheLegendAndTheTraces) {
  PlacementPicture baseline = TwoDevices();
  baseline.method = "best baseline: m-ETF";
  baseline.trace_files.clear();
  const std::string html = PicturesHtml({TwoDevices(), baseline});
  EXPECT_THAT(html, HasSubstr("<h3>learned</h3><p>2 replicas (hybrid). The step drawn: 1.00 ms "
                              "(simulated).</p>"));
  EXPECT_THAT(html, HasSubstr("<h3>best baseline: m-ETF</h3>"));
  EXPECT_EQ(Count(html, "schedule of one step"), 2);
  EXPECT_EQ(Count(html, "device of every group"), 2);
  EXPECT_THAT(html, HasSubstr(R"(<a href="trace_learned.json">trace_learned.json</a>)"));
  EXPECT_EQ(Count(html, "Perfetto traces"), 1);
  EXPECT_THAT(html, HasSubstr("background:#f28e2b"));
  EXPECT_EQ(PicturesHtml({}), "");
}

TEST(ReportSvgTest, NothingToDrawSaysSo) {
  PlacementPicture empty{.method = "learned", .devices = {"cpu:0"}};
  EXPECT_EQ(ScheduleSvg(empty), "<p>(no schedule)</p>");
  EXPECT_EQ(LayerStripSvg(empty), "<p>(no groups)</p>");
}

}  // namespace
}  // namespace placer::search
