// Replicated pipelines: R data-parallel replicas, each a pipeline of M micro-batches, compute what
// the plain step on one device computes; each replica's devices are its own stages under 1F1B;
// the all-reduce runs once per step; the placement file carries both counts.
#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>

#include "graph/micro_batches.h"
#include "graph/models.h"
#include "graph/pipeline.h"
#include "graph/placement.h"
#include "graph/training_step.h"
#include "runtime/executor.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulator.h"
#include "tests/forward_builders.h"
#include "tests/support.h"
#include "tests/temp_dir.h"
#include "tests/torch_support.h"

namespace placer::runtime {
namespace {

using graph::PipelineSchedule;
using placer::test_support::BranchingForward;
using placer::test_support::CpuWorkers;
using placer::test_support::LeNetForward;
using ::testing::HasSubstr;

constexpr double kLearningRate = 0.2;

graph::Graph Plain(const graph::ForwardBuilder& forward, int64_t batch) {
  return test_support::PlainStep(forward, batch, kLearningRate);
}

std::vector<std::string> ReplicaNames(int replicas) {
  std::vector<std::string> names;
  for (int r = 0; r < replicas; ++r) names.push_back(fmt::format("r{}", r));
  return names;
}

// The minibatch as the replicated pipelines read it: replica r's shard, cut into M micro-batches.
TensorMap Feeds(const TensorMap& minibatch, int replicas, int micro_batches) {
  TensorMap feeds;
  for (const auto& [name, value] : minibatch) {
    const int64_t rows = value.size(0) / (replicas * micro_batches);
    for (int r = 0; r < replicas; ++r) {
      for (int k = 0; k < micro_batches; ++k) {
        feeds.emplace(graph::ReplicaName(r, graph::MicroBatchName(k, name)),
                      value.narrow(0, (r * micro_batches + k) * rows, rows));
      }
    }
  }
  return feeds;
}

// Every replica starts from the same parameters.
TensorMap Replicate(const TensorMap& parameters, int replicas) {
  TensorMap out;
  for (int r = 0; r < replicas; ++r) {
    for (const auto& [name, value] : parameters) out.emplace(graph::ReplicaName(r, name), value);
  }
  return out;
}

// Two steps of the plain graph on one device against two steps of R = 2 replicated pipelines under
// random placements over `devices` workers, for M = 2 and 4 and both schedules: the same losses,
// and every replica's parameters those of the one device.
void CheckMatchesOneDevice(const graph::ForwardBuilder& forward, int64_t batch, int devices,
                           uint32_t seed) {
  const graph::Graph plain = Plain(forward, batch);
  const TensorMap initial = InitializeParameters(plain, seed);
  const TensorMap minibatch = SyntheticBatch(plain, seed + 1);
  Executor reference(plain, CpuWorkers(1), graph::Placement::AllOn(plain, {"cpu:0"}, 0), initial);
  std::vector<double> reference_losses;
  for (int step = 0; step < 2; ++step) {
    reference_losses.push_back(reference.RunStep(minibatch).loss);
  }
  const TensorMap expected = reference.Parameters();

  const int replicas = 2;
  std::mt19937 rng(seed);
  for (int micro_batches : {2, 4}) {
    graph::DataParallelGraph step = graph::BuildReplicatedPipelines(
        forward, batch, ReplicaNames(replicas), micro_batches, kLearningRate);
    const TensorMap feeds = Feeds(minibatch, replicas, micro_batches);
    for (PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
      for (int trial = 0; trial < 2; ++trial) {
        graph::Placement placement =
            graph::Placement::AllOn(step.graph, graph::DeviceNames(CpuWorkers(devices)), 0);
        placement.micro_batches = micro_batches;
        placement.schedule = schedule;
        std::uniform_int_distribution<int> pick(0, devices - 1);
        for (graph::OpId id : step.graph.OpsInPhase(graph::Phase::kForward)) {
          placement.device_of_op[static_cast<size_t>(id)] = pick(rng);
        }
        const std::string context = fmt::format("R = {}, M = {}, {}, placement {}", replicas,
                                                micro_batches, graph::ToString(schedule), trial);
        Executor executor(step.graph, CpuWorkers(devices), placement, Replicate(initial, replicas));
        for (int s = 0; s < 2; ++s) {
          EXPECT_NEAR(executor.RunStep(feeds).loss, reference_losses[static_cast<size_t>(s)], 1e-5)
              << context << ", step " << s;
        }
        const TensorMap trained = executor.Parameters();
        for (int r = 0; r < replicas; ++r) {
          TensorMap replica;
          for (const auto& [name, value] : expected) {
            replica[name] = trained.at(graph::ReplicaName(r, name));
          }
          test_support::ExpectSameParameters(replica, expected,
                                             fmt::format("{}, replica {}", context, r), 1e-6);
        }
        if (::testing::Test::HasFailure()) return;
      }
    }
  }
}

TEST(ReplicatedPipelineTest, LeNetUnderRandomPlacementsOverFourWorkersMatchesOneDevice) {
  CheckMatchesOneDevice(LeNetForward, 16, 4, 51);
}

TEST(ReplicatedPipelineTest, BranchingNetUnderRandomPlacementsOverThreeWorkersMatchesOneDevice) {
  CheckMatchesOneDevice(BranchingForward, 16, 3, 52);
}

TEST(ReplicatedPipelineTest, ABatchThatDoesNotSplitIntoEqualMicroBatchesIsAnErrorNamingBoth) {
  try {
    graph::BuildReplicatedPipelines(LeNetForward, 12, ReplicaNames(2), 4, kLearningRate);
    FAIL() << "expected a GraphError";
  } catch (const graph::GraphError& e) {
    EXPECT_THAT(e.what(), HasSubstr("replicas 2 x micro_batches 4"));
    EXPECT_THAT(e.what(), HasSubstr("batch of 12 rows"));
  }
}

// LeNet as two pipelines of two stages: replica r's convolutions on cpu:2r, its classifier on
// cpu:2r+1.
struct TwoByTwo {
  graph::DataParallelGraph step;
  TensorMap initial, feeds;
  graph::Placement Place(PipelineSchedule schedule) const {
    graph::Placement placement = step.placement;
    placement.devices = graph::DeviceNames(CpuWorkers(4));
    placement.micro_batches = step.placement.micro_batches;
    placement.schedule = schedule;
    // The classifier: fc1 and everything after it in the plain step's topological order.
    const graph::Graph plain = Plain(LeNetForward, 32);
    std::set<std::string> classifier;
    for (graph::OpId id : plain.TopologicalOrder()) {
      const graph::Op& op = plain.op(id);
      if (op.phase == graph::Phase::kForward && (!classifier.empty() || op.name == "fc1")) {
        classifier.insert(op.name);
      }
    }
    for (graph::OpId id : step.graph.OpsInPhase(graph::Phase::kForward)) {
      const graph::StepName name = graph::ParseStepName(step.graph.op(id).name);
      placement.device_of_op[static_cast<size_t>(id)] =
          2 * *name.replica + (classifier.count(name.base) ? 1 : 0);
    }
    return placement;
  }
};

TwoByTwo TwoPipelinesOfTwoStages(int micro_batches) {
  const graph::Graph plain = Plain(LeNetForward, 32);
  TwoByTwo p{.step = graph::BuildReplicatedPipelines(LeNetForward, 32, ReplicaNames(2),
                                                     micro_batches, kLearningRate)};
  p.initial = Replicate(InitializeParameters(plain, 3), 2);
  p.feeds = Feeds(SyntheticBatch(plain, 4), 2, micro_batches);
  return p;
}

bool IsBackward(const std::string& op) {
  return op.find(".backward") != std::string::npos || op.find(".grad_acc") != std::string::npos;
}

// 1F1B: each replica's first stage admits two micro-batches and its last stage one, whatever its
// place among all the step's devices (one count of stages over all four devices would let cpu:0
// admit four and cpu:2 two).
TEST(ReplicatedPipelineTest, OneFOneBCountsStagesWithinEachReplica) {
  const TwoByTwo p = TwoPipelinesOfTwoStages(4);
  const graph::Placement placement = p.Place(PipelineSchedule::kOneFOneB);
  const graph::PipelineOrder order(p.step.graph, placement,
                                   graph::ExpandPlacement(p.step.graph, placement));
  EXPECT_EQ(order.stages(), 2);
  EXPECT_EQ(order.stage_of_device(), (std::vector<int>{0, 1, 0, 1}));

  Executor executor(p.step.graph, CpuWorkers(4), placement, p.initial, {.record_trace = true});
  const StepResult step = executor.RunStep(p.feeds);
  for (const auto& [device, window] :
       {std::pair<std::string, int>{"cpu:0", 2}, {"cpu:1", 1}, {"cpu:2", 2}, {"cpu:3", 1}}) {
    std::vector<double> first_forward(4, 1e300), last_backward_end(4, 0);
    for (const graph::TraceEvent& e : step.trace) {
      const std::optional<int> k = graph::MicroBatchOfName(e.name);
      if (e.lane != device || !k) continue;
      if (IsBackward(e.name)) {
        last_backward_end[static_cast<size_t>(*k)] =
            std::max(last_backward_end[static_cast<size_t>(*k)], e.start_us + e.duration_us);
      } else {
        first_forward[static_cast<size_t>(*k)] =
            std::min(first_forward[static_cast<size_t>(*k)], e.start_us);
      }
    }
    for (size_t k = 0; k + static_cast<size_t>(window) < 4; ++k) {
      EXPECT_LE(last_backward_end[k], first_forward[k + static_cast<size_t>(window)])
          << device << ": micro-batch " << k + static_cast<size_t>(window)
          << " started before micro-batch " << k << " left";
    }
  }
}

// The replicas exchange one summed gradient per parameter, after their last micro-batch: the
// all-reduce is the data-parallel step's, op for op, whatever M; each replica's gradient is summed
// micro-batch by micro-batch as it arrives.
TEST(ReplicatedPipelineTest, TheAllReduceRunsOncePerStepAfterTheMicroBatches) {
  auto all_reduce_ops = [](const graph::Graph& g) {
    int count = 0;
    for (const graph::Op& op : g.ops()) count += op.attrs.Has(std::string(graph::kAllReduceBucket));
    return count;
  };
  const graph::DataParallelGraph plain =
      graph::BuildDataParallel(LeNetForward, 32, ReplicaNames(2), {1.0, 1.0}, kLearningRate);
  const TwoByTwo p = TwoPipelinesOfTwoStages(4);
  EXPECT_GT(all_reduce_ops(plain.graph), 0);
  EXPECT_EQ(all_reduce_ops(p.step.graph), all_reduce_ops(plain.graph));
  const std::vector<int> micro_batch = graph::MicroBatchOfOps(p.step.graph);
  int accumulations = 0;
  for (graph::OpId id = 0; id < p.step.graph.num_ops(); ++id) {
    const graph::Op& op = p.step.graph.op(id);
    if (op.attrs.Has(std::string(graph::kAllReduceBucket)) || op.name.ends_with(".grad_sum")) {
      EXPECT_EQ(micro_batch[static_cast<size_t>(id)], -1) << op.name;
    }
    if (op.name.ends_with(".grad_acc")) {
      ++accumulations;
      EXPECT_THAT(op.name, ::testing::MatchesRegex("r[01]/m[0-2]/.*")) << "the last micro-batch "
                                                                          "goes into the sum";
    }
  }
  EXPECT_GT(accumulations, 0);
}

// The simulator runs the same schedule: valid, and 1F1B stashes less on each replica's first stage
// than GPipe, which holds all eight micro-batches there.
TEST(ReplicatedPipelineTest, TheSimulatorPredictsTheScheduleAndItsMemory) {
  const TwoByTwo p = TwoPipelinesOfTwoStages(8);
  sim::RooflineCostModel costs;
  const sim::Simulator simulator(p.step.graph, CpuWorkers(4), costs);
  const sim::SimulationResult gpipe = simulator.Simulate(p.Place(PipelineSchedule::kGPipe));
  const sim::SimulationResult one_f_one_b =
      simulator.Simulate(p.Place(PipelineSchedule::kOneFOneB));
  ASSERT_TRUE(gpipe.valid) << gpipe.invalid_reason;
  ASSERT_TRUE(one_f_one_b.valid) << one_f_one_b.invalid_reason;
  for (size_t d : {size_t{0}, size_t{2}}) {
    EXPECT_LT(one_f_one_b.peak_memory_bytes[d], gpipe.peak_memory_bytes[d]) << "cpu:" << d;
  }
}

// The placement file carries the replica count, the micro-batch count and the schedule.
TEST(ReplicatedPipelineTest, ThePlacementFileRoundTrips) {
  const TwoByTwo p = TwoPipelinesOfTwoStages(4);
  const graph::Placement placement = p.Place(PipelineSchedule::kOneFOneB);
  test_support::TempDir folder;
  const auto file = folder.path() / "p.yaml";
  graph::WritePlacementYaml(file, p.step.graph, placement, 2);
  EXPECT_EQ(graph::ReadPlacementReplicas(file), 2);
  const graph::PipelineSettings settings = graph::ReadPlacementPipeline(file);
  EXPECT_EQ(settings.micro_batches, 4);
  EXPECT_EQ(settings.schedule, PipelineSchedule::kOneFOneB);
  EXPECT_EQ(graph::ReadPlacementYaml(file, p.step.graph, placement.devices), placement);
}

}  // namespace
}  // namespace placer::runtime
