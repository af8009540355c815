// Tensor parallelism in the search: split shapes of the action space, and the split steps their
// candidates place. The warm start that spreads every group is the Megatron-style baseline's
// TP x DP placement and time; any candidate of a split shape (shards on their own devices or
// sharing them) steps as one device; the answer's placement file says how it is split.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <span>
#include <string>
#include <vector>

#include "graph/models.h"
#include "graph/placement.h"
#include "graph/step_names.h"
#include "graph/tensor_parallel.h"
#include "placer/action_space.h"
#include "placer/baselines/megatron.h"
#include "placer/run_directory.h"
#include "placer/setup/simulated_problem.h"
#include "placer/setup/tensor_parallel_models.h"
#include "proto/writers.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulator.h"
#include "tests/forward_builders.h"
#include "tests/support.h"
#include "tests/temp_dir.h"
#include "tests/tensor_parallel_support.h"

namespace placer::search {
namespace {

using graph::PipelineSchedule;
using test_support::CpuWorkers;
using ::testing::HasSubstr;

constexpr double kLearningRate = 0.2;
constexpr int64_t kBatch = 4;

graph::Graph Encoder(int64_t rows, int64_t normalizer) {
  return test_support::SmallEncoderForward(rows, normalizer);
}

TEST(ActionSpaceTest, TensorParallelShapesComeLastAndReadBack) {
  const ActionSpace space(4, {1, 2, 4}, {1}, {}, {{4, 2}, {2, 2}, {4, 4}});
  ASSERT_EQ(space.shapes().size(), 3u + 3u);
  EXPECT_EQ(space.tensor_parallel(), (std::vector<TensorParallelShape>{{2, 2}, {4, 2}, {4, 4}}));
  EXPECT_EQ(space.shapes()[3], (StepShape{2, 1, PipelineSchedule::kGPipe, 2}));
  EXPECT_EQ(space.shapes()[5], (StepShape{4, 1, PipelineSchedule::kGPipe, 4}));
  EXPECT_TRUE(space.has_other_shapes());
  EXPECT_FALSE(ActionSpace(4, {1, 2, 4}).has_other_shapes());

  // Two replicas of two shards: the first group split over all four devices, the second whole on
  // device 0 (its shards share it).
  const Candidate split{.replicas = 4, .options = {space.SpreadOption(4), 0}, .tensor_ways = 2};
  EXPECT_NO_THROW(space.Check(split, 2));
  EXPECT_EQ(FormatCandidate(split), fmt::format("4/1/gpipe/t2:{},0", space.SpreadOption(4)));
  EXPECT_EQ(ParseCandidate(FormatCandidate(split)), split);
  Candidate unsplit = split;
  unsplit.tensor_ways = 1;
  EXPECT_NE(KeyOf(split), KeyOf(unsplit));
  EXPECT_EQ(space.WithShape(split, {4, 1, PipelineSchedule::kGPipe, 1}), unsplit);
  EXPECT_THAT(Summarise(space, split, {"a", "b", "c", "d"}),
              HasSubstr("2 replicas of 2 tensor-parallel shards"));
  for (const char* bad : {"4/1/gpipe/t1:0", "4/1/gpipe/x2:0", "4/1/gpipe/t:0", "4/1/gpipe/t2x:0"}) {
    EXPECT_THROW(ParseCandidate(bad), std::invalid_argument) << bad;
  }
  Candidate eight_ways = split;
  eight_ways.tensor_ways = 8;
  try {
    space.Check(eight_ways, 2);
    ADD_FAILURE() << "8 shards are not a shape of the space";
  } catch (const std::invalid_argument& error) {
    EXPECT_THAT(error.what(), HasSubstr("in 8 shards"));
    EXPECT_THAT(error.what(), HasSubstr("tensor-parallel 2/t2, 4/t2, 4/t4"));
  }
  // One replica of two shards on devices {0, 2}, copied onto {1, 3}: the split stays.
  const Candidate one{.replicas = 2, .options = {space.SpreadOption(2), 1}, .tensor_ways = 2};
  const std::optional<Candidate> two = space.ScaleOut(one, 4);
  ASSERT_TRUE(two.has_value());
  EXPECT_EQ(two->tensor_ways, 2);
  EXPECT_EQ(two->replicas, 4);

  EXPECT_THROW(ActionSpace(4, {1, 2, 4}, {1}, {}, {{3, 3}}), std::invalid_argument)
      << "3 copies are not a replica count";
  EXPECT_THROW(ActionSpace(4, {1, 2, 4}, {1}, {}, {{2, 4}}), std::invalid_argument)
      << "4 shards do not divide 2 copies";
  EXPECT_THROW(ActionSpace(4, {1, 2, 4}, {1}, {}, {{2, 1}}), std::invalid_argument)
      << "one shard is no split";
}

TEST(TensorParallelModelsTest, DefaultShapesStayWithinAHost) {
  using setup::DefaultTensorParallelShapes;
  EXPECT_EQ(DefaultTensorParallelShapes(4, 0, {1, 2, 4}),
            (std::vector<TensorParallelShape>{{4, 2}, {4, 4}}));
  EXPECT_EQ(DefaultTensorParallelShapes(16, 8, {1, 2, 4, 8, 16}),
            (std::vector<TensorParallelShape>{{16, 2}, {16, 4}, {16, 8}}));
  EXPECT_TRUE(DefaultTensorParallelShapes(16, 8, {1, 2, 4, 8}).empty())
      << "no shape over all devices without their replica count";
  EXPECT_TRUE(DefaultTensorParallelShapes(1, 0, {1}).empty());
}

// The encoder on 4 CPU workers with every split shape of 4 devices (one of them on two).
setup::SimulatedProblem SplitProblem(const sim::CostModel& costs) {
  return setup::MakeSimulatedProblem(
      Encoder, kBatch, kLearningRate, {.method = graph::GroupingMethod::kCoarsen, .max_groups = 12},
      CpuWorkers(4), costs, {1, 2, 4}, {1}, {}, {{2, 2}, {4, 2}, {4, 4}});
}

// The split step of one shape as the Megatron-style baseline builds it on 4 CPU workers.
baselines::MegatronStep Megatron(int copies, int ways) {
  std::vector<std::string> names = graph::DeviceNames(CpuWorkers(copies));
  return baselines::BuildMegatronStep(Encoder, kBatch, kLearningRate, names, {.tensor_ways = ways});
}

// Every group spread over the copies is Megatron's TP x DP: the same device for every forward op
// (copy c on device c D / R, as the spread option of R copies lays them out over D devices), the
// same simulated step time.
TEST(TensorParallelSearchTest, SpreadCandidateIsTheMegatronPlacement) {
  const sim::RooflineCostModel costs;
  const setup::SimulatedProblem problem = SplitProblem(costs);
  EXPECT_TRUE(problem.notes.empty()) << fmt::format("{}", fmt::join(problem.notes, "; "));
  const CandidateEvaluator& evaluator = *problem.evaluator;
  ASSERT_EQ(evaluator.space().tensor_parallel().size(), 3u);
  for (const TensorParallelShape& shape : evaluator.space().tensor_parallel()) {
    SCOPED_TRACE(fmt::format("{} copies, {} ways", shape.replicas, shape.tensor_ways));
    const Candidate spread{
        .replicas = shape.replicas,
        .options = std::vector<int>(static_cast<size_t>(problem.num_groups()),
                                    evaluator.space().SpreadOption(shape.replicas)),
        .tensor_ways = shape.tensor_ways};
    const baselines::MegatronStep step = Megatron(shape.replicas, shape.tensor_ways);
    const ReplicatedModel& model = evaluator.model(spread);
    ASSERT_EQ(model.graph.num_ops(), step.graph.num_ops());
    const graph::Placement placement = evaluator.PlacementOf(spread);
    const int stride = 4 / shape.replicas;
    graph::Placement megatron = step.placement;
    megatron.devices = graph::DeviceNames(CpuWorkers(4));
    for (int& device : megatron.device_of_op) {
      if (device >= 0) device *= stride;
    }
    for (graph::OpId id : model.forward_ops) {
      const std::string& name = model.graph.op(id).name;
      const std::optional<graph::OpId> same = step.graph.FindOp(name);
      ASSERT_TRUE(same.has_value()) << name;
      EXPECT_EQ(placement.device_of_op[static_cast<size_t>(id)],
                megatron.device_of_op[static_cast<size_t>(*same)])
          << name;
    }
    const graph::EvaluationResult judged = evaluator.Evaluate(std::span(&spread, 1)).front();
    ASSERT_TRUE(judged.valid) << judged.invalid_reason;
    EXPECT_DOUBLE_EQ(
        judged.step_seconds,
        sim::Simulator(step.graph, CpuWorkers(4), costs).Simulate(megatron).step_seconds);
  }
}

// Candidates of every split shape with random options (a group's shards on their own devices,
// on shared ones, or all on one) step as one device on the CPU workers: losses to 1e-5, every
// replica's shards put back together to 1e-6 of its parameters, after two steps.
TEST(TensorParallelSearchTest, RandomSplitCandidatesStepAsOneDevice) {
  const sim::RooflineCostModel costs;
  const setup::SimulatedProblem problem = SplitProblem(costs);
  const CandidateEvaluator& evaluator = *problem.evaluator;
  const ActionSpace& space = evaluator.space();
  std::mt19937 rng(29);
  int spread_groups = 0, narrower_groups = 0;
  for (const TensorParallelShape& shape : space.tensor_parallel()) {
    Candidate c{.replicas = shape.replicas, .options = {}, .tensor_ways = shape.tensor_ways};
    for (int g = 0; g < problem.num_groups(); ++g) {
      int option = 0;
      do {
        option = std::uniform_int_distribution<int>(0, space.num_options() - 1)(rng);
      } while (!space.Allowed(option, shape.replicas));
      const int width = space.options()[static_cast<size_t>(option)].width;
      spread_groups += width == shape.replicas;
      narrower_groups += width < shape.replicas;
      c.options.push_back(option);
    }
    SCOPED_TRACE(FormatCandidate(c));
    const graph::EvaluationResult judged = evaluator.Evaluate(std::span(&c, 1)).front();
    ASSERT_TRUE(judged.valid) << judged.invalid_reason;
    const baselines::MegatronStep step = Megatron(shape.replicas, shape.tensor_ways);
    test_support::ExpectSplitTrainsAsOneDevice(Encoder, kLearningRate, evaluator.model(c).graph,
                                               evaluator.PlacementOf(c), *step.split, kBatch,
                                               shape.replicas / shape.tensor_ways, 1, 41);
  }
  EXPECT_GT(spread_groups, 0);
  EXPECT_GT(narrower_groups, 0);
}

// The answer's placement files say the split (`tensor_ways`, beside the replicas), and read back
// against the split step they give the candidate's placement.
TEST(TensorParallelSearchTest, PlacementFilesCarryTheSplit) {
  const sim::RooflineCostModel costs;
  const setup::SimulatedProblem problem = SplitProblem(costs);
  const CandidateEvaluator& evaluator = *problem.evaluator;
  const Candidate c{.replicas = 4,
                    .options = std::vector<int>(static_cast<size_t>(problem.num_groups()),
                                                evaluator.space().SpreadOption(4)),
                    .tensor_ways = 2};
  const test_support::TempDir dir;
  const graph::Placement placement = evaluator.PlacementOf(c);
  WriteBestPlacement(dir.path(), evaluator.model(c).graph, placement, c, "encoder", 1e-3,
                     "simulated");
  const std::filesystem::path yaml = dir / "best_placement.yaml";
  EXPECT_EQ(graph::ReadPlacementReplicas(yaml), 2);
  EXPECT_EQ(graph::ReadPlacementTensorWays(yaml), 2);
  EXPECT_EQ(proto::ReadPlacementProtoReplicas(dir / "best_placement.pb"), 2);
  EXPECT_EQ(proto::ReadPlacementProtoTensorWays(dir / "best_placement.pb"), 2);
  const baselines::MegatronStep step = Megatron(4, 2);
  const std::vector<std::string> names = graph::DeviceNames(CpuWorkers(4));
  const graph::Placement read = graph::ReadPlacementYaml(yaml, step.graph, names);
  for (graph::OpId id : step.graph.OpsInPhase(graph::Phase::kForward)) {
    const std::optional<graph::OpId> same = evaluator.model(c).graph.FindOp(step.graph.op(id).name);
    ASSERT_TRUE(same.has_value());
    EXPECT_EQ(read.device_of_op[static_cast<size_t>(id)],
              placement.device_of_op[static_cast<size_t>(*same)]);
  }
  const std::filesystem::path bad =
      dir.Write("bad.yaml", "devices: [cpu:0]\ntensor_ways: 0\nplacement: {}\n");
  try {
    graph::ReadPlacementTensorWays(bad);
    ADD_FAILURE() << "0 shards";
  } catch (const graph::PlacementError& error) {
    EXPECT_THAT(error.what(), HasSubstr("bad.yaml"));
    EXPECT_THAT(error.what(), HasSubstr("tensor_ways: expected a count of shards >= 1, got '0'"));
  }
}

// A model no linear layer of which splits two ways (odd widths) gets no split shapes; the notes say
// why, and the rest of the space is searched.
graph::Graph OddWidths(int64_t rows, int64_t normalizer) {
  return graph::BuildParallelMlp({.batch_size = rows,
                                  .in_features = 12,
                                  .width = 15,
                                  .depth = 2,
                                  .branches = 2,
                                  .classes = 5,
                                  .loss_normalizer = normalizer,
                                  .training_step = false});
}

// Picking the pairs shards the forward once per linear layer: over the bound it is refused with
// the counts, not run for hours (an unrolled recurrent network).
TEST(TensorParallelSearchTest, APickOverItsBoundIsRefusedWithItsCounts) {
  const graph::Graph forward = Encoder(kBatch, 0);
  EXPECT_FALSE(graph::MegatronColumnStarts(forward, 2).empty());
  try {
    graph::MegatronColumnStarts(forward, 2, 100);
    ADD_FAILURE() << "a pick over its bound";
  } catch (const graph::GraphError& error) {
    EXPECT_THAT(error.what(), HasSubstr("linear layers of a "));
    EXPECT_THAT(error.what(), HasSubstr("> 100) would take too long"));
  }
}

TEST(TensorParallelSearchTest, AModelWithoutPairsIsLeftUnsplitAndSaysWhy) {
  const sim::RooflineCostModel costs;
  const setup::SimulatedProblem problem = setup::MakeSimulatedProblem(
      OddWidths, 8, kLearningRate, {}, CpuWorkers(2), costs, {1, 2}, {1}, {}, {{2, 2}});
  EXPECT_TRUE(problem.evaluator->space().tensor_parallel().empty());
  EXPECT_EQ(problem.evaluator->space().shapes().size(), 2u);
  ASSERT_EQ(problem.notes.size(), 1u);
  EXPECT_THAT(problem.notes.front(),
              HasSubstr("no tensor-parallel shapes of 2 ways: no linear layer pair"));
}

}  // namespace
}  // namespace placer::search
