// Replicated pipelines in the search: shapes of the action space, candidates the executor runs to
// one device's parameters, and refinement edits that reach them and keep them.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>

#include "graph/micro_batches.h"
#include "graph/models.h"
#include "graph/training_step.h"
#include "placer/action_space.h"
#include "placer/refiner.h"
#include "placer/setup/simulated_problem.h"
#include "runtime/executor.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulator.h"
#include "tests/forward_builders.h"
#include "tests/support.h"
#include "tests/torch_support.h"

namespace placer::search {
namespace {

using graph::PipelineSchedule;
using placer::test_support::CpuWorkers;
using placer::test_support::LeNetForward;

TEST(ActionSpaceTest, ReplicatedPipelinesAreShapesAfterTheOneReplicaPipelines) {
  const ActionSpace space(8, {1, 2, 4, 8}, {2, 4}, {{4, 2}, {2, 4}});
  ASSERT_EQ(space.shapes().size(), 4u + 2u * 2u + 2u * 2u);
  EXPECT_EQ(space.replicated_pipelines(), (std::vector<ReplicatedPipeline>{{2, 4}, {4, 2}}));
  EXPECT_EQ(space.shapes()[8], (StepShape{2, 4, PipelineSchedule::kGPipe}));
  EXPECT_EQ(space.shapes()[11], (StepShape{4, 2, PipelineSchedule::kOneFOneB}));
  EXPECT_TRUE(space.HasShape({2, 4, PipelineSchedule::kOneFOneB}));
  EXPECT_FALSE(space.HasShape({2, 2, PipelineSchedule::kOneFOneB}));

  // Two pipelines of four stages: stage s on {s, s + 4}.
  const Candidate two_pipelines{.replicas = 2,
                                .options = {8, 9, 10, 11},
                                .micro_batches = 4,
                                .schedule = PipelineSchedule::kOneFOneB};
  EXPECT_NO_THROW(space.Check(two_pipelines, 4));
  EXPECT_EQ(space.DeviceOf(9, 1, 2), 5);
  EXPECT_EQ(FormatCandidate(two_pipelines), "2/4/1f1b:8,9,10,11");
  EXPECT_EQ(ParseCandidate(FormatCandidate(two_pipelines)), two_pipelines);
  Candidate eight = two_pipelines;
  eight.replicas = 8;
  eight.options = {14, 14, 14, 14};
  EXPECT_THROW(space.Check(eight, 4), std::invalid_argument) << "no 8 x 4 shape";
  EXPECT_THAT(Summarise(space, two_pipelines, {"a", "b", "c", "d", "e", "f", "g", "h"}),
              ::testing::HasSubstr("2 replicas (hybrid), 4 micro-batches, 1f1b"));

  // A one-replica pipeline over devices 0-3, copied onto 4-7: the two pipelines above.
  const Candidate one{.replicas = 1,
                      .options = {0, 1, 2, 3},
                      .micro_batches = 4,
                      .schedule = PipelineSchedule::kOneFOneB};
  EXPECT_EQ(space.ScaleOut(one, 2), two_pipelines);
  EXPECT_FALSE(space.ScaleOut(one, 4).has_value()) << "no 4 x 4 shape";

  EXPECT_THROW(ActionSpace(8, {1, 2}, {1}, {{4, 2}}), std::invalid_argument)
      << "4 replicas are not searched";
  EXPECT_THROW(ActionSpace(8, {1, 2}, {1}, {{2, 1}}), std::invalid_argument);
  EXPECT_EQ(ActionSpace::DefaultPipelineReplicaCounts(8, {1, 2, 4, 8}), (std::vector<int>{2, 4}));
  EXPECT_EQ(ActionSpace::DefaultReplicatedPipelines({2, 4}, {1, 2, 4, 8}, 32, 1000),
            (std::vector<ReplicatedPipeline>{{2, 2}, {2, 4}, {2, 8}, {4, 2}, {4, 4}, {4, 8}}));
  EXPECT_EQ(ActionSpace::DefaultReplicatedPipelines({2, 4}, {1, 2, 4, 8}, 16, 10'000),
            (std::vector<ReplicatedPipeline>{{2, 2}, {2, 4}, {4, 2}}))
      << "R x M must divide the batch, and R x M x 10k ops stay within 120k";
  // On 32 devices the one-replica pipelines reach M = 32; a replica's pipeline over D / R devices
  // keeps to M <= max(8, D / R).
  EXPECT_EQ(
      ActionSpace::DefaultReplicatedPipelines({2, 4}, {1, 2, 4, 8, 16, 32}, 256, 100, 32),
      (std::vector<ReplicatedPipeline>{{2, 2}, {2, 4}, {2, 8}, {2, 16}, {4, 2}, {4, 4}, {4, 8}}));
}

constexpr double kLearningRate = 0.2;

setup::SimulatedProblem FourWorkers(const sim::CostModel& costs) {
  return setup::MakeSimulatedProblem(LeNetForward, 16, kLearningRate,
                                     {graph::GroupingMethod::kOpPerGroup, 256}, CpuWorkers(4),
                                     costs, {1, 2, 4}, {1, 2}, {{2, 2}, {2, 4}});
}

// Random replicated-pipeline candidates (two replicas, M = 2 and 4, both schedules, any allowed
// option per group) run by the executor: every replica ends with one device's two-step
// parameters; the simulator judges each as it judges graph::BuildReplicatedPipelines' step.
TEST(CandidateEvaluatorTest, ReplicatedPipelineCandidatesGiveTheSingleDeviceParameters) {
  sim::RooflineCostModel costs;
  const setup::SimulatedProblem problem = FourWorkers(costs);
  ASSERT_TRUE(problem.notes.empty()) << problem.notes.front();
  const CandidateEvaluator& evaluator = *problem.evaluator;
  const ActionSpace& space = evaluator.space();
  ASSERT_EQ(space.replicated_pipelines(), (std::vector<ReplicatedPipeline>{{2, 2}, {2, 4}}));

  const graph::Graph& single = problem.base();
  const runtime::TensorMap initial = runtime::InitializeParameters(single, 61);
  const runtime::TensorMap minibatch = runtime::SyntheticBatch(single, 62);
  runtime::Executor reference_run(single, CpuWorkers(1),
                                  graph::Placement::AllOn(single, {"cpu:0"}, 0), initial);
  for (int step = 0; step < 2; ++step) reference_run.RunStep(minibatch);
  const runtime::TensorMap reference = reference_run.Parameters();

  std::mt19937 rng(13);
  for (int trial = 0; trial < 4; ++trial) {
    Candidate c{
        .replicas = 2,
        .options = {},
        .micro_batches = trial < 2 ? 2 : 4,
        .schedule = trial % 2 == 0 ? PipelineSchedule::kGPipe : PipelineSchedule::kOneFOneB};
    for (int g = 0; g < problem.num_groups(); ++g) {
      int option = 0;
      do {
        option = std::uniform_int_distribution<int>(0, space.num_options() - 1)(rng);
      } while (!space.Allowed(option, 2));
      c.options.push_back(option);
    }
    SCOPED_TRACE(FormatCandidate(c));
    const ReplicatedModel& model = evaluator.model(c);
    ASSERT_EQ(model.replicas, 2);
    ASSERT_EQ(model.micro_batches, c.micro_batches);
    const graph::Placement placement = evaluator.PlacementOf(c);
    const graph::EvaluationResult judged = evaluator.Evaluate(std::span(&c, 1)).front();
    ASSERT_TRUE(judged.valid) << judged.invalid_reason;
    const graph::DataParallelGraph step = graph::BuildReplicatedPipelines(
        LeNetForward, 16, {"r0", "r1"}, c.micro_batches, kLearningRate);
    EXPECT_DOUBLE_EQ(
        judged.step_seconds,
        sim::Simulator(step.graph, CpuWorkers(4), costs).Simulate(placement).step_seconds);

    runtime::TensorMap parameters, feeds;
    for (int r = 0; r < 2; ++r) {
      for (const auto& [name, value] : initial) parameters[graph::ReplicaName(r, name)] = value;
      for (const auto& [name, value] : minibatch) {
        const int64_t rows = value.size(0) / (2 * c.micro_batches);
        for (int k = 0; k < c.micro_batches; ++k) {
          feeds[graph::ReplicaName(r, graph::MicroBatchName(k, name))] =
              value.narrow(0, (r * c.micro_batches + k) * rows, rows);
        }
      }
    }
    runtime::Executor executor(model.graph, CpuWorkers(4), placement, parameters);
    for (int step_index = 0; step_index < 2; ++step_index) executor.RunStep(feeds);
    const runtime::TensorMap trained = executor.Parameters();
    for (int r = 0; r < 2; ++r) {
      runtime::TensorMap replica;
      for (const auto& [name, value] : reference) {
        replica[name] = trained.at(graph::ReplicaName(r, name));
      }
      test_support::ExpectSameParameters(
          replica, reference, fmt::format("{}, replica {}", FormatCandidate(c), r), 1e-6);
    }
  }
}

// Refinement's edits reach the replicated pipelines from plain data parallelism, change their
// micro-batch count and schedule, and keep the micro-batches when the replica count changes to
// another that has them.
TEST(RefinerTest, EditsReachAndKeepReplicatedPipelines) {
  sim::RooflineCostModel costs;
  const setup::SimulatedProblem problem = FourWorkers(costs);
  const ActionSpace& space = problem.evaluator->space();
  Refiner refiner(space, problem.features, {}, 17);
  const Candidate data_parallel{
      2, std::vector<int>(static_cast<size_t>(problem.num_groups()), space.SpreadOption(2))};
  std::set<std::string> shapes_from_data_parallel;
  for (int k = 0; k < 400; ++k) {
    const Candidate edited = refiner.Edit(data_parallel);
    if (edited.replicas == 2 && edited.micro_batches > 1) {
      shapes_from_data_parallel.insert(
          fmt::format("{}/{}", edited.micro_batches, graph::ToString(edited.schedule)));
    }
  }
  EXPECT_EQ(shapes_from_data_parallel,
            (std::set<std::string>{"2/gpipe", "2/1f1b", "4/gpipe", "4/1f1b"}));

  const Candidate two_pipelines{.replicas = 2,
                                .options = data_parallel.options,
                                .micro_batches = 4,
                                .schedule = PipelineSchedule::kOneFOneB};
  int to_one_replica = 0, kept = 0;
  for (int k = 0; k < 400; ++k) {
    const Candidate edited = refiner.Edit(two_pipelines);
    ASSERT_NO_THROW(space.Check(edited, problem.num_groups())) << FormatCandidate(edited);
    if (edited.replicas == 1) {
      ++to_one_replica;
      // One replica has no 4 micro-batches here (only 2): the edit gives up the pipeline.
      EXPECT_EQ(edited.micro_batches, 1) << FormatCandidate(edited);
    }
    if (edited.replicas == 2 && edited.options != two_pipelines.options) {
      kept += edited.micro_batches == 4 && edited.schedule == PipelineSchedule::kOneFOneB;
    }
  }
  EXPECT_GT(to_one_replica, 0);
  EXPECT_GT(kept, 0) << "group moves keep the step's shape";

  // Two replicas of 2 micro-batches to one: one replica has 2 micro-batches, so they stay.
  Candidate two_by_two = two_pipelines;
  two_by_two.micro_batches = 2;
  two_by_two.schedule = PipelineSchedule::kGPipe;
  int one_replica_pipelines = 0;
  for (int k = 0; k < 400; ++k) {
    const Candidate edited = refiner.Edit(two_by_two);
    if (edited.replicas != 1) continue;
    // Only ChangeReplicas leaves two replicas (ChangePipeline stays among their shapes).
    EXPECT_EQ(edited.micro_batches, 2) << FormatCandidate(edited);
    EXPECT_EQ(edited.schedule, PipelineSchedule::kGPipe) << FormatCandidate(edited);
    ++one_replica_pipelines;
  }
  EXPECT_GT(one_replica_pipelines, 0);
}

}  // namespace
}  // namespace placer::search
