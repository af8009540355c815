// The graph IR as a specification: LeNet's shapes, parameters and FLOPs, the derived training step,
// and validation errors that name the culprit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "graph/ir.h"
#include "graph/models.h"
#include "graph/ops.h"
#include "graph/shared_values.h"
#include "graph/training_step.h"

namespace placer::graph {
namespace {

using ::testing::HasSubstr;

const Shape& OutputShape(const Graph& g, const std::string& op) {
  return g.tensor(g.op(*g.FindOp(op)).outputs.at(0)).shape;
}

TEST(SharedValuesTest, EqualValuesAreOneVectorBitForBitWhileHeld) {
  const auto a = graph::SharedValues({1.0f, 0.0f, 2.5f});
  EXPECT_EQ(graph::SharedValues({1.0f, 0.0f, 2.5f}).get(), a.get());
  EXPECT_NE(graph::SharedValues({1.0f, -0.0f, 2.5f}).get(), a.get());  // equal floats, other bits
  EXPECT_NE(graph::SharedValues({1.0f, 0.0f}).get(), a.get());
  EXPECT_TRUE(std::signbit((*graph::SharedValues({1.0f, -0.0f, 2.5f}))[1]));
  const std::weak_ptr<const std::vector<float>> held = graph::SharedValues({7.0f, 8.0f});
  EXPECT_TRUE(held.expired());  // nobody holds them: the table does not keep them alive
}

TEST(LeNetTest, ForwardShapesFollowTheD2lChapter) {
  Graph g = BuildLeNet({});
  EXPECT_EQ(g.tensor(g.TensorByName("images")).shape, (Shape{256, 1, 28, 28}));
  EXPECT_EQ(OutputShape(g, "conv1"), (Shape{256, 20, 26, 26}));
  EXPECT_EQ(OutputShape(g, "pool1"), (Shape{256, 20, 13, 13}));
  EXPECT_EQ(OutputShape(g, "conv2"), (Shape{256, 50, 9, 9}));
  EXPECT_EQ(OutputShape(g, "pool2"), (Shape{256, 50, 4, 4}));
  EXPECT_EQ(OutputShape(g, "flatten"), (Shape{256, 800}));
  EXPECT_EQ(OutputShape(g, "fc1"), (Shape{256, 128}));
  EXPECT_EQ(OutputShape(g, "fc2"), (Shape{256, 10}));
  EXPECT_EQ(OutputShape(g, "loss"), (Shape{}));
}

TEST(LeNetTest, ParameterCountAndInitialisation) {
  Graph g = BuildLeNet({});
  EXPECT_EQ(g.ParameterCount(),
            20 * 1 * 3 * 3 + 20 + 50 * 20 * 5 * 5 + 50 + 800 * 128 + 128 + 128 * 10 + 10);
  EXPECT_EQ(g.Parameters().size(), 8u);
  const Tensor& w = g.tensor(g.TensorByName("fc1.weight"));
  EXPECT_EQ(w.shape, (Shape{128, 800}));
  EXPECT_EQ(w.init.kind, Initializer::Kind::kNormal);
  EXPECT_DOUBLE_EQ(w.init.stddev, 0.01);
  EXPECT_EQ(g.tensor(g.TensorByName("fc1.bias")).init.kind, Initializer::Kind::kZeros);
}

TEST(LeNetTest, FlopsAndBytes) {
  Graph g = BuildLeNet({});
  auto flops = [&](const std::string& name) { return OpFlops(g, g.op(*g.FindOp(name))); };
  EXPECT_DOUBLE_EQ(flops("conv1"), 2.0 * 256 * 20 * 26 * 26 * 9 + 256 * 20 * 26 * 26);
  EXPECT_DOUBLE_EQ(flops("conv2"), 2.0 * 256 * 50 * 9 * 9 * 20 * 25 + 256 * 50 * 9 * 9);
  EXPECT_DOUBLE_EQ(flops("fc1"), 2.0 * 256 * 800 * 128 + 256 * 128);
  EXPECT_DOUBLE_EQ(flops("relu1"), 256.0 * 20 * 26 * 26);
  EXPECT_DOUBLE_EQ(flops("pool1"), 256.0 * 20 * 13 * 13 * 4);
  EXPECT_DOUBLE_EQ(flops("flatten"), 0.0);
  EXPECT_DOUBLE_EQ(flops("conv1.backward"), 2 * flops("conv1"));
  EXPECT_DOUBLE_EQ(flops("fc1.weight.update"), 2.0 * 128 * 800);
  EXPECT_EQ(OpOutputBytes(g, g.op(*g.FindOp("conv1"))), 256 * 20 * 26 * 26 * 4);
  EXPECT_EQ(OpOutputBytes(g, g.op(*g.FindOp("fc1.weight.update"))), 128 * 800 * 4);
}

TEST(TrainingStepTest, EveryForwardOpHasItsBackwardAndEveryParameterItsUpdate) {
  Graph g = BuildLeNet({});
  EXPECT_EQ(g.OpsInPhase(Phase::kForward).size(), 11u);
  // Every forward op reaches the loss and carries a gradient except conv1's input (the data), so
  // all 11 have a backward op.
  EXPECT_EQ(g.OpsInPhase(Phase::kBackward).size(), 11u);
  EXPECT_EQ(g.OpsInPhase(Phase::kUpdate).size(), 8u);
  for (OpId id : g.OpsInPhase(Phase::kBackward)) {
    const Op& backward = g.op(id);
    EXPECT_EQ(backward.name, g.op(backward.forward_op).name + ".backward");
  }
  const Op& update = g.op(*g.FindOp("conv2.weight.update"));
  EXPECT_EQ(g.op(update.forward_op).name, "conv2");
  EXPECT_EQ(g.tensor(update.inputs[1]).name, "conv2.weight.grad@conv2");
  // conv1's backward computes no gradient for the images.
  const Op& conv1_backward = g.op(*g.FindOp("conv1.backward"));
  EXPECT_EQ(conv1_backward.outputs.size(), 2u);
  EXPECT_FALSE(g.FindTensor("images.grad@conv1").has_value());
}

TEST(TrainingStepTest, TopologicalOrderPutsProducersFirst) {
  Graph g = BuildParallelMlp({.depth = 2, .branches = 3});
  std::vector<OpId> order = g.TopologicalOrder();
  ASSERT_EQ(order.size(), static_cast<size_t>(g.num_ops()));
  std::vector<size_t> position(order.size());
  for (size_t i = 0; i < order.size(); ++i) position[static_cast<size_t>(order[i])] = i;
  for (OpId id = 0; id < g.num_ops(); ++id) {
    for (TensorId in : g.op(id).inputs) {
      OpId producer = g.tensor(in).producer;
      if (producer != kNoOp) {
        EXPECT_LT(position[static_cast<size_t>(producer)], position[static_cast<size_t>(id)])
            << g.op(id).name;
      }
    }
  }
}

TEST(TrainingStepTest, FanOutSumsGradientContributions) {
  // Tower outputs are summed by a chain of Add ops: each Add's backward hands a gradient to both
  // of its inputs, named after the consumer it came through.
  Graph g = BuildParallelMlp({.depth = 1, .branches = 3});
  const Op& merge = g.op(*g.FindOp("merge2.backward"));
  EXPECT_EQ(merge.outputs.size(), 2u);
  const Op& relu0 = g.op(*g.FindOp("tower0.fc0.relu.backward"));
  ASSERT_GE(relu0.inputs.size(), 1u);
  EXPECT_EQ(g.tensor(relu0.inputs[0]).name, "tower0.fc0.relu.grad@merge1");
}

class ValidationTest : public ::testing::Test {
 protected:
  // x[4,8] -> fc (w[3,8]) -> y[4,3]
  void SetUp() override {
    x_ = graph_.AddTensor({.name = "x", .shape = {4, 8}, .kind = TensorKind::kInput});
    w_ = graph_.AddTensor({.name = "w", .shape = {3, 8}, .kind = TensorKind::kParameter});
    y_ = graph_.AddTensor({.name = "y", .shape = {4, 3}});
  }
  std::string ValidationMessage() {
    try {
      graph_.Validate();
    } catch (const GraphError& error) {
      return error.what();
    }
    return "no error";
  }
  Graph graph_;
  TensorId x_, w_, y_;
};

TEST_F(ValidationTest, AcceptsAWellFormedGraph) {
  graph_.AddOp({.name = "fc", .type = op_types::kLinear, .inputs = {x_, w_}, .outputs = {y_}});
  EXPECT_EQ(ValidationMessage(), "no error");
}

TEST_F(ValidationTest, ShapeMismatchNamesTheOp) {
  TensorId bad = graph_.AddTensor({.name = "z", .shape = {4, 5}});
  graph_.AddOp({.name = "fc", .type = op_types::kLinear, .inputs = {x_, w_}, .outputs = {bad}});
  EXPECT_THAT(ValidationMessage(),
              AllOf(HasSubstr("op 'fc'"), HasSubstr("shape mismatch"), HasSubstr("[4x3]")));
}

TEST_F(ValidationTest, IncompatibleInputsNameTheOpAndTensors) {
  TensorId w2 = graph_.AddTensor({.name = "w2", .shape = {3, 7}, .kind = TensorKind::kParameter});
  graph_.AddOp({.name = "fc", .type = op_types::kLinear, .inputs = {x_, w2}, .outputs = {y_}});
  EXPECT_THAT(ValidationMessage(), AllOf(HasSubstr("op 'fc'"), HasSubstr("'w2'")));
}

TEST_F(ValidationTest, DanglingInputNamesConsumerAndTensor) {
  TensorId ghost = graph_.AddTensor({.name = "ghost", .shape = {4, 8}});
  graph_.AddOp({.name = "fc", .type = op_types::kLinear, .inputs = {ghost, w_}, .outputs = {y_}});
  EXPECT_THAT(ValidationMessage(),
              AllOf(HasSubstr("op 'fc'"), HasSubstr("'ghost'"), HasSubstr("dangling")));
}

TEST_F(ValidationTest, CycleNamesAnOpOnIt) {
  TensorId a = graph_.AddTensor({.name = "a", .shape = {4, 8}});
  TensorId b = graph_.AddTensor({.name = "b", .shape = {4, 8}});
  graph_.AddOp({.name = "relu_a", .type = op_types::kRelu, .inputs = {b}, .outputs = {a}});
  graph_.AddOp({.name = "relu_b", .type = op_types::kRelu, .inputs = {a}, .outputs = {b}});
  EXPECT_THAT(ValidationMessage(), AllOf(HasSubstr("cycle"), HasSubstr("op 'relu_a'")));
}

TEST_F(ValidationTest, UnknownOpTypeIsNamed) {
  graph_.AddOp({.name = "mystery", .type = "Frobnicate", .inputs = {x_}, .outputs = {y_}});
  EXPECT_THAT(ValidationMessage(), AllOf(HasSubstr("'mystery'"), HasSubstr("'Frobnicate'")));
}

TEST_F(ValidationTest, MissingAttributeIsNamed) {
  TensorId img =
      graph_.AddTensor({.name = "img", .shape = {1, 1, 8, 8}, .kind = TensorKind::kInput});
  TensorId out = graph_.AddTensor({.name = "out", .shape = {1, 1, 4, 4}});
  graph_.AddOp({.name = "pool", .type = op_types::kAvgPool2d, .inputs = {img}, .outputs = {out}});
  EXPECT_THAT(ValidationMessage(), AllOf(HasSubstr("op 'pool'"), HasSubstr("'kernel'")));
}

TEST_F(ValidationTest, WritingAParameterIsRejected) {
  graph_.AddOp({.name = "fc", .type = op_types::kLinear, .inputs = {x_, w_}, .outputs = {y_}});
  TensorId w_shadow =
      graph_.AddTensor({.name = "w_shadow", .shape = {4, 3}, .kind = TensorKind::kParameter});
  graph_.AddOp({.name = "relu", .type = op_types::kRelu, .inputs = {y_}, .outputs = {w_shadow}});
  EXPECT_THAT(ValidationMessage(), AllOf(HasSubstr("op 'relu'"), HasSubstr("'w_shadow'")));
}

TEST(GraphTest, DuplicateNamesAndDoubleProducersAreRejected) {
  Graph g;
  TensorId x = g.AddTensor({.name = "x", .shape = {2}, .kind = TensorKind::kInput});
  TensorId y = g.AddTensor({.name = "y", .shape = {2}});
  EXPECT_THROW(g.AddTensor({.name = "x", .shape = {2}}), GraphError);
  g.AddOp({.name = "r1", .type = op_types::kRelu, .inputs = {x}, .outputs = {y}});
  EXPECT_THROW(g.AddOp({.name = "r1", .type = op_types::kRelu, .inputs = {x}, .outputs = {}}),
               GraphError);
  try {
    g.AddOp({.name = "r2", .type = op_types::kRelu, .inputs = {x}, .outputs = {y}});
    FAIL() << "a second producer was accepted";
  } catch (const GraphError& error) {
    EXPECT_THAT(error.what(), AllOf(HasSubstr("'r2'"), HasSubstr("'r1'")));
  }
}

// The name index keeps ids, not names: every name must stay findable through many growths of the
// table, in a copy of the graph, and after the copy diverges from the original.
TEST(GraphTest, EveryNameIsFoundInTheGraphAndInItsCopiesAsTheyDiverge) {
  Graph g;
  constexpr int kOps = 5000;
  // Long names (beyond the short-string buffer) and short ones, alike in their prefixes.
  auto name_of = [](int i) {
    return i % 2 ? "replica/layer/" + std::to_string(i) : std::to_string(i);
  };
  TensorId last = g.AddTensor({.name = "x", .shape = {2}, .kind = TensorKind::kInput});
  for (int i = 0; i < kOps; ++i) {
    const std::string name = name_of(i);
    const TensorId out = g.AddTensor({.name = name + ":out", .shape = {2}});
    g.AddOp({.name = name, .type = op_types::kRelu, .inputs = {last}, .outputs = {out}});
    last = out;
  }
  Graph copy = g;
  const TensorId extra = copy.AddTensor({.name = "extra", .shape = {2}});
  copy.AddOp({.name = "tail", .type = op_types::kRelu, .inputs = {last}, .outputs = {extra}});
  for (int i = 0; i < kOps; ++i) {
    const std::string name = name_of(i);
    for (const Graph* graph : {&g, &copy}) {
      ASSERT_TRUE(graph->FindOp(name)) << name;
      EXPECT_EQ(graph->op(*graph->FindOp(name)).name, name);
      EXPECT_EQ(graph->tensor(graph->TensorByName(name + ":out")).name, name + ":out");
    }
  }
  EXPECT_EQ(copy.FindOp("tail"), copy.num_ops() - 1);
  EXPECT_FALSE(g.FindOp("tail"));
  EXPECT_FALSE(g.FindTensor("extra"));
  EXPECT_FALSE(g.FindOp("replica/layer/0"));
  EXPECT_FALSE(Graph().FindOp("x"));
  EXPECT_THROW(
      copy.AddOp({.name = "tail", .type = op_types::kRelu, .inputs = {*copy.FindTensor("x")}}),
      GraphError);
}

// Copies of an op share its attributes until one is changed; a change is the changer's alone.
TEST(GraphTest, ChangingACopysAttributesLeavesTheOriginalAsItWas) {
  Attributes original;
  original.Set("axis", int64_t{1});
  original.Set("perm", std::vector<int64_t>{1, 0});
  Attributes copy = original;
  copy.Set("axis", int64_t{2});
  copy.Set("alpha", 0.5);
  EXPECT_EQ(original.GetInt("axis"), 1);
  EXPECT_FALSE(original.Has("alpha"));
  EXPECT_EQ(copy.GetInt("axis"), 2);
  EXPECT_EQ(copy.GetInts("perm"), (std::vector<int64_t>{1, 0}));
  Attributes untouched = original;
  EXPECT_EQ(&untouched.values(), &original.values());  // one map while neither changes
  EXPECT_TRUE(Attributes().values().empty());
  EXPECT_THROW(Attributes().GetInt("axis"), GraphError);
}

TEST(GraphTest, AbsurdShapesAreRefusedBeforeAnyAllocation) {
  Graph g;
  EXPECT_THROW(g.AddTensor({.name = "huge", .shape = {1LL << 40, 1LL << 40}}), GraphError);
  EXPECT_THROW(g.AddTensor({.name = "negative", .shape = {-3}}), GraphError);
}

TEST(TrainingStepTest, ParameterThatDoesNotReachTheLossIsNamed) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4, 8});
  TensorId y = b.Input("y", {4}, DType::kInt64, TensorKind::kLabel);
  b.Linear("unused", x, 3, 0.1);
  b.SoftmaxCrossEntropy("loss", b.Linear("fc", x, 3, 0.1), y);
  try {
    AppendBackwardAndUpdate(g, 0.1);
    FAIL() << "expected an error";
  } catch (const GraphError& error) {
    EXPECT_THAT(error.what(), HasSubstr("'unused.weight'"));
  }
}

TEST(TrainingStepTest, GraphWithoutLossIsRejected) {
  Graph g;
  ModelBuilder b(g);
  b.Relu("r", b.Input("x", {4, 8}));
  EXPECT_THROW(AppendBackwardAndUpdate(g, 0.1), GraphError);
}

}  // namespace
}  // namespace placer::graph
