// Models exported from PyTorch (scripts/export_onnx.py, run by the onnx_export_fixtures CTest
// fixture into PLACER_ONNX_FIXTURES) through the loader and the executor: the exported LeNet trains
// exactly like the built-in one, ResNet-18, a transformer encoder and an LSTM compute what
// PyTorch computed for the same input, transformers' T5 steps as PyTorch's training step does, and
// an export with a baked batch takes only its own.
// (The model suite's training steps: onnx_suite_test.cc.)
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "graph/models.h"
#include "graph/onnx_loader.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "runtime/executor.h"
#include "tests/pytorch_step.h"
#include "tests/support.h"
#include "tests/temp_dir.h"

namespace placer {
namespace {

namespace fs = std::filesystem;
using runtime::Executor;
using runtime::TensorMap;
using test_support::CpuWorkers;
using ::testing::AllOf;
using ::testing::HasSubstr;

fs::path Fixture(const std::string& name) {
  fs::path file = fs::path(PLACER_ONNX_FIXTURES) / name;
  if (!fs::exists(file)) {
    ADD_FAILURE() << file << " missing: the onnx_export_fixtures test writes it "
                  << "(scripts/export_onnx.py --out " << PLACER_ONNX_FIXTURES << ")";
  }
  return file;
}

at::Tensor ToTorch(const graph::OnnxTensor& t) {
  if (t.dtype == graph::DType::kFloat32) {
    return at::from_blob(const_cast<float*>(t.floats.data()), t.shape, at::kFloat).clone();
  }
  return at::from_blob(const_cast<int64_t*>(t.ints.data()), t.shape, at::kLong).clone();
}

std::vector<std::string> ParameterNames(const graph::Graph& g) {
  std::vector<std::string> names;
  for (graph::TensorId id : g.Parameters()) names.push_back(g.tensor(id).name);
  std::sort(names.begin(), names.end());
  return names;
}

Executor OnOneWorker(const graph::Graph& g, const TensorMap& parameters,
                     bool forward_only = false) {
  return Executor(g, CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0), parameters,
                  {.forward_only = forward_only});
}

TEST(OnnxModelsTest, ExportedLeNetTrainsExactlyLikeTheBuiltInLeNet) {
  const int64_t batch = 16;
  const double lr = 0.2;
  graph::LeNetOptions options;
  options.batch_size = batch;
  options.learning_rate = lr;
  const graph::Graph builtin = graph::BuildLeNet(options);
  const graph::Graph onnx =
      graph::LoadOnnx(Fixture("lenet.onnx"), {.batch_size = batch, .learning_rate = lr});
  ASSERT_EQ(ParameterNames(onnx), ParameterNames(builtin));
  for (graph::TensorId id : builtin.Parameters()) {
    const graph::Tensor& p = builtin.tensor(id);
    EXPECT_EQ(onnx.tensor(onnx.TensorByName(p.name)).shape, p.shape) << p.name;
  }

  // The same weights (the built-in initialisation) and minibatch for both.
  const TensorMap weights = runtime::InitializeParameters(builtin, 7);
  const TensorMap minibatch = runtime::SyntheticBatch(builtin, 3);
  Executor a = OnOneWorker(builtin, weights);
  Executor b = OnOneWorker(onnx, weights);
  const runtime::StepResult ra = a.RunStep(minibatch);
  const runtime::StepResult rb = b.RunStep(minibatch);
  EXPECT_GT(ra.loss, 0);
  EXPECT_EQ(ra.loss, rb.loss);
  const TensorMap pa = a.Parameters(), pb = b.Parameters();
  for (const auto& [name, value] : pa) {
    EXPECT_FALSE(at::equal(value, weights.at(name))) << name << " was not updated";
    EXPECT_TRUE(at::equal(value, pb.at(name)))
        << name << " differs after the step by " << (value - pb.at(name)).abs().max().item<float>();
  }
}

TEST(OnnxModelsTest, StrippedLeNetStartsFromItsOwnInitialisation) {
  const graph::Graph g = graph::LoadOnnx(Fixture("lenet_stripped.onnx"), {.batch_size = 8});
  const graph::Tensor& w = g.tensor(g.TensorByName("conv1.weight"));
  EXPECT_EQ(w.shape, (graph::Shape{20, 1, 3, 3}));
  EXPECT_EQ(w.init.kind, graph::Initializer::Kind::kNormal);
  EXPECT_EQ(w.init.stddev, 0.01);
  EXPECT_EQ(g.tensor(g.TensorByName("fc2.bias")).init.kind, graph::Initializer::Kind::kZeros);
  // Weights this small give nearly uniform predictions: a loss of about log(10).
  Executor executor = OnOneWorker(g, runtime::InitializeParameters(g, 1));
  const double loss = executor.RunStep(runtime::SyntheticBatch(g, 2)).loss;
  EXPECT_NEAR(loss, std::log(10.0), 0.05);
}

// Loads <model>.onnx with the reference batch and a training step, checks the forward output
// against PyTorch's, then runs one real training step.
void ExpectForwardMatchesPyTorch(const std::string& model, double tolerance) {
  const graph::OnnxTensor input = graph::ReadOnnxTensor(Fixture(model + ".input.pb"));
  const graph::OnnxTensor expected = graph::ReadOnnxTensor(Fixture(model + ".output.pb"));
  const int64_t batch = input.shape.at(0);
  const graph::Graph g =
      graph::LoadOnnx(Fixture(model + ".onnx"), {.batch_size = batch, .learning_rate = 0.01});
  TensorMap minibatch = {{input.name, ToTorch(input)}, {"labels", at::zeros({batch}, at::kLong)}};
  const TensorMap weights = runtime::InitializeParameters(g, 0);
  {
    Executor forward = OnOneWorker(g, weights, /*forward_only=*/true);
    forward.RunStep(minibatch);
    const at::Tensor actual = forward.LastValue("logits");
    const at::Tensor reference = ToTorch(expected);
    ASSERT_EQ(actual.sizes(), reference.sizes());
    const double error = (actual - reference).abs().max().item<double>();
    const double scale = reference.abs().max().item<double>();
    EXPECT_LE(error, tolerance * std::max(1.0, scale))
        << model << ": largest difference " << error << " (outputs up to " << scale << ")";
  }
  Executor step = OnOneWorker(g, weights);
  const double loss = step.RunStep(minibatch).loss;
  EXPECT_TRUE(std::isfinite(loss)) << loss;
  EXPECT_FALSE(
      at::equal(step.Parameters().begin()->second, weights.at(step.Parameters().begin()->first)));
}

TEST(OnnxModelsTest, LeNetForwardMatchesPyTorch) { ExpectForwardMatchesPyTorch("lenet", 1e-5); }

TEST(OnnxModelsTest, ResNet18ForwardMatchesPyTorch) {
  ExpectForwardMatchesPyTorch("resnet18", 1e-4);
}

TEST(OnnxModelsTest, TransformerEncoderForwardMatchesPyTorch) {
  ExpectForwardMatchesPyTorch("transformer", 1e-4);
}

TEST(OnnxModelsTest, BidirectionalLstmForwardMatchesPyTorch) {
  ExpectForwardMatchesPyTorch("lstm", 1e-5);
}

// The independent MLP towers bench/search_suite.py places: 4 towers of 4 hidden layers and a
// classifier, each with weight and bias, summed into one output.
TEST(OnnxModelsTest, TowersForwardMatchesPyTorchWithEveryWeight) {
  ExpectForwardMatchesPyTorch("towers", 1e-4);
  const graph::Graph g = graph::LoadOnnx(Fixture("towers.onnx"), {.batch_size = 8});
  EXPECT_EQ(g.Parameters().size(), 4u * 5 * 2);
  EXPECT_EQ(g.ParameterCount(), 4 * (4 * (1024 * 1024 + 1024) + 1024 * 10 + 10));
  EXPECT_EQ(g.tensor(g.TensorByName("features")).shape, (graph::Shape{8, 1024}));
}

// One step of fixture `name` (NAME.onnx, and NAME.reference.onnx with PyTorch's step) under a
// random placement over two CPU workers against PyTorch's (tests/pytorch_step.h's tolerances, the
// model suite's), printed.
void StepAgainstPyTorch(const std::string& name) {
  const test_support::StepComparison c = test_support::ExpectStepMatchesPyTorch(
      name, Fixture(name + ".onnx"), Fixture(name + ".reference.onnx"));
  EXPECT_GT(c.loss, 0);
  std::cout << fmt::format(
      "{}: {} ops, {} parameters, loss {:.6f} (PyTorch {:.6f}), worst gradient {} at {:.3f} of "
      "its tolerance\n",
      name, c.ops, c.parameter_count, c.loss, c.reference_loss, c.worst_name, c.worst);
}

// transformers' T5ForConditionalGeneration (a small config, random weights), exported in training
// mode with a dynamic batch: it loads (its relative position buckets cast log(0) = -inf to an
// integer, in a branch a Where discards), and one step under a random placement over two CPU
// workers has PyTorch's loss and gradients (tests/pytorch_step.h's tolerances, the model suite's).
TEST(OnnxModelsTest, T5StepsAsPyTorchDoes) {
  StepAgainstPyTorch("t5");
  // Another batch than the reference's: the batch axis is dynamic.
  const graph::Graph g = graph::LoadOnnx(Fixture("t5.onnx"), {.batch_size = 5});
  EXPECT_EQ(g.tensor(g.TensorByName("source")).shape, (graph::Shape{5, 7}));
  EXPECT_EQ(g.tensor(g.TensorByName("target")).shape, (graph::Shape{5, 5}));
}

// 1-D convolutions as sequence models use them (scripts/onnx_suite.py's conv1d: padded, strided,
// dilated, grouped, Mamba's depthwise causal one, padding='same' of an even kernel, transposed),
// run as 2-D ones of height 1: one step under a random placement over two CPU workers has
// PyTorch's loss and gradients, and the weights keep PyTorch's 1-D shapes.
TEST(OnnxModelsTest, Conv1dStepsAsPyTorchDoes) {
  StepAgainstPyTorch("conv1d");
  const graph::Graph g = graph::LoadOnnx(Fixture("conv1d.onnx"), {.batch_size = 5});
  EXPECT_EQ(g.tensor(g.TensorByName("strided.weight")).shape, (graph::Shape{8, 4, 3}));
  EXPECT_EQ(g.tensor(g.TensorByName("up.weight")).shape, (graph::Shape{8, 6, 4}));
}

TEST(OnnxModelsTest, ResNet18HasEveryWeightAndATrainingStep) {
  const graph::Graph g = graph::LoadOnnx(Fixture("resnet18.onnx"), {.batch_size = 4});
  // 20 convolutions (BatchNorm folded in) with biases, and the classifier.
  EXPECT_EQ(g.Parameters().size(), 42u);
  EXPECT_EQ(g.ParameterCount(), 11176842);
  EXPECT_EQ(g.OpsInPhase(graph::Phase::kUpdate).size(), 42u);
  EXPECT_EQ(g.tensor(g.TensorByName("images")).shape, (graph::Shape{4, 3, 64, 64}));
}

// torch.onnx.export without dynamic_axes: the transformer's batch (4) is fixed and baked into the
// attention's Reshape constants, so another batch is a BatchError that names the node and says
// how to export, and a data-parallel split of it cannot be built.
TEST(OnnxModelsTest, AnExportWithABakedBatchTakesOnlyItsOwn) {
  const fs::path file = Fixture("transformer_static.onnx");
  EXPECT_EQ(graph::ReadOnnxBatch(file).fixed, 4);
  const graph::Graph own = graph::LoadOnnx(file);
  EXPECT_EQ(own.tensor(own.TensorByName("tokens")).shape, (graph::Shape{4, 7}));
  try {
    graph::LoadOnnx(file, {.batch_size = 2});
    ADD_FAILURE() << "a batch of 2 loaded";
  } catch (const graph::BatchError& error) {
    EXPECT_EQ(error.file_batch(), 4);
    EXPECT_THAT(error.node(), HasSubstr("Reshape"));
    EXPECT_THAT(error.what(), HasSubstr("the export fixed the batch at 4"));
    EXPECT_THAT(error.what(), HasSubstr("dynamic_axes={\"tokens\": {0: \"batch\"}}"));
  }
  // The same model exported with a dynamic batch axis takes both.
  EXPECT_NO_THROW(graph::LoadOnnx(Fixture("transformer.onnx"), {.batch_size = 2}));
  EXPECT_NO_THROW(graph::LoadOnnx(Fixture("transformer.onnx"), {.batch_size = 4}));
}

// `placer compare` on an export with a baked batch of 4 over 4 simulated GPUs: no data-parallel
// shard (2 or 1 rows) can be built, so the data-parallel row says why, naming the node and how
// to export, and every other row is still judged and written.
TEST(OnnxModelsTest, CompareGoesOnWithoutWhatABakedBatchCannotBuild) {
  const test_support::TempDir temp("placer_onnx_models_test_baked");
  const fs::path& dir = temp.path();
  std::ofstream(dir / "c.yaml") << "model:\n  onnx: " << Fixture("transformer_static.onnx").string()
                                << "\ndevices: [cuda:0, cuda:1, cuda:2, cuda:3]\n"
                                << "search: {evaluator: simulated, policy_steps: 2, "
                                   "samples_per_step: 2, max_evaluations: 4, refinement_rounds: 2, "
                                   "max_wall_seconds: 5}\n"
                                << "output: {directory: run}\n";
  const test_support::CommandResult r =
      test_support::RunPlacer("compare --config " + (dir / "c.yaml").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream report(dir / "run" / "report.md");
  std::stringstream text;
  text << report.rdbuf();
  EXPECT_THAT(text.str(),
              AllOf(HasSubstr("single device cuda:3"), HasSubstr("HEFT"), HasSubstr("learned"),
                    HasSubstr("data parallel"), HasSubstr("the export fixed the batch at 4"),
                    HasSubstr("'/encoder/layers.0/self_attn/Reshape_3' (Reshape)"),
                    HasSubstr("dynamic_axes={\"tokens\": {0: \"batch\"}}")));
}

TEST(OnnxModelsTest, ConfigNamesAnOnnxFileRelativeToItself) {
  const test_support::TempDir temp("placer_onnx_models_test");
  const fs::path& dir = temp.path();
  fs::copy_file(Fixture("lenet.onnx"), dir / "lenet.onnx", fs::copy_options::overwrite_existing);
  std::ofstream(dir / "c.yaml") << "model:\n  onnx: lenet.onnx\n  batch_size: 8\n"
                                << "devices: [cpu:0, cpu:1]\n";
  test_support::CommandResult r =
      test_support::RunPlacer("inspect --config " + (dir / "c.yaml").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/conv1/Conv"));
  EXPECT_THAT(r.output, HasSubstr("conv1.weight"));
}

}  // namespace
}  // namespace placer
