// The model suite (scripts/onnx_suite.py): PyTorch training models exported as a user exports
// them. Each loads, and one training step under a random placement over two CPU workers gives the
// loss and the gradients of PyTorch's own autograd step on the same weights and minibatch
// (<model>.reference.onnx).
//
// Tolerances (float32 on both sides, the same math in another order): the loss within
// 1e-4 x max(1, |loss|); each parameter's gradient, at up to 2048 positions, within 2e-3 x (its
// largest reference value there) + 1e-5 x G, and its L2 norm within 2e-3 relative + 1e-5 x G x
// sqrt(elements), where G is the largest reference gradient value of the whole model: gradients
// that are 0 in exact arithmetic (a bias followed by a BatchNorm) are float32 noise of that order
// on both sides. The gradient is read off the step as (before - after) with SGD's learning rate 1.
//
// Every suite model is a test case (PLACER_ONNX_SUITE_MODELS: scripts/onnx_suite.py's SUITE);
// ctest runs them on the exports of the onnx_export_suite fixture, bench/onnx_suite.sh on its own
// (PLACER_ONNX_SUITE_DIR), and writes bench/RESULTS.md's table, which a test here checks.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include "graph/onnx_loader.h"
#include "graph/placement.h"
#include "runtime/executor.h"
#include "tests/support.h"
#include "tests/temp_dir.h"

namespace placer {
namespace {

namespace fs = std::filesystem;
using runtime::TensorMap;

at::Tensor ToTorch(const graph::OnnxTensor& t) {
  if (t.dtype == graph::DType::kFloat32) {
    return at::from_blob(const_cast<float*>(t.floats.data()), t.shape, at::kFloat).clone();
  }
  return at::from_blob(const_cast<int64_t*>(t.ints.data()), t.shape, at::kLong).clone();
}

struct Reference {
  TensorMap batch;  // inputs and labels
  double loss = 0;
  struct Parameter {
    std::vector<float> head;
    std::vector<int64_t> at;
    std::vector<float> grad;
    double norm = 0;
  };
  std::map<std::string, Parameter> parameters;  // by PyTorch's name
};

Reference ReadReference(const fs::path& file) {
  Reference ref;
  for (const graph::OnnxTensor& t : graph::ReadOnnxInitializers(file)) {
    const std::string& name = t.name;
    auto field = [&](const std::string& prefix, const std::string& suffix) -> std::string {
      if (name.rfind(prefix, 0) != 0 || name.size() < prefix.size() + suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        return "";
      }
      return name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    };
    if (name.rfind("input:", 0) == 0) {
      ref.batch.emplace(name.substr(6), ToTorch(t));
    } else if (name == "labels") {
      ref.batch.emplace("labels", ToTorch(t));
    } else if (name == "loss") {
      ref.loss = t.floats.at(0);
    } else if (std::string p = field("param:", ":head"); !p.empty()) {
      ref.parameters[p].head = t.floats;
    } else if (std::string p = field("grad:", ":at"); !p.empty()) {
      ref.parameters[p].at = t.ints;
    } else if (std::string p = field("grad:", ":values"); !p.empty()) {
      ref.parameters[p].grad = t.floats;
    } else if (std::string p = field("grad:", ":norm"); !p.empty()) {
      ref.parameters[p].norm = t.floats.at(0);
    }
  }
  return ref;
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

class OnnxSuiteTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxSuiteTest, OneStepUnderARandomPlacementEqualsPyTorchs) {
  const std::string name = GetParam();
  const char* override = std::getenv("PLACER_ONNX_SUITE_DIR");
  const fs::path dir = override ? override : PLACER_ONNX_SUITE;
  const fs::path model = dir / (name + ".onnx"), reference_file = dir / (name + ".reference.onnx");
  ASSERT_TRUE(fs::exists(model) && fs::exists(reference_file))
      << model << " missing: scripts/export_onnx.py --suite --out " << dir << " " << name
      << " writes it (the onnx_export_suite test does)";
  const Reference ref = ReadReference(reference_file);
  const int64_t batch = ref.batch.at("labels").size(0);

  auto start = std::chrono::steady_clock::now();
  const graph::Graph g =
      graph::LoadOnnx(model, {.batch_size = batch, .learning_rate = 1.0, .dropout = false});
  const double load_seconds = Seconds(start);
  const TensorMap before = runtime::InitializeParameters(g, 0);

  std::mt19937 rng(std::hash<std::string>{}(name));
  graph::Placement placement = graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 0);
  for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
    placement.device_of_op[static_cast<size_t>(id)] = static_cast<int>(rng() % 2);
  }
  runtime::Executor executor(g, test_support::CpuWorkers(2), placement, before);
  start = std::chrono::steady_clock::now();
  const runtime::StepResult step = executor.RunStep(ref.batch);
  const double step_seconds = Seconds(start);
  const TensorMap after = executor.Parameters();

  EXPECT_LE(std::abs(step.loss - ref.loss), 1e-4 * std::max(1.0, std::abs(ref.loss)))
      << name << ": loss " << step.loss << ", PyTorch's " << ref.loss;

  // PyTorch's parameters are placer's, found by their values (placer names a reordered LSTM
  // weight or a split bias after the file's initializer, not after PyTorch's parameter).
  std::map<std::string, std::string> ours_of;  // PyTorch name -> placer name
  for (graph::TensorId id : g.Parameters()) {
    const graph::Tensor& p = g.tensor(id);
    ASSERT_EQ(p.init.kind, graph::Initializer::Kind::kValues) << p.name;
    for (const auto& [theirs, r] : ref.parameters) {
      if (r.head.size() <= p.init.values->size() &&
          std::equal(r.head.begin(), r.head.end(), p.init.values->begin()) &&
          static_cast<int64_t>(p.init.values->size()) > r.at.back()) {
        EXPECT_EQ(ours_of.count(theirs), 0u) << theirs << " matches two parameters";
        ours_of[theirs] = p.name;
      }
    }
  }
  EXPECT_EQ(ours_of.size(), ref.parameters.size()) << name << ": parameters without a match";
  EXPECT_EQ(g.Parameters().size(), ref.parameters.size()) << name;

  double largest = 0;  // G above
  for (const auto& [theirs, r] : ref.parameters) {
    for (float v : r.grad) largest = std::max(largest, static_cast<double>(std::abs(v)));
  }
  double worst = 0;  // the largest gradient difference relative to its tolerance
  std::string worst_name;
  for (const auto& [theirs, r] : ref.parameters) {
    auto found = ours_of.find(theirs);
    if (found == ours_of.end()) {
      ADD_FAILURE() << name << ": PyTorch's parameter " << theirs << " has no counterpart";
      continue;
    }
    const at::Tensor grad = (before.at(found->second) - after.at(found->second)).reshape({-1});
    const at::Tensor at = at::tensor(r.at, at::kLong);
    const at::Tensor expected = at::tensor(r.grad, at::kFloat);
    const at::Tensor actual = grad.index_select(0, at);
    const double scale = expected.abs().max().item<double>();
    const double difference = (actual - expected).abs().max().item<double>();
    const double tolerance = 2e-3 * scale + 1e-5 * largest;
    const double norm = grad.to(at::kDouble).norm().item<double>();
    const double norm_tolerance =
        2e-3 * r.norm + 1e-5 * largest * std::sqrt(static_cast<double>(grad.numel()));
    EXPECT_LE(difference, tolerance)
        << name << ": " << theirs << " (" << found->second << "): gradient differs by "
        << difference << " (values up to " << scale << ")";
    EXPECT_LE(std::abs(norm - r.norm), norm_tolerance)
        << name << ": " << theirs << ": gradient norm " << norm << ", PyTorch's " << r.norm;
    if (difference / tolerance > worst) {
      worst = difference / tolerance;
      worst_name = theirs;
    }
  }
  // One line for bench/onnx_suite.sh's table.
  std::cout << fmt::format(
      "suite {}: {} ops, {} parameters, loss {:.6f} (PyTorch {:.6f}), worst gradient {} at "
      "{:.3f} of its tolerance, load {:.2f} s, step {:.2f} s\n",
      name, g.num_ops(), g.ParameterCount(), step.loss, ref.loss, worst_name, worst, load_seconds,
      step_seconds);
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
