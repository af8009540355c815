// setup::StepCache: the one builder of the training step at a step shape, for every command.
#include "placer/setup/step_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/grouping.h"
#include "graph/micro_batches.h"
#include "placer/config/config.h"
#include "placer/setup/tensor_parallel_models.h"
#include "tests/forward_builders.h"

namespace placer::setup {
namespace {

using test_support::LeNetForward;
using test_support::SmallEncoderForward;
using ::testing::HasSubstr;

constexpr int64_t kBatch = 8;
constexpr double kLearningRate = 0.1;

StepCache LeNetSteps() { return StepCache(StepRecipe{LeNetForward, kBatch, kLearningRate}); }

std::vector<std::string> OpNames(const graph::Graph& graph) {
  std::vector<std::string> names;
  for (const graph::Op& op : graph.ops()) names.push_back(op.name);
  return names;
}

// Each shape's step is the graph builders' own, built once and kept: the same object every time.
TEST(SetupStepCacheTest, BuildsEachShapeOnceAsTheGraphBuildersDo) {
  StepCache steps = LeNetSteps();
  const search::ReplicatedModel& two = steps.Get({.replicas = 2});
  EXPECT_EQ(&two, &steps.Get({.replicas = 2}));
  EXPECT_EQ(OpNames(two.graph), OpNames(graph::BuildDataParallel(LeNetForward, kBatch, {"r0", "r1"},
                                                                 {1.0, 1.0}, kLearningRate)
                                            .graph));
  EXPECT_EQ(two.shard_sizes, (std::vector<int64_t>{4, 4}));
  const search::ReplicatedModel& micro = steps.Get({.micro_batches = 4});
  EXPECT_EQ(micro.micro_batches, 4);
  EXPECT_EQ(OpNames(micro.graph),
            OpNames(graph::BuildMicroBatched(LeNetForward, kBatch, 4, kLearningRate).graph));
  const search::ReplicatedModel& pipelines = steps.Get({.replicas = 2, .micro_batches = 2});
  EXPECT_EQ(
      OpNames(pipelines.graph),
      OpNames(graph::BuildReplicatedPipelines(LeNetForward, kBatch, {"r0", "r1"}, 2, kLearningRate)
                  .graph));
  EXPECT_FALSE(steps.base().FindOp("r0/conv1").has_value());
}

// Data parallelism over one device is one replica named as one ("r0/<op>"), as `evaluate
// --data-parallel` and `profile --data-parallel` run it; its placement puts replica r on device r.
TEST(SetupStepCacheTest, DataParallelismOverOneDeviceNamesItsReplica) {
  StepCache steps = LeNetSteps();
  const search::ReplicatedModel& one = steps.DataParallel(1);
  EXPECT_TRUE(one.graph.FindOp("r0/conv1").has_value());
  EXPECT_NE(&one, &steps.Get({}));
  EXPECT_EQ(&steps.DataParallel(2), &steps.Get({.replicas = 2}));
  const graph::DataParallelGraph built =
      graph::BuildDataParallel(LeNetForward, kBatch, {"cpu:0", "cpu:1"}, {1.0, 1.0}, kLearningRate);
  EXPECT_EQ(ReplicaPlacement(steps.DataParallel(2), {"cpu:0", "cpu:1"}), built.placement);
}

TEST(SetupStepCacheTest, AShapeThatCannotBeBuiltThrowsWhy) {
  StepCache steps = LeNetSteps();
  EXPECT_THROW(steps.Get({.micro_batches = 3}), graph::GraphError);
  EXPECT_THROW(steps.Get({.replicas = 9}), graph::GraphError);
  EXPECT_THAT([&] { steps.Get({.micro_batches = 2, .tensor_ways = 2}); },
              ::testing::ThrowsMessage<graph::GraphError>(HasSubstr("not a step the search")));
  // Layers of odd widths: no linear layer pair splits two ways.
  auto odd_widths = [](int64_t rows, int64_t normalizer) {
    return graph::BuildParallelMlp({.batch_size = rows,
                                    .in_features = 12,
                                    .width = 15,
                                    .depth = 2,
                                    .branches = 2,
                                    .classes = 5,
                                    .loss_normalizer = normalizer,
                                    .training_step = false});
  };
  StepCache odd(StepRecipe{odd_widths, kBatch, kLearningRate});
  EXPECT_THAT([&] { odd.Get({.tensor_ways = 2}); },
              ::testing::ThrowsMessage<graph::GraphError>(
                  HasSubstr("no linear layer pair of the model splits 2 ways")));
}

// A split step is BuildTensorParallelStep's, with the starts picked once per T.
TEST(SetupStepCacheTest, SplitStepsAreMegatronsWithTheStartsPickedOnce) {
  auto forward = [](int64_t rows, int64_t normalizer) {
    return SmallEncoderForward(rows, normalizer);
  };
  StepCache steps(StepRecipe{forward, kBatch, kLearningRate});
  const std::vector<std::string>& starts = steps.ColumnStarts(2);
  ASSERT_FALSE(starts.empty());
  EXPECT_EQ(&starts, &steps.ColumnStarts(2));
  const search::ReplicatedModel& split = steps.Get({.replicas = 2, .tensor_ways = 2});
  EXPECT_EQ(split.replicas, 4);
  EXPECT_EQ(split.tensor_ways, 2);
  EXPECT_EQ(OpNames(split.graph),
            OpNames(BuildTensorParallelStep(forward, kBatch, kLearningRate, {4, 2}).graph));
}

// The search's steps carry the groups of the one-replica step; the grouping comes first.
TEST(SetupStepCacheTest, GroupsAreMappedFromUseGroupingOn) {
  StepCache steps = LeNetSteps();
  const graph::Graph& base = steps.base();
  const graph::Grouping grouping =
      graph::MakeGrouping(base, {graph::GroupingMethod::kOpPerGroup, 256});
  steps.UseGrouping(grouping);
  EXPECT_EQ(&base, &steps.base()) << "the one-replica step stays where it was";
  EXPECT_EQ(steps.Get({}).num_groups, grouping.num_groups());
  EXPECT_EQ(steps.Get({.replicas = 2}).num_groups, grouping.num_groups());
  std::vector<std::string> notes;
  const std::vector<const search::ReplicatedModel*> models =
      SearchSteps(steps, {.replica_counts = {4, 2, 2, 1}, .micro_batch_counts = {3, 2}}, &notes);
  ASSERT_EQ(models.size(), 4u);
  EXPECT_EQ(models[1], &steps.Get({.replicas = 2}));
  EXPECT_EQ(models[2]->replicas, 4);
  EXPECT_EQ(models[3]->micro_batches, 2);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_THAT(notes.front(), HasSubstr("3 micro-batches left out"));

  StepCache late = LeNetSteps();
  late.Get({.replicas = 2});
  EXPECT_THROW(late.UseGrouping(grouping), std::logic_error);
}

// The worker's cache may be asked from several threads: one step per shape whatever the race.
TEST(SetupStepCacheTest, ConcurrentCallersGetOneStep) {
  StepCache steps = LeNetSteps();
  std::vector<const search::ReplicatedModel*> got(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = &steps.Get({.replicas = 2, .micro_batches = 2}); });
  }
  for (std::thread& t : threads) t.join();
  for (const search::ReplicatedModel* step : got) EXPECT_EQ(step, got.front());
}

// A config's steps: its model section's builder and batch.
TEST(SetupStepCacheTest, AConfigsStepsAreItsModels) {
  const config::Config c =
      config::ParseConfig("model:\n  builtin: lenet\n  batch_size: 6\n  replicas: 3\n", "c.yaml");
  StepCache steps(c);
  EXPECT_EQ(steps.batch(), 6);
  EXPECT_EQ(steps.Get({.replicas = 3}).shard_sizes, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(steps.base().num_ops(), LeNetSteps().base().num_ops());
}

}  // namespace
}  // namespace placer::setup
