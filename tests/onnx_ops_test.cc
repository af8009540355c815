// ONNX ops that the loader folds, inlines or refuses by their inputs: OneHot (folded, or run on
// runtime indices), If (the branch its load-time condition takes, inlined) and NonZero (folded;
// data-dependent on a runtime tensor). Hand-written models through the loader and the executor.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/onnx_loader.h"
#include "graph/ops.h"
#include "graph/placement.h"
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

const graph::OnnxOptions kForwardOnly{.loss = false, .training_step = false};

fs::path WriteModel(const std::string& name, const ox::Model& model) {
  static const test_support::TempDir dir("placer_onnx_ops_test");
  return dir.Write(name, ox::Encode(model));
}

std::string LoadError(const fs::path& file, const graph::OnnxOptions& options = kForwardOnly) {
  try {
    graph::LoadOnnx(file, options);
  } catch (const graph::GraphError& error) {
    return error.what();
  }
  return "(no error)";
}

// The forward ops of `g` on one CPU worker; the executor, for reading values.
std::unique_ptr<runtime::Executor> RunForward(const graph::Graph& g,
                                              const runtime::TensorMap& batch) {
  auto executor = std::make_unique<runtime::Executor>(
      g, test_support::CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0),
      runtime::InitializeParameters(g, 0), runtime::ExecutorOptions{.forward_only = true});
  executor->RunStep(batch);
  return executor;
}

graph::OpId Producer(const graph::Graph& g, const std::string& tensor) {
  return g.tensor(g.TensorByName(tensor)).producer;
}

// ONNX's OneHot: indices -> `on` at the class an index names along `axis`, negative indices
// counting from the end, out-of-range ones giving a row of `off`.
const std::vector<int64_t> kIndices = {0, 3, -1, 4, -5, 2};  // 4 and -5 are out of range

at::Tensor ExpectedOneHot(int64_t axis) {
  // [2, 3] indices, depth 4, off 0.5, on 2: the output [2, 3, 4] moved to `axis`.
  at::Tensor expected = at::full({2, 3, 4}, 0.5, at::kFloat);
  for (int64_t e = 0; e < 6; ++e) {
    const int64_t i = kIndices[static_cast<size_t>(e)];
    if (i >= -4 && i < 4) expected[e / 3][e % 3][i < 0 ? i + 4 : i] = 2.0;
  }
  return axis == 1 ? expected.permute({0, 2, 1}).contiguous() : expected;
}

// The [off, on] values as a Constant node, or (`values_initializer`) as the float initializer that
// an export with constant folding writes, which is no weight either.
ox::Model OneHotModel(bool known_indices, int64_t axis, bool values_initializer = false) {
  ox::Model m;
  const std::vector<int64_t> out =
      axis == 1 ? std::vector<int64_t>{2, 4, 3} : std::vector<int64_t>{2, 3, 4};
  m.outputs = {ox::FloatValue("y", out)};
  m.initializers = {ox::IntTensor("depth", {}, {4})};
  m.nodes = {
      {"Constant", "values", {}, {"values"}, {ox::AttrFloats("value_floats", {0.5f, 2})}},
      {"OneHot", "one_hot", {"indices", "depth", "values"}, {"y"}, {ox::AttrInt("axis", axis)}}};
  if (values_initializer) {
    m.nodes.erase(m.nodes.begin());
    m.initializers.push_back(ox::FloatTensor("values", {2}, {0.5f, 2}));
  }
  if (known_indices) {
    m.initializers.push_back(ox::IntTensor("indices", {2, 3}, kIndices));
  } else {
    m.inputs = {ox::IntValue("indices", {2, 3})};
  }
  return m;
}

TEST(OnnxOpsTest, OneHotOfRuntimeIndicesIsOnWhereTheIndexNamesTheClass) {
  for (const auto& [axis, values_initializer] : {std::pair{-1, false}, std::pair{1, true}}) {
    const graph::Graph g = graph::LoadOnnx(
        WriteModel("one_hot.onnx", OneHotModel(false, axis, values_initializer)), kForwardOnly);
    EXPECT_TRUE(g.Parameters().empty()) << "the [off, on] values are no weight";
    auto executor = RunForward(g, {{"indices", at::tensor(kIndices).reshape({2, 3})}});
    const at::Tensor y = executor->LastValue("y");
    EXPECT_TRUE(at::equal(y, ExpectedOneHot(axis))) << "axis " << axis << ":\n" << y;
  }
}

TEST(OnnxOpsTest, OneHotOfKnownIndicesIsFolded) {
  const graph::Graph g =
      graph::LoadOnnx(WriteModel("one_hot_known.onnx", OneHotModel(true, 1)), kForwardOnly);
  ASSERT_EQ(g.num_ops(), 1);
  EXPECT_EQ(g.op(Producer(g, "y")).type, graph::op_types::kConstant);
  EXPECT_TRUE(at::equal(RunForward(g, {})->LastValue("y"), ExpectedOneHot(1)));
}

// A one-hot encoding of token ids feeding a weight, as a model trains it: the training step is
// built, and the indices (integers) take no gradient.
TEST(OnnxOpsTest, OneHotTrainsTheWeightsItFeeds) {
  ox::Model m = OneHotModel(false, -1);
  std::vector<float> w(4 * 3);
  for (size_t i = 0; i < w.size(); ++i) w[i] = 0.1f * static_cast<float>(i) - 0.5f;
  m.initializers.push_back(ox::FloatTensor("proj.weight", {4, 3}, w));
  m.nodes.push_back({"MatMul", "proj", {"y", "proj.weight"}, {"h"}, {}});
  m.nodes.push_back({"ReduceMean",
                     "pool",
                     {"h"},
                     {"logits"},
                     {ox::AttrInts("axes", {1}), ox::AttrInt("keepdims", 0)}});
  m.outputs = {ox::FloatValue("logits", {2, 3})};
  const graph::Graph g = graph::LoadOnnx(WriteModel("one_hot_train.onnx", m), {});
  ASSERT_EQ(g.Parameters().size(), 1u);
  EXPECT_EQ(g.tensor(g.Parameters()[0]).name, "proj.weight");
}

// If: cond ? then_branch : else_branch. Both branches read outer values by name: x, a graph input,
// and s, computed by an outer node that only the branches read.
ox::Model IfModel(const std::string& condition) {
  ox::Model then_branch, else_branch;
  then_branch.nodes = {{"Mul", "then_mul", {"s", "x"}, {"then_y"}, {}}};
  then_branch.outputs = {ox::FloatValue("then_y", {2, 3})};
  else_branch.nodes = {{"Neg", "else_neg", {"s"}, {"else_y"}, {}}};
  else_branch.outputs = {ox::FloatValue("else_y", {2, 3})};
  ox::Model m;
  m.inputs = {ox::FloatValue("x", {2, 3})};
  m.outputs = {ox::FloatValue("y", {2, 3})};
  m.nodes = {{"Sigmoid", "squash", {"x"}, {"s"}, {}},
             {"If",
              "choose",
              {condition},
              {"y"},
              {ox::AttrGraph("then_branch", ox::EncodeGraph(then_branch)),
               ox::AttrGraph("else_branch", ox::EncodeGraph(else_branch))}}};
  return m;
}

TEST(OnnxOpsTest, IfWithAConditionKnownAtLoadTimeIsTheBranchItTakes) {
  const at::Tensor x = at::linspace(-2, 2, 6).reshape({2, 3});
  for (const int64_t condition : {1, 0}) {
    ox::Model m = IfModel("cond");
    // The condition as exporters compute it: from shapes (here, Size(x) == 6 or 7).
    m.initializers.push_back(ox::IntTensor("expected_size", {}, {condition ? 6 : 7}));
    m.nodes.insert(m.nodes.begin(),
                   {{"Size", "size", {"x"}, {"size"}, {}},
                    {"Equal", "is_expected", {"size", "expected_size"}, {"cond"}, {}}});
    const graph::Graph g = graph::LoadOnnx(WriteModel("if.onnx", m), kForwardOnly);
    for (graph::OpId id = 0; id < g.num_ops(); ++id) {
      EXPECT_NE(g.op(id).name, condition ? "else_neg" : "then_mul") << "the branch not taken";
    }
    const at::Tensor expected = condition ? at::sigmoid(x) * x : -at::sigmoid(x);
    EXPECT_TRUE(at::allclose(RunForward(g, {{"x", x}})->LastValue("y"), expected))
        << "condition " << condition;
  }
}

TEST(OnnxOpsTest, IfRefusesARuntimeConditionAndNamesWhatFailsInItsBranch) {
  ox::Model runtime = IfModel("flag");
  runtime.inputs.push_back(ox::IntValue("flag", {}));
  EXPECT_THAT(LoadError(WriteModel("if_runtime.onnx", runtime)),
              AllOf(HasSubstr("'choose' (If)"), HasSubstr("input 'flag' (If's condition"),
                    HasSubstr("must be computable at load time")));

  ox::Model broken = IfModel("cond");
  broken.nodes.insert(broken.nodes.begin(),
                      {"Constant", "always", {}, {"cond"}, {ox::AttrInt("value_int", 1)}});
  ox::Model then_branch;
  then_branch.nodes = {{"Reshape", "then_reshape", {"x", "bad_shape"}, {"then_y"}, {}}};
  then_branch.initializers = {ox::IntTensor("bad_shape", {1}, {5})};
  then_branch.outputs = {ox::FloatValue("then_y", {5})};
  broken.nodes[2].attributes[0] = ox::AttrGraph("then_branch", ox::EncodeGraph(then_branch));
  EXPECT_THAT(LoadError(WriteModel("if_broken.onnx", broken)),
              AllOf(HasSubstr("'choose' (If)"),
                    HasSubstr("in the then_branch, node 0 'then_reshape' (Reshape)")));

  // An op type the loader lacks, inside a branch, is named with the branch and the node.
  then_branch.nodes = {{"Frobnicate", "odd", {"x"}, {"then_y"}, {}}};
  broken.nodes[2].attributes[0] = ox::AttrGraph("then_branch", ox::EncodeGraph(then_branch));
  EXPECT_THAT(
      LoadError(WriteModel("if_unknown.onnx", broken)),
      AllOf(HasSubstr("'choose' (If)"),
            HasSubstr("not supported: op type Frobnicate (in the then_branch, node 0 'odd')")));
}

TEST(OnnxOpsTest, NonZeroOfAKnownValueIsFoldedAndOfARuntimeOneRefused) {
  ox::Model m;
  m.outputs = {ox::FloatValue("where", {2, 3})};
  m.initializers = {ox::IntTensor("mask", {2, 3}, {1, 0, 7, 0, 0, -2})};
  m.nodes = {{"NonZero", "nz", {"mask"}, {"where"}, {}}};
  const graph::Graph g = graph::LoadOnnx(WriteModel("nonzero.onnx", m), kForwardOnly);
  EXPECT_EQ(g.op(Producer(g, "where")).type, graph::op_types::kConstant);
  // Row-major order: (0, 0), (0, 2), (1, 2); one row per axis.
  EXPECT_TRUE(at::equal(RunForward(g, {})->LastValue("where"),
                        at::tensor(std::vector<int64_t>{0, 0, 1, 0, 2, 2}).reshape({2, 3})));

  ox::Model runtime;
  runtime.inputs = {ox::FloatValue("x", {2, 3})};
  runtime.outputs = {ox::FloatValue("where", {2, 3})};
  runtime.nodes = {{"NonZero", "nz", {"x"}, {"where"}, {}}};
  EXPECT_THAT(LoadError(WriteModel("nonzero_runtime.onnx", runtime)),
              AllOf(HasSubstr("'nz' (NonZero)"), HasSubstr("data-dependent")));
}

}  // namespace
}  // namespace placer
