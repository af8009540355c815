// The ONNX loader: small hand-written models (shapes, folding, naming, errors), and conformance
// with ONNX's own backend node tests (Debian libonnx-testdata) run through the real executor.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

#include "graph/ir.h"
#include "graph/onnx_loader.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "placer/config/config.h"
#include "placer/setup/model_factory.h"
#include "placer/setup/step_cache.h"
#include "runtime/executor.h"
#include "tests/onnx_writer.h"
#include "tests/support.h"
#include "tests/temp_dir.h"

namespace placer {
namespace {

namespace fs = std::filesystem;
namespace ox = test_support::onnx;
using ::testing::AllOf;
using ::testing::HasSubstr;

// This suite's files: a directory of its own, removed when the suite exits.
const test_support::TempDir& SuiteDir() {
  static const test_support::TempDir dir("placer_onnx_test");
  return dir;
}

fs::path WriteModel(const std::string& name, const std::string& bytes) {
  return SuiteDir().Write(name, bytes);
}

std::string LoadError(const fs::path& file, const graph::OnnxOptions& options = {}) {
  try {
    graph::LoadOnnx(file, options);
  } catch (const graph::GraphError& error) {
    return error.what();
  }
  return "(no error)";
}

at::Tensor ToTorch(const graph::OnnxTensor& t) {
  if (t.dtype == graph::DType::kFloat32) {
    return at::from_blob(const_cast<float*>(t.floats.data()), t.shape, at::kFloat).clone();
  }
  return at::from_blob(const_cast<int64_t*>(t.ints.data()), t.shape, at::kLong).clone();
}

// Runs the forward ops of `g` on one CPU worker; returns the executor for reading values.
std::unique_ptr<runtime::Executor> RunForward(const graph::Graph& g,
                                              const runtime::TensorMap& batch,
                                              const runtime::TensorMap& parameters) {
  auto executor = std::make_unique<runtime::Executor>(
      g, test_support::CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0), parameters,
      runtime::ExecutorOptions{.forward_only = true});
  executor->RunStep(batch);
  return executor;
}

TEST(OnnxLoaderTest, ClassifierBecomesLinearOpsWithItsWeightsAndATrainingStep) {
  fs::path file = WriteModel("classifier.onnx", ox::Encode(ox::SmallClassifier(2)));
  graph::Graph g = graph::LoadOnnx(file, {.batch_size = 6, .learning_rate = 0.5});
  EXPECT_EQ(g.tensor(g.TensorByName("x")).shape, (graph::Shape{6, 4}));
  EXPECT_EQ(g.tensor(g.TensorByName("x")).kind, graph::TensorKind::kInput);
  EXPECT_EQ(g.op(*g.FindOp("fc1")).type, graph::op_types::kLinear);
  EXPECT_EQ(g.op(*g.FindOp("fc2")).type, graph::op_types::kLinear);
  const graph::Tensor& w = g.tensor(g.TensorByName("fc1.weight"));
  EXPECT_EQ(w.kind, graph::TensorKind::kParameter);
  ASSERT_EQ(w.init.kind, graph::Initializer::Kind::kValues);
  EXPECT_FLOAT_EQ((*w.init.values)[1], 0.1f - 0.3f);
  const graph::Tensor& labels = g.tensor(g.TensorByName("labels"));
  EXPECT_EQ(labels.kind, graph::TensorKind::kLabel);
  EXPECT_EQ(labels.shape, (graph::Shape{6}));
  EXPECT_EQ(g.Parameters().size(), 4u);
  EXPECT_EQ(g.OpsInPhase(graph::Phase::kUpdate).size(), 4u);
  EXPECT_EQ(g.op(*g.FindOp("fc1.weight.update")).attrs.GetFloat("lr"), 0.5);
}

TEST(OnnxLoaderTest, WithoutALossOnlyTheForwardOpsAreBuilt) {
  fs::path file = WriteModel("classifier.onnx", ox::Encode(ox::SmallClassifier(2)));
  graph::Graph g = graph::LoadOnnx(file, {.loss = false, .training_step = false});
  EXPECT_EQ(g.num_ops(), 3);
  EXPECT_FALSE(g.FindTensor("labels"));
  EXPECT_EQ(g.tensor(g.TensorByName("logits")).shape, (graph::Shape{2, 3}));
}

TEST(OnnxLoaderTest, ShapeSubgraphsAreFoldedIntoAttributes) {
  // y = Reshape(x, Concat(Shape(x)[0], [-1])): PyTorch's x.view(x.size(0), -1).
  ox::Model m;
  m.inputs = {ox::FloatValue("x", {2, 3, 4})};
  m.outputs = {ox::FloatValue("y", {2, 12})};
  auto ints = [](const std::string& name, std::vector<int64_t> values) {
    std::string t =
        ox::Int(1, static_cast<int64_t>(values.size())) + ox::Int(2, 7) + ox::Bytes(8, name);
    for (int64_t v : values) t += ox::Int(7, v);
    return t;
  };
  m.initializers = {ints("zero", {0}), ints("minus_one", {-1})};
  m.nodes = {{"Shape", "shape", {"x"}, {"s"}, {}},
             {"Gather", "batch", {"s", "zero"}, {"b"}, {}},
             {"Concat", "target", {"b", "minus_one"}, {"t"}, {ox::AttrInt("axis", 0)}},
             {"Reshape", "flatten", {"x", "t"}, {"y"}, {}}};
  graph::Graph g = graph::LoadOnnx(WriteModel("fold.onnx", ox::Encode(m)),
                                   {.batch_size = 5, .loss = false, .training_step = false});
  ASSERT_EQ(g.num_ops(), 1);  // only the Reshape runs
  EXPECT_EQ(g.op(0).type, graph::op_types::kReshape);
  EXPECT_EQ(g.op(0).attrs.GetInts("shape"), (std::vector<int64_t>{5, 12}));
}

// A float cast to an integer gives what PyTorch's cast gives on this CPU, folded at load time or
// run: truncation toward zero, and NaN or a value out of the type's range gives the type's minimum
// (T5's relative position buckets cast log(0) = -inf, in a branch a Where discards). A value so
// cast is still refused where it is used as a shape.
TEST(OnnxLoaderTest, CastsOfFloatsToIntegersGiveWhatPyTorchsCastsGive) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values = {inf,     -inf,    std::nanf(""), 1e30f, -1e30f, 3e9f, -3e9f,
                                     0x1p63f, 0x1p31f, -2.7f,         2.7f,  -0.5f,  0.0f, 5e9f};
  const int64_t n = static_cast<int64_t>(values.size());
  ox::Model m;
  m.inputs = {ox::FloatValue("x", {n})};
  m.nodes = {{"Constant", "c", {}, {"c"}, {ox::AttrFloats("value_floats", values)}},
             {"Cast", "c64", {"c"}, {"c64"}, {ox::AttrInt("to", 7)}},
             {"Cast", "c32", {"c"}, {"c32"}, {ox::AttrInt("to", 6)}},
             {"Cast", "x64", {"x"}, {"x64"}, {ox::AttrInt("to", 7)}},
             {"Cast", "x32", {"x"}, {"x32"}, {ox::AttrInt("to", 6)}}};
  for (const char* out : {"c64", "c32", "x64", "x32"}) {
    m.outputs.push_back(ox::FloatValue(out, {n}));
  }
  const graph::Graph g = graph::LoadOnnx(WriteModel("casts.onnx", ox::Encode(m)),
                                         {.loss = false, .training_step = false});
  // The casts of the constant are folded: their outputs are constants.
  for (const char* folded : {"c64", "c32"}) {
    EXPECT_EQ(g.op(g.tensor(g.TensorByName(folded)).producer).type, graph::op_types::kConstant)
        << folded;
  }
  // The runtime cast to int32 is an int64 one of 32 bits.
  EXPECT_EQ(g.op(g.tensor(g.TensorByName("x32")).producer).attrs.GetInt("bits"), 32);
  EXPECT_FALSE(g.op(g.tensor(g.TensorByName("x64")).producer).attrs.Has("bits"));
  const at::Tensor x = at::tensor(values);
  auto executor = RunForward(g, {{"x", x}}, {});
  // The reference: PyTorch's own casts (as int32, then widened to the IR's int64).
  const at::Tensor as_int64 = x.to(at::kLong), as_int32 = x.to(at::kInt).to(at::kLong);
  EXPECT_EQ(as_int64[1].item<int64_t>(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(as_int32[1].item<int64_t>(), std::numeric_limits<int32_t>::min());
  for (const auto& [name, expected] : {std::pair{"c64", as_int64}, std::pair{"x64", as_int64},
                                       std::pair{"c32", as_int32}, std::pair{"x32", as_int32}}) {
    const at::Tensor actual = executor->LastValue(name);
    ASSERT_EQ(actual.scalar_type(), at::kLong) << name;
    EXPECT_TRUE(at::equal(actual, expected))
        << name << ": " << actual.reshape({1, -1}) << "\nPyTorch's: " << expected.reshape({1, -1});
  }

  // -inf cast to an integer as a Reshape's target is a bad input, named.
  ox::Model shape;
  shape.inputs = {ox::FloatValue("x", {2, 3})};
  shape.outputs = {ox::FloatValue("y", {6})};
  shape.nodes = {{"Constant", "extent", {}, {"extent"}, {ox::AttrFloats("value_floats", {-inf})}},
                 {"Cast", "extent_int", {"extent"}, {"target"}, {ox::AttrInt("to", 7)}},
                 {"Reshape", "flatten", {"x", "target"}, {"y"}, {}}};
  EXPECT_THAT(LoadError(WriteModel("cast_shape.onnx", ox::Encode(shape)),
                        {.loss = false, .training_step = false}),
              AllOf(HasSubstr("'flatten' (Reshape)"), HasSubstr("negative extent")));
}

TEST(OnnxLoaderTest, StrippedWeightsStartRandomAndBiasesZero) {
  ox::Model m = ox::SmallClassifier(2);
  m.initializers[0] = ox::Int(1, 5) + ox::Int(1, 4) + ox::Int(2, 1) + ox::Bytes(8, "fc1.weight");
  m.initializers[1] = ox::Int(1, 5) + ox::Int(2, 1) + ox::Bytes(8, "fc1.bias");
  graph::Graph g =
      graph::LoadOnnx(WriteModel("stripped.onnx", ox::Encode(m)), {.init_stddev = 0.02});
  const graph::Tensor& w = g.tensor(g.TensorByName("fc1.weight"));
  EXPECT_EQ(w.shape, (graph::Shape{5, 4}));
  EXPECT_EQ(w.init.kind, graph::Initializer::Kind::kNormal);
  EXPECT_EQ(w.init.stddev, 0.02);
  EXPECT_EQ(g.tensor(g.TensorByName("fc1.bias")).init.kind, graph::Initializer::Kind::kZeros);
}

TEST(OnnxLoaderTest, ForwardMatchesAHandComputation) {
  graph::Graph g =
      graph::LoadOnnx(WriteModel("classifier.onnx", ox::Encode(ox::SmallClassifier(2))),
                      {.loss = false, .training_step = false});
  at::Tensor x = at::arange(8, at::kFloat).reshape({2, 4}) / 8.0;
  runtime::TensorMap params = runtime::InitializeParameters(g, 0);
  auto executor = RunForward(g, {{"x", x}}, params);
  at::Tensor h = at::relu(at::linear(x, params.at("fc1.weight"), params.at("fc1.bias")));
  at::Tensor expected = at::linear(h, params.at("fc2.weight"), params.at("fc2.bias"));
  EXPECT_TRUE(at::allclose(executor->LastValue("logits"), expected, 1e-6, 1e-6));
  // The loaded weights are the file's.
  EXPECT_FLOAT_EQ(params.at("fc2.bias")[1].item<float>(), 0.2f);
}

TEST(OnnxLoaderTest, ErrorsNameTheFileAndTheNode) {
  ox::Model unknown = ox::SmallClassifier();
  unknown.nodes[1].op_type = "Swish";
  unknown.nodes.push_back({"Frobnicate", "late", {"logits"}, {"z"}, {}});
  unknown.outputs = {ox::FloatValue("z", {2, 3})};
  fs::path file = WriteModel("unknown.onnx", ox::Encode(unknown));
  EXPECT_THAT(LoadError(file), HasSubstr(file.string()));
  EXPECT_THAT(LoadError(file),
              HasSubstr("unsupported ONNX op types: Frobnicate (first: node 3 'late'), Swish "
                        "(first: node 1 'relu')"));

  ox::Model missing = ox::SmallClassifier();
  missing.nodes[2].inputs[0] = "nowhere";
  EXPECT_THAT(LoadError(WriteModel("missing.onnx", ox::Encode(missing))),
              HasSubstr("node 2 'fc2' (Gemm): input 'nowhere' is not a graph input"));

  std::string bytes = ox::Encode(ox::SmallClassifier());
  fs::path truncated = WriteModel("truncated.onnx", bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(LoadError(truncated), HasSubstr("truncated"));
  EXPECT_THAT(LoadError(WriteModel("empty.onnx", "")), HasSubstr("empty"));
  EXPECT_THAT(LoadError(SuiteDir() / "absent.onnx"), HasSubstr("cannot read"));

  ox::Model badshape = ox::SmallClassifier();
  badshape.inputs = {ox::FloatValue("x", {2, 7})};
  EXPECT_THAT(LoadError(WriteModel("badshape.onnx", ox::Encode(badshape))),
              HasSubstr("node 0 'fc1' (Gemm)"));
}

TEST(OnnxConfigTest, ModelOnnxReplacesBuiltinAndIsRelativeToTheConfigFile) {
  const test_support::TempDir temp("placer_onnx_config");
  const fs::path& dir = temp.path();
  std::ofstream(dir / "c.yaml") << "model:\n  onnx: models/m.onnx\n  batch_size: 4\n";
  const config::Config c = config::LoadConfig(dir / "c.yaml");
  EXPECT_EQ(c.model.onnx, dir / "models" / "m.onnx");
  EXPECT_TRUE(c.model.builtin.empty());
  EXPECT_EQ(c.model.name(), "m");
  EXPECT_EQ(c.model.batch_size, 4);
  EXPECT_EQ(config::ParseConfig("model:\n  builtin: lenet\n", "x.yaml").model.name(), "lenet");
}

// ---------------------------------------------------------------------------------------------
// The batch of an exported file.

TEST(OnnxBatchTest, TheDefaultBatchIsTheFilesOwnAndAStaticBatchWithoutBakedShapesChanges) {
  const fs::path file = WriteModel("static.onnx", ox::Encode(ox::SmallClassifier(3)));
  EXPECT_EQ(graph::ReadOnnxBatch(file).fixed, 3);
  EXPECT_EQ(graph::ReadOnnxBatch(file).input, "x");
  EXPECT_EQ(graph::LoadOnnx(file).tensor(graph::LoadOnnx(file).TensorByName("x")).shape,
            (graph::Shape{3, 4}));
  const graph::Graph five = graph::LoadOnnx(file, {.batch_size = 5});
  EXPECT_EQ(five.tensor(five.TensorByName("labels")).shape, (graph::Shape{5}));
  EXPECT_EQ(graph::OnnxBatchProblem(file, 5), std::nullopt);
}

TEST(OnnxBatchTest, ADynamicBatchAxisTakesAnyBatchButNeedsOne) {
  ox::Model m = ox::SmallClassifier();
  m.inputs = {ox::SymbolicFloatValue("x", {-1, 4})};
  m.outputs = {ox::SymbolicFloatValue("logits", {-1, 3})};
  const fs::path file = WriteModel("dynamic.onnx", ox::Encode(m));
  EXPECT_EQ(graph::ReadOnnxBatch(file).fixed, std::nullopt);
  EXPECT_THAT(LoadError(file), HasSubstr("leaves its batch axis (axis 0) symbolic ('batch')"));
  for (int64_t batch : {1, 7}) {
    const graph::Graph g = graph::LoadOnnx(file, {.batch_size = batch});
    EXPECT_EQ(g.tensor(g.TensorByName("logits")).shape, (graph::Shape{batch, 3}));
  }
}

// Every replica a step builds reads the export again: its values must be held once, not once
// per read (OPT-350m kept 1.3 GB per replica).
TEST(OnnxBatchTest, EveryReadOfAnExportSharesItsInitializerValues) {
  ox::Model m = ox::SmallClassifier();
  m.inputs = {ox::SymbolicFloatValue("x", {-1, 4})};
  m.outputs = {ox::SymbolicFloatValue("logits", {-1, 3})};
  const fs::path file = WriteModel("shared.onnx", ox::Encode(m));
  auto values = [](const graph::Graph& g, const std::string& name) {
    return g.tensor(g.TensorByName(name)).init.values;
  };
  const graph::Graph one = graph::LoadOnnx(file, {.batch_size = 1});
  std::shared_ptr<const std::vector<float>> weight = values(one, "fc1.weight");
  {
    const graph::Graph seven = graph::LoadOnnx(file, {.batch_size = 7});
    EXPECT_EQ(values(seven, "fc1.weight").get(), weight.get());
    EXPECT_EQ(values(seven, "fc2.weight").get(), values(one, "fc2.weight").get());
    EXPECT_NE(values(seven, "fc2.weight").get(), weight.get());
    EXPECT_EQ(weight.use_count(), 3);  // `one`, `seven` and this test
  }
  EXPECT_EQ(weight.use_count(), 2);
}

TEST(OnnxBatchTest, ABatchBakedIntoShapeConstantsCannotChangeAndTheErrorNamesTheNode) {
  const fs::path file = WriteModel("baked.onnx", ox::Encode(ox::BakedBatchClassifier(2)));
  EXPECT_NO_THROW(graph::LoadOnnx(file));
  EXPECT_NO_THROW(graph::LoadOnnx(file, {.batch_size = 2}));
  try {
    graph::LoadOnnx(file, {.batch_size = 4});
    ADD_FAILURE() << "a batch of 4 loaded";
  } catch (const graph::BatchError& error) {
    EXPECT_EQ(error.file_batch(), 2);
    EXPECT_EQ(error.batch(), 4);
    EXPECT_EQ(error.node(), "node 1 'bake' (Reshape)");
    EXPECT_THAT(error.what(), HasSubstr(file.string()));
    EXPECT_THAT(error.what(), HasSubstr("the export fixed the batch at 2"));
    EXPECT_THAT(error.what(), HasSubstr("cannot reshape [4x5] to [10]"));
    EXPECT_THAT(error.what(), HasSubstr("dynamic_axes={\"x\": {0: \"batch\"}}"));
  }
  const std::optional<std::string> problem = graph::OnnxBatchProblem(file, 1);
  ASSERT_TRUE(problem);
  EXPECT_THAT(*problem, HasSubstr("node 1 'bake' (Reshape)"));
  EXPECT_EQ(graph::OnnxBatchProblem(file, 2), std::nullopt);
}

// Errors that are not the batch's stay what they are.
TEST(OnnxBatchTest, AModelBrokenAtItsOwnBatchIsNotABatchError) {
  ox::Model m = ox::BakedBatchClassifier(2);
  m.nodes[2].inputs[1] = "flat_shape";  // [10] back to [10]: the Gemm after it fails
  const fs::path file = WriteModel("broken.onnx", ox::Encode(m));
  EXPECT_THROW(graph::LoadOnnx(file), graph::GraphError);
  try {
    graph::LoadOnnx(file, {.batch_size = 4});
    ADD_FAILURE() << "loaded";
  } catch (const graph::BatchError& error) {
    ADD_FAILURE() << "a BatchError: " << error.what();
  } catch (const graph::GraphError&) {
  }
}

TEST(OnnxBatchTest, ConfigsTakeTheFilesBatchAndAskForOneWhenItIsDynamic) {
  const test_support::TempDir temp("placer_onnx_batch_config");
  const fs::path& dir = temp.path();
  std::ofstream(dir / "static.onnx", std::ios::binary) << ox::Encode(ox::SmallClassifier(6));
  std::ofstream(dir / "c.yaml") << "model:\n  onnx: static.onnx\n";
  EXPECT_EQ(config::LoadConfig(dir / "c.yaml").model.batch_size, 6);
  ox::Model dynamic = ox::SmallClassifier();
  dynamic.inputs = {ox::SymbolicFloatValue("x", {-1, 4})};
  std::ofstream(dir / "dynamic.onnx", std::ios::binary) << ox::Encode(dynamic);
  std::ofstream(dir / "d.yaml") << "model:\n  onnx: dynamic.onnx\n";
  EXPECT_THAT([&] { config::LoadConfig(dir / "d.yaml"); },
              ::testing::ThrowsMessage<config::ConfigError>(
                  AllOf(HasSubstr("d.yaml:2:3: model.onnx"), HasSubstr("input 'x'"),
                        HasSubstr("set model.batch_size"))));
  std::ofstream(dir / "e.yaml") << "model:\n  onnx: dynamic.onnx\n  batch_size: 3\n";
  EXPECT_EQ(config::LoadConfig(dir / "e.yaml").model.batch_size, 3);
}

// What compare and search ask before building a data-parallel or replicated graph.
TEST(OnnxBatchTest, TheModelFactoryReportsAndThrowsTheBatchError) {
  const test_support::TempDir temp("placer_onnx_batch_factory");
  const fs::path& dir = temp.path();
  std::ofstream(dir / "baked.onnx", std::ios::binary) << ox::Encode(ox::BakedBatchClassifier(2));
  std::ofstream(dir / "c.yaml") << "model:\n  onnx: baked.onnx\n";
  const config::Config c = config::LoadConfig(dir / "c.yaml");
  EXPECT_EQ(setup::BatchProblem(c, 2), std::nullopt);
  ASSERT_TRUE(setup::BatchProblem(c, 1));
  EXPECT_THAT(*setup::BatchProblem(c, 1), HasSubstr("'bake'"));
  EXPECT_NO_THROW(setup::BuildSingleModel(c));
  EXPECT_THROW(setup::StepCache(c).DataParallel(2), graph::BatchError);
  EXPECT_THROW(setup::StepCache(c).Get({.replicas = 2}), graph::BatchError);
  const config::Config lenet = config::ParseConfig("model:\n  builtin: lenet\n", "x.yaml");
  EXPECT_EQ(setup::BatchProblem(lenet, 3), std::nullopt);
}

// A step's replicas, micro-batches and shards ask for the same forward many times: the export is
// read once per batch (and loss normaliser), the forward built from it copied.
TEST(OnnxBatchTest, TheForwardBuilderReadsTheExportOncePerBatch) {
  const test_support::TempDir temp("placer_onnx_forwards");
  const fs::path& dir = temp.path();
  ox::Model m = ox::SmallClassifier();
  m.inputs = {ox::SymbolicFloatValue("x", {-1, 4})};
  m.outputs = {ox::SymbolicFloatValue("logits", {-1, 3})};
  std::ofstream(dir / "dynamic.onnx", std::ios::binary) << ox::Encode(m);
  std::ofstream(dir / "c.yaml") << "model:\n  onnx: dynamic.onnx\n  batch_size: 4\n";
  const graph::ForwardBuilder build = setup::ForwardBuilderFor(config::LoadConfig(dir / "c.yaml"));
  const graph::Graph first = build(2, 4);
  fs::remove(dir / "dynamic.onnx");  // read already: what it built is built again from memory
  const graph::Graph again = build(2, 4);
  EXPECT_EQ(again.num_ops(), first.num_ops());
  EXPECT_EQ(again.tensor(again.TensorByName("x")).shape, (graph::Shape{2, 4}));
  EXPECT_THAT([&] { build(3, 4); },
              ::testing::ThrowsMessage<graph::GraphError>(HasSubstr("dynamic.onnx")));
}

// ---------------------------------------------------------------------------------------------
// Conformance: ONNX's backend node tests.

const fs::path kNodeTests = "/usr/share/libonnx-testdata/data/node";
const fs::path kExpectedPassing =
    fs::path(PLACER_SOURCE_DIR) / "tests/onnx_conformance_passing.txt";

struct CaseResult {
  bool pass = false;
  bool bound = false;  // graph inputs were bound at load time
  std::string detail;
};

// Loads the case's model without a loss, feeds test_data_set_0's inputs and compares every output
// with ONNX's expected values (rtol 1e-3, atol 1e-5: float32 kernels against numpy references).
// Many cases pass a shape, axes, scales or split sizes as a graph input, which the IR takes only
// at load time (exporters write them as constants): when loading fails for want of such a value,
// the graph input the error names is bound at load time to its test value and the case is loaded
// again.
CaseResult RunCase(const fs::path& dir) {
  CaseResult result;
  const fs::path data = dir / "test_data_set_0";
  try {
    const graph::OnnxSignature signature = graph::ReadOnnxSignature(dir / "model.onnx");
    graph::OnnxOptions options{.loss = false, .training_step = false};
    graph::Graph g;
    for (size_t attempt = 0;; ++attempt) {
      try {
        g = graph::LoadOnnx(dir / "model.onnx", options);
        break;
      } catch (const graph::GraphError& error) {
        const std::string message = error.what();
        const size_t at = message.find("input '");
        if (message.find("computable at load time") == std::string::npos ||
            at == std::string::npos || attempt >= signature.inputs.size()) {
          throw;
        }
        const std::string name = message.substr(at + 7, message.find('\'', at + 7) - (at + 7));
        const auto input = std::find(signature.inputs.begin(), signature.inputs.end(), name);
        const fs::path file = data / fmt::format("input_{}.pb", input - signature.inputs.begin());
        if (input == signature.inputs.end() || !fs::exists(file)) throw;
        options.bound_inputs.emplace(name, graph::ReadOnnxTensor(file));
        result.bound = true;
      }
    }
    runtime::TensorMap batch;
    for (size_t i = 0; i < signature.inputs.size(); ++i) {
      const fs::path file = data / fmt::format("input_{}.pb", i);
      if (!fs::exists(file)) continue;  // an optional input left out
      const std::optional<graph::TensorId> id = g.FindTensor(signature.inputs[i]);
      if (id && g.tensor(*id).kind == graph::TensorKind::kInput) {
        batch.emplace(signature.inputs[i], ToTorch(graph::ReadOnnxTensor(file)));
      }
    }
    auto executor = RunForward(g, batch, runtime::InitializeParameters(g, 0));
    double worst = 0;
    for (size_t i = 0; i < signature.outputs.size(); ++i) {
      at::Tensor expected =
          ToTorch(graph::ReadOnnxTensor(data / fmt::format("output_{}.pb", i))).to(at::kDouble);
      at::Tensor actual = executor->LastValue(signature.outputs[i]).to(at::kDouble);
      if (actual.sizes() != expected.sizes()) {
        result.detail =
            fmt::format("output {} has shape {}, expected {}", i, fmt::join(actual.sizes(), "x"),
                        fmt::join(expected.sizes(), "x"));
        return result;
      }
      at::Tensor excess = (actual - expected).abs() - (1e-5 + 1e-3 * expected.abs());
      if (expected.numel() > 0) worst = std::max(worst, excess.max().item<double>());
      if (at::isnan(actual).any().item<bool>() != at::isnan(expected).any().item<bool>()) worst = 1;
    }
    result.pass = worst <= 0;
    if (!result.pass) result.detail = fmt::format("mismatch beyond tolerance by {:.3g}", worst);
  } catch (const std::exception& error) {
    result.detail = error.what();
    // One line: drop the model path (the case names it) and anything after a newline.
    const std::string model = (dir / "model.onnx").string() + ": ";
    if (result.detail.rfind(model, 0) == 0) result.detail.erase(0, model.size());
    result.detail = result.detail.substr(0, result.detail.find('\n'));
  }
  return result;
}

std::set<std::string> ExpectedPassing() {
  std::set<std::string> cases;
  std::ifstream in(kExpectedPassing);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line[0] != '#') cases.insert(line);
  }
  return cases;
}

TEST(OnnxConformanceTest, NodeTestsThatPassedStillPass) {
  // A dependency scripts/setup.sh installs: missing, it is a failure, never a skip.
  ASSERT_TRUE(fs::exists(kNodeTests)) << kNodeTests << " missing: run scripts/setup.sh";
  std::vector<fs::path> dirs;
  for (const auto& entry : fs::directory_iterator(kNodeTests)) dirs.push_back(entry.path());
  std::sort(dirs.begin(), dirs.end());
  const std::set<std::string> expected = ExpectedPassing();
  std::vector<std::string> regressions, newly_passing;
  std::ostringstream table;
  table << fmt::format("{:<60} {}\n", "ONNX node test", "result");
  int passing = 0;
  for (const fs::path& dir : dirs) {
    const std::string name = dir.filename().string();
    if (std::getenv("PLACER_ONNX_TRACE")) std::cerr << name << std::endl;  // to find a hang
    CaseResult r = RunCase(dir);
    passing += r.pass;
    table << fmt::format(
        "{:<60} {}\n", name,
        r.pass ? (r.bound ? "pass (inputs bound at load time)" : "pass") : "FAIL: " + r.detail);
    if (r.pass && expected.count(name) == 0) newly_passing.push_back(name);
    if (!r.pass && expected.count(name) != 0) regressions.push_back(name + ": " + r.detail);
  }
  std::cout << table.str()
            << fmt::format("{} of {} ONNX node tests pass ({} expected)\n", passing, dirs.size(),
                           expected.size());
  EXPECT_FALSE(expected.empty()) << kExpectedPassing << " lists no cases";
  for (const std::string& name : expected) {
    if (!fs::exists(kNodeTests / name)) regressions.push_back(name + ": case not found");
  }
  EXPECT_TRUE(regressions.empty()) << "listed in " << kExpectedPassing << " but failing:\n  "
                                   << fmt::format("{}", fmt::join(regressions, "\n  "));
  if (!newly_passing.empty()) {
    std::cout << "passing but not yet listed in " << kExpectedPassing << ":\n  "
              << fmt::format("{}", fmt::join(newly_passing, "\n  ")) << '\n';
  }
}

}  // namespace
}  // namespace placer
