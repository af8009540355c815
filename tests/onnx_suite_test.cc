// The model suite (scripts/onnx_suite.py): PyTorch training models exported as a user exports
// them. Each loads, and one training step under a random placement over two CPU workers gives the
// loss and the gradients of PyTorch's own autograd step on the same weights and minibatch
// (<model>.reference.onnx), within the tolerances of tests/pytorch_step.h.
//
// Every suite model is a test case (PLACER_ONNX_SUITE_MODELS: scripts/onnx_suite.py's SUITE);
// ctest runs them on the exports of the onnx_export_suite fixture, bench/onnx_suite.sh on its own
// (PLACER_ONNX_SUITE_DIR), and writes bench/RESULTS.md's table, which a test here checks.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "tests/pytorch_step.h"
#include "tests/support.h"
#include "tests/temp_dir.h"

namespace placer {
namespace {

namespace fs = std::filesystem;

class OnnxSuiteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxSuiteTest, OneStepUnderARandomPlacementEqualsPyTorchs) {
  const std::string name = GetParam();
  const char* override = std::getenv("PLACER_ONNX_SUITE_DIR");
  const fs::path dir = override ? override : PLACER_ONNX_SUITE;
  const fs::path model = dir / (name + ".onnx"), reference_file = dir / (name + ".reference.onnx");
  ASSERT_TRUE(fs::exists(model) && fs::exists(reference_file))
      << model << " missing: scripts/export_onnx.py --suite --out " << dir << " " << name
      << " writes it (the onnx_export_suite test does)";
  const test_support::StepComparison c =
      test_support::ExpectStepMatchesPyTorch(name, model, reference_file);
  // One line for bench/onnx_suite.sh's table.
  std::cout << fmt::format(
      "suite {}: {} ops, {} parameters, loss {:.6f} (PyTorch {:.6f}), worst gradient {} at "
      "{:.3f} of its tolerance, load {:.2f} s, step {:.2f} s\n",
      name, c.ops, c.parameter_count, c.loss, c.reference_loss, c.worst_name, c.worst,
      c.load_seconds, c.step_seconds);
}

// `placer inspect` prints the model, and `placer compare` runs to the end with it on a simulated
// 4-GPU PCIe machine (batch 8: data-parallel shards of 2; the search on a small budget, its wall
// time bounded so that 17 models stay affordable in CI).
TEST_P(OnnxSuiteTest, InspectAndCompareOnFourSimulatedGpusRunToTheEnd) {
  const std::string name = GetParam();
  const char* override = std::getenv("PLACER_ONNX_SUITE_DIR");
  const fs::path model = fs::path(override ? override : PLACER_ONNX_SUITE) / (name + ".onnx");
  ASSERT_TRUE(fs::exists(model)) << model << " missing (the onnx_export_suite test writes it)";
  const test_support::TempDir temp("placer_onnx_suite_" + name);
  const fs::path& dir = temp.path();
  std::ofstream(dir / "c.yaml") << fmt::format(
      "model:\n  onnx: {}\n  batch_size: 8\n"
      "devices: [cuda:0, cuda:1, cuda:2, cuda:3]\n"
      "search: {{evaluator: simulated, policy_steps: 2, samples_per_step: 2, "
      "max_evaluations: 4, refinement_rounds: 2, max_wall_seconds: 5}}\n"
      "simulation: {{gpu_link: pcie}}\n"
      "output: {{directory: run}}\n",
      model.string());
  const test_support::CommandResult inspect =
      test_support::RunPlacer("inspect --config " + (dir / "c.yaml").string());
  EXPECT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find(fmt::format("model: {} (batch 8", name)), std::string::npos)
      << inspect.output.substr(0, 2000);
  const test_support::CommandResult compare =
      test_support::RunPlacer("compare --config " + (dir / "c.yaml").string());
  EXPECT_EQ(compare.exit_code, 0) << compare.output;
  std::ifstream report(dir / "run" / "report.md");
  std::stringstream text;
  text << report.rdbuf();
  EXPECT_NE(text.str().find("data parallel (2/2/2/2)"), std::string::npos) << text.str();
}

std::vector<std::string> SuiteModels() {
  std::vector<std::string> models;
  std::stringstream list(PLACER_ONNX_SUITE_MODELS);
  for (std::string name; list >> name;) models.push_back(name);
  return models;
}

// bench/RESULTS.md's suite table (bench/onnx_suite.sh writes it) lists every suite model, and
// each one as loading, stepping as PyTorch's step and running through compare.
TEST(OnnxSuiteResultsTest, TheResultsTableListsEverySuiteModelWorking) {
  std::ifstream in(fs::path(PLACER_SOURCE_DIR) / "bench" / "RESULTS.md");
  std::vector<std::string> listed;
  bool in_section = false;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("## ", 0) == 0) in_section = line.find("ONNX model suite") != std::string::npos;
    if (!in_section || line.rfind("| `", 0) != 0) continue;
    std::vector<std::string> cells;
    std::stringstream row(line);
    for (std::string cell; std::getline(row, cell, '|');) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      cells.push_back(cell);
    }
    ASSERT_GE(cells.size(), 8u) << line;
    const std::string model = cells[1].substr(1, cells[1].size() - 2);
    listed.push_back(model);
    EXPECT_EQ(cells[5], "yes") << model << " does not load: " << line;
    EXPECT_EQ(cells[6].rfind("yes", 0), 0u) << model << "'s step differs from PyTorch's: " << line;
    EXPECT_EQ(cells[7].rfind("yes", 0), 0u) << model << " does not compare: " << line;
  }
  std::vector<std::string> suite = SuiteModels();
  std::sort(suite.begin(), suite.end());
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(listed, suite) << "bench/RESULTS.md's ONNX model suite table is not the suite's; "
                           << "bench/onnx_suite.sh writes it";
}

INSTANTIATE_TEST_SUITE_P(Suite, OnnxSuiteTest, ::testing::ValuesIn(SuiteModels()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace placer
