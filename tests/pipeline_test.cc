// Pipelined steps: a micro-batched step under GPipe or 1F1B computes what the plain step on one
// device computes, holds to its schedule, and stashes the memory its schedule implies; the
// simulator runs the same schedule.
#include "graph/pipeline.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>

#include "graph/micro_batches.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "graph/step_plan.h"
#include "graph/training_step.h"
#include "proto/writers.h"
#include "runtime/executor.h"
#include "runtime/micro_batches.h"
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

graph::Placement RandomPlacement(const graph::Graph& g, int devices, std::mt19937& rng) {
  graph::Placement placement =
      graph::Placement::AllOn(g, graph::DeviceNames(CpuWorkers(devices)), 0);
  std::uniform_int_distribution<int> pick(0, devices - 1);
  for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
    placement.device_of_op[static_cast<size_t>(id)] = pick(rng);
  }
  return placement;
}

// Two steps of the plain graph on one device against two steps of the micro-batched graph under
// random placements over `devices` workers, for every M and schedule: same losses and parameters.
void CheckMatchesOneDevice(const graph::ForwardBuilder& forward, int64_t batch, int devices,
                           uint32_t seed) {
  const graph::Graph plain = Plain(forward, batch);
  const TensorMap initial = InitializeParameters(plain, seed);
  const TensorMap minibatch = SyntheticBatch(plain, seed + 1);
  Executor reference(plain, CpuWorkers(1), graph::Placement::AllOn(plain, {"cpu:0"}, 0), initial);
  std::vector<double> reference_losses;
  for (int step = 0; step < 2; ++step)
    reference_losses.push_back(reference.RunStep(minibatch).loss);
  const TensorMap expected = reference.Parameters();

  std::mt19937 rng(seed);
  for (int micro_batches : {1, 2, 4, 8}) {
    const graph::MicroBatchedGraph mb =
        graph::BuildMicroBatched(forward, batch, micro_batches, kLearningRate);
    const TensorMap feeds = SplitIntoMicroBatches(minibatch, micro_batches);
    for (PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
      for (int trial = 0; trial < 3; ++trial) {
        const graph::Placement base = RandomPlacement(plain, devices, rng);
        const graph::Placement placement = graph::PlaceMicroBatches(mb, plain, base, schedule);
        const std::string context = fmt::format("M = {}, {}, placement {}", micro_batches,
                                                graph::ToString(schedule), trial);
        Executor executor(mb.graph, CpuWorkers(devices), placement, initial);
        for (int step = 0; step < 2; ++step) {
          EXPECT_NEAR(executor.RunStep(feeds).loss, reference_losses[static_cast<size_t>(step)],
                      1e-5)
              << context << ", step " << step;
        }
        test_support::ExpectSameParameters(executor.Parameters(), expected, context, 1e-6);
        if (::testing::Test::HasFailure()) {
          ADD_FAILURE() << graph::PlacementToYaml(plain, base);
          return;
        }
      }
    }
  }
}

TEST(MicroBatchTest, LeNetUnderRandomPlacementsOverTwoWorkersMatchesOneDevice) {
  CheckMatchesOneDevice(LeNetForward, 16, 2, 31);
}

TEST(MicroBatchTest, BranchingNetUnderRandomPlacementsOverThreeWorkersMatchesOneDevice) {
  CheckMatchesOneDevice(BranchingForward, 16, 3, 32);
}

TEST(MicroBatchTest, AMicroBatchCountThatDoesNotDivideTheBatchIsAnErrorNamingTheField) {
  try {
    graph::BuildMicroBatched(LeNetForward, 10, 4, kLearningRate);
    FAIL() << "expected a GraphError";
  } catch (const graph::GraphError& e) {
    EXPECT_THAT(e.what(), HasSubstr("micro_batches: 4 does not divide the batch of 10 rows"));
  }
  EXPECT_THROW(graph::BuildMicroBatched(LeNetForward, 10, 0, kLearningRate), graph::GraphError);
}

// LeNet in two stages: the convolutions on cpu:0, the classifier on cpu:1.
graph::Placement TwoStages(const graph::Graph& plain) {
  graph::Placement placement = graph::Placement::AllOn(plain, {"cpu:0", "cpu:1"}, 0);
  bool second = false;
  for (graph::OpId id : plain.TopologicalOrder()) {
    if (plain.op(id).phase != graph::Phase::kForward) continue;
    second = second || plain.op(id).name == "fc1";
    placement.device_of_op[static_cast<size_t>(id)] = second ? 1 : 0;
  }
  return placement;
}

struct Pipelined {
  graph::Graph plain;
  graph::MicroBatchedGraph mb;
  TensorMap initial, feeds;
  graph::Placement Place(PipelineSchedule schedule) const {
    return graph::PlaceMicroBatches(mb, plain, TwoStages(plain), schedule);
  }
};

Pipelined TwoStageLeNet(int micro_batches) {
  Pipelined p{.plain = Plain(LeNetForward, 32),
              .mb = graph::BuildMicroBatched(LeNetForward, 32, micro_batches, kLearningRate)};
  p.initial = InitializeParameters(p.plain, 3);
  p.feeds = SplitIntoMicroBatches(SyntheticBatch(p.plain, 4), micro_batches);
  return p;
}

// Backward-phase ops: the backward ops, and the sums that accumulate each micro-batch's gradients.
bool IsBackward(const std::string& op) {
  return op.find(".backward") != std::string::npos || op.find(".grad_acc") != std::string::npos;
}
int MicroBatchOf(const std::string& op) { return std::stoi(op.substr(1, op.find('/') - 1)); }

TEST(PipelineScheduleTest, GPipeRunsEveryForwardOfADeviceBeforeItsFirstBackward) {
  Pipelined p = TwoStageLeNet(4);
  Executor executor(p.mb.graph, CpuWorkers(2), p.Place(PipelineSchedule::kGPipe), p.initial,
                    {.record_trace = true});
  StepResult step = executor.RunStep(p.feeds);
  for (const std::string device : {"cpu:0", "cpu:1"}) {
    double last_forward_end = 0, first_backward_start = 1e300;
    for (const graph::TraceEvent& e : step.trace) {
      if (e.lane != device || e.name.find(".update") != std::string::npos) continue;
      if (IsBackward(e.name)) {
        first_backward_start = std::min(first_backward_start, e.start_us);
      } else {
        last_forward_end = std::max(last_forward_end, e.start_us + e.duration_us);
      }
    }
    EXPECT_LE(last_forward_end, first_backward_start) << device;
  }
}

// 1F1B on two stages: stage 0 admits two micro-batches, so micro-batch k + 2's first forward there
// starts only after micro-batch k's last backward there has ended; stage 1 admits one.
TEST(PipelineScheduleTest, OneFOneBAdmitsStagesMinusStageMicroBatchesAtOnce) {
  Pipelined p = TwoStageLeNet(4);
  Executor executor(p.mb.graph, CpuWorkers(2), p.Place(PipelineSchedule::kOneFOneB), p.initial,
                    {.record_trace = true});
  StepResult step = executor.RunStep(p.feeds);
  for (const auto& [device, window] : {std::pair<std::string, int>{"cpu:0", 2}, {"cpu:1", 1}}) {
    std::vector<double> first_forward(4, 1e300), last_backward_end(4, 0);
    for (const graph::TraceEvent& e : step.trace) {
      if (e.lane != device || e.name[0] != 'm') continue;
      const auto k = static_cast<size_t>(MicroBatchOf(e.name));
      if (IsBackward(e.name)) {
        last_backward_end[k] = std::max(last_backward_end[k], e.start_us + e.duration_us);
      } else {
        first_forward[k] = std::min(first_forward[k], e.start_us);
      }
    }
    for (size_t k = 0; k + static_cast<size_t>(window) < 4; ++k) {
      EXPECT_LE(last_backward_end[k], first_forward[k + static_cast<size_t>(window)])
          << device << ": micro-batch " << k + static_cast<size_t>(window)
          << " started before micro-batch " << k << " left";
    }
  }
}

// The simulator holds to the same schedule: it sets held-back ops aside until the device's
// schedule state moves on (graph::PipelineOrder::Hold), and must neither run one early nor lose
// one. GPipe: no backward before a device's last forward; 1F1B: stage 0 admits two micro-batches,
// and as soon as it may, stage 1 one; every op runs.
TEST(PipelineScheduleTest, TheSimulatorHoldsToBothSchedulesAsTheExecutorDoes) {
  const Pipelined p = TwoStageLeNet(4);
  sim::RooflineCostModel costs;
  const sim::Simulator simulator(p.mb.graph, CpuWorkers(2), costs);
  for (const PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
    const sim::SimulationResult r = simulator.Simulate(p.Place(schedule), /*record_trace=*/true);
    ASSERT_TRUE(r.valid) << graph::ToString(schedule);
    int ops = 0;
    for (const auto& [device, window] : {std::pair<std::string, int>{"cpu:0", 2}, {"cpu:1", 1}}) {
      std::vector<double> first_forward(4, 1e300), first_backward(4, 1e300),
          last_backward_end(4, 0);
      double last_forward_end = 0, first_backward_start = 1e300;
      for (const graph::TraceEvent& e : r.trace) {
        if (e.lane != device) continue;
        ++ops;
        if (e.name[0] != 'm' || e.name.find(".update") != std::string::npos) continue;
        const auto k = static_cast<size_t>(MicroBatchOf(e.name));
        if (IsBackward(e.name)) {
          first_backward_start = std::min(first_backward_start, e.start_us);
          first_backward[k] = std::min(first_backward[k], e.start_us);
          last_backward_end[k] = std::max(last_backward_end[k], e.start_us + e.duration_us);
        } else {
          last_forward_end = std::max(last_forward_end, e.start_us + e.duration_us);
          first_forward[k] = std::min(first_forward[k], e.start_us);
        }
      }
      // Trace times are microseconds from start + duration: an op that starts as another ends
      // may differ from its end in the last bits.
      constexpr double kRounding = 1e-6;
      if (schedule == PipelineSchedule::kGPipe) {
        EXPECT_LE(last_forward_end, first_backward_start + kRounding) << device;
        continue;
      }
      for (size_t k = 0; k + static_cast<size_t>(window) < 4; ++k) {
        EXPECT_LE(last_backward_end[k], first_forward[k + static_cast<size_t>(window)] + kRounding)
            << device << ": micro-batch " << k + static_cast<size_t>(window)
            << " started before micro-batch " << k << " left";
      }
      // ... and admits as soon as it may: stage 0 starts micro-batch 1 while micro-batch 0 is in
      // flight, not once it has left.
      if (window == 2) {
        EXPECT_LT(first_forward[1], first_backward[0]) << device;
      }
    }
    EXPECT_EQ(ops, p.mb.graph.num_ops()) << graph::ToString(schedule);
  }
}

// What lets the simulator set held-back ops aside: Started and Finished return true whenever an op
// the schedule held (Hold::kState) may start afterwards. Checked on both devices of a two-stage
// pipeline, event by event, in the order the simulator runs their ops.
TEST(PipelineScheduleTest, StartedAndFinishedSayWheneverAHeldOpMayGo) {
  using Hold = graph::PipelineOrder::Hold;
  const Pipelined p = TwoStageLeNet(4);
  const graph::Graph& g = p.mb.graph;
  sim::RooflineCostModel costs;
  const sim::Simulator simulator(g, CpuWorkers(2), costs);
  for (const PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
    const graph::Placement placement = p.Place(schedule);
    const graph::PipelineOrder order(g, placement, graph::ExpandPlacement(g, placement));
    std::vector<graph::TraceEvent> trace = simulator.Simulate(placement, true).trace;
    std::stable_sort(trace.begin(), trace.end(),
                     [](const auto& a, const auto& b) { return a.start_us < b.start_us; });
    for (int device = 0; device < 2; ++device) {
      std::vector<graph::OpId> ran;
      for (const graph::TraceEvent& e : trace) {
        if (e.lane == fmt::format("cpu:{}", device)) ran.push_back(g.FindOp(e.name).value());
      }
      graph::PipelineOrder::DeviceState state = order.Start(device);
      auto held = [&] {
        std::vector<bool> by_op;
        for (const graph::OpId op : ran) {
          by_op.push_back(order.HoldOf(state, device, op) == Hold::kState);
        }
        return by_op;
      };
      int releases = 0;
      auto check = [&](bool released, const std::vector<bool>& before, const std::string& event) {
        const std::vector<bool> after = held();
        for (size_t i = 0; i < ran.size(); ++i) {
          if (before[i] && !after[i]) {
            ASSERT_TRUE(released) << graph::ToString(schedule) << ", cpu:" << device << ": "
                                  << event << " let '" << g.op(ran[i]).name
                                  << "' go without saying so";
          }
        }
        releases += released;
      };
      for (const graph::OpId op : ran) {
        std::vector<bool> before = held();
        check(order.Started(state, op), before, "starting '" + g.op(op).name + "'");
        before = held();
        check(order.Finished(state, op), before, "finishing '" + g.op(op).name + "'");
      }
      EXPECT_GT(releases, 0) << graph::ToString(schedule) << ", cpu:" << device;
    }
  }
}

// The simulator reuses one workspace per thread across placements: a placement judged after
// others (a pipelined one, one that runs out of memory midway) gets the verdict it gets on a
// fresh thread, to the bit.
TEST(PipelineScheduleTest, ASimulationAfterOthersOnTheThreadEqualsOneOnAFreshThread) {
  const Pipelined p = TwoStageLeNet(4);
  sim::RooflineCostModel costs;
  const graph::Placement gpipe = p.Place(PipelineSchedule::kGPipe);
  const graph::Placement one_f_one_b = p.Place(PipelineSchedule::kOneFOneB);
  const sim::Simulator simulator(p.mb.graph, CpuWorkers(2), costs);
  const int64_t peak = simulator.Simulate(gpipe).peak_memory_bytes[0];
  const sim::Simulator limited(p.mb.graph, CpuWorkers(2, peak / 2), costs);

  sim::SimulationResult fresh;
  std::thread([&] { fresh = simulator.Simulate(one_f_one_b, true); }).join();
  ASSERT_TRUE(fresh.valid);
  ASSERT_FALSE(limited.Simulate(gpipe).valid);  // stops midway
  simulator.Simulate(gpipe);
  const sim::SimulationResult again = simulator.Simulate(one_f_one_b, true);
  ASSERT_TRUE(again.valid);
  EXPECT_EQ(again.step_seconds, fresh.step_seconds);
  EXPECT_EQ(again.busy_seconds, fresh.busy_seconds);
  EXPECT_EQ(again.peak_memory_bytes, fresh.peak_memory_bytes);
  ASSERT_EQ(again.trace.size(), fresh.trace.size());
  for (size_t i = 0; i < again.trace.size(); ++i) {
    EXPECT_EQ(again.trace[i].name, fresh.trace[i].name) << i;
    EXPECT_EQ(again.trace[i].start_us, fresh.trace[i].start_us) << i;
  }
  ASSERT_EQ(again.transfers.size(), fresh.transfers.size());
  for (size_t i = 0; i < again.transfers.size(); ++i) {
    EXPECT_EQ(again.transfers[i].count, fresh.transfers[i].count) << i;
    EXPECT_EQ(again.transfers[i].seconds, fresh.transfers[i].seconds) << i;
  }
}

// The pipeline order from the graph's half found once (StepGraph::pipeline_graph) is the order
// built from the graph for each placement.
TEST(PipelineScheduleTest, TheSharedGraphHalfGivesTheSameOrder) {
  const Pipelined p = TwoStageLeNet(4);
  const graph::StepGraph step(p.mb.graph);
  for (const PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
    const graph::Placement placement = p.Place(schedule);
    const std::vector<int> devices = graph::ExpandPlacement(p.mb.graph, placement);
    const graph::PipelineOrder own(p.mb.graph, placement, devices);
    const graph::PipelineOrder shared(step.pipeline_graph(), placement, devices);
    EXPECT_EQ(shared.priority(), own.priority());
    EXPECT_EQ(shared.stages(), own.stages());
    EXPECT_EQ(shared.stage_of_device(), own.stage_of_device());
    for (size_t i = 0; i < own.ops_by_priority().size(); ++i) {
      ASSERT_EQ(own.priority()[static_cast<size_t>(own.ops_by_priority()[i])], static_cast<int>(i));
    }
  }
  EXPECT_EQ(&step.pipeline_graph(), &step.pipeline_graph());  // built once
  const graph::StepGraph plain(p.plain);
  EXPECT_THROW(plain.pipeline_graph(), graph::GraphError);
}

int64_t PeakOn(const StepResult& step, const std::string& device) {
  for (const graph::DeviceStats& d : step.devices) {
    if (d.device == device) return d.peak_memory_bytes;
  }
  return -1;
}

// With 8 micro-batches, GPipe stashes all 8 micro-batches' activations on stage 0, 1F1B two: a
// capacity between the two fits 1F1B only, in the executor and in the simulator alike.
TEST(PipelineMemoryTest, OneFOneBFitsWhereGPipeRunsOutOfMemory) {
  Pipelined p = TwoStageLeNet(8);
  const graph::Placement gpipe = p.Place(PipelineSchedule::kGPipe);
  const graph::Placement one_f_one_b = p.Place(PipelineSchedule::kOneFOneB);
  const int64_t gpipe_peak =
      PeakOn(Executor(p.mb.graph, CpuWorkers(2), gpipe, p.initial).RunStep(p.feeds), "cpu:0");
  const int64_t one_f_one_b_peak =
      PeakOn(Executor(p.mb.graph, CpuWorkers(2), one_f_one_b, p.initial).RunStep(p.feeds), "cpu:0");
  ASSERT_LT(one_f_one_b_peak, gpipe_peak);

  sim::RooflineCostModel costs;
  sim::Simulator simulator(p.mb.graph, CpuWorkers(2), costs);
  const sim::SimulationResult sim_gpipe = simulator.Simulate(gpipe);
  const sim::SimulationResult sim_one_f_one_b = simulator.Simulate(one_f_one_b);
  ASSERT_TRUE(sim_gpipe.valid && sim_one_f_one_b.valid);
  // The same schedule stashes the same activations; what differs is when the other stage's copies
  // land on cpu:0, which follows the machine's timing in the executor and the cost model's in the
  // simulator (a few percent here).
  EXPECT_NEAR(sim_gpipe.peak_memory_bytes[0], gpipe_peak, 0.1 * gpipe_peak);
  EXPECT_NEAR(sim_one_f_one_b.peak_memory_bytes[0], one_f_one_b_peak, 0.1 * one_f_one_b_peak);
  EXPECT_LT(sim_one_f_one_b.peak_memory_bytes[0], 0.6 * sim_gpipe.peak_memory_bytes[0]);

  const int64_t capacity = (gpipe_peak + one_f_one_b_peak) / 2;
  const graph::DeviceSet limited = CpuWorkers(2, capacity);
  Executor gpipe_executor(p.mb.graph, limited, gpipe, p.initial);
  try {
    gpipe_executor.RunStep(p.feeds);
    ADD_FAILURE() << "GPipe fitted in " << capacity << " bytes";
  } catch (const StepFailure& failure) {
    EXPECT_THAT(failure.what(), HasSubstr("out of memory on cpu:0"));
  }
  Executor limited_executor(p.mb.graph, limited, one_f_one_b, p.initial);
  EXPECT_NO_THROW(limited_executor.RunStep(p.feeds));

  sim::Simulator limited_simulator(p.mb.graph, limited, costs);
  EXPECT_FALSE(limited_simulator.Simulate(gpipe).valid);
  EXPECT_TRUE(limited_simulator.Simulate(one_f_one_b).valid);
}

using TempFolder = test_support::TempDir;

// A pipelined placement written to a file (YAML and protobuf) reads back whole: the micro-batch
// count and schedule come first, so that the reader can build the micro-batched step, then every
// copy's device.
TEST(PipelinePlacementFileTest, MicroBatchesAndScheduleSurviveTheRoundTrip) {
  Pipelined p = TwoStageLeNet(4);
  const std::vector<std::string> devices = {"cpu:0", "cpu:1"};
  TempFolder folder;
  for (PipelineSchedule schedule : {PipelineSchedule::kGPipe, PipelineSchedule::kOneFOneB}) {
    SCOPED_TRACE(graph::ToString(schedule));
    const graph::Placement placement = p.Place(schedule);
    const auto yaml = folder.path() / "p.yaml";
    graph::WritePlacementYaml(yaml, p.mb.graph, placement);
    const graph::PipelineSettings read = graph::ReadPlacementPipeline(yaml);
    EXPECT_EQ(read.micro_batches, 4);
    EXPECT_EQ(read.schedule, schedule);
    EXPECT_EQ(graph::ReadPlacementYaml(yaml, p.mb.graph, devices), placement);

    const auto pb = folder.path() / "p.pb", pbtxt = folder.path() / "p.pbtxt";
    proto::WritePlacementProto(pb, pbtxt, p.mb.graph, placement, {.model = "lenet"});
    for (const auto& file : {pb, pbtxt}) {
      EXPECT_EQ(proto::ReadPlacementProtoPipeline(file).micro_batches, 4);
      EXPECT_EQ(proto::ReadPlacementProtoPipeline(file).schedule, schedule);
      EXPECT_EQ(proto::ReadPlacementProto(file, p.mb.graph, devices), placement);
    }
  }
  // Without micro-batches the keys are not written, and a file without them is M = 1, GPipe.
  const graph::Placement plain = TwoStages(p.plain);
  const std::string text = graph::PlacementToYaml(p.plain, plain);
  EXPECT_THAT(text, ::testing::Not(HasSubstr("micro_batches")));
  const auto file = folder.Write("plain.yaml", text);
  EXPECT_EQ(graph::ReadPlacementPipeline(file).micro_batches, 1);
  EXPECT_EQ(graph::ReadPlacementYaml(file, p.plain, devices), plain);
}

TEST(PipelinePlacementFileTest, BadMicroBatchesOrScheduleAreErrorsNamingFileKeyAndLine) {
  Pipelined p = TwoStageLeNet(4);
  const std::vector<std::string> devices = {"cpu:0", "cpu:1"};
  TempFolder folder;
  struct Case {
    std::string text;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"default: 0\nmicro_batches: 0\n", {"p.yaml:2", "micro_batches", ">= 1", "'0'"}},
      {"default: 0\nmicro_batches: four\n", {"p.yaml:2", "micro_batches", "'four'"}},
      {"default: 0\nmicro_batches: [4]\n", {"p.yaml:2", "micro_batches", "a list"}},
      {"default: 0\nmicro_batches: 4\nschedule: pipedream\n",
       {"p.yaml:3", "schedule", "gpipe or 1f1b", "'pipedream'"}},
      {"default: 0\nmicro_batches: 4\nschedule: {a: b}\n", {"p.yaml:3", "schedule", "a mapping"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    const auto file = folder.Write("p.yaml", c.text);
    for (int reader = 0; reader < 2; ++reader) {
      try {
        if (reader == 0) {
          graph::ReadPlacementPipeline(file);
        } else {
          graph::ReadPlacementYaml(file, p.mb.graph, devices);
        }
        ADD_FAILURE() << "no error from reader " << reader;
      } catch (const graph::PlacementError& error) {
        for (const std::string& part : c.expected) EXPECT_THAT(error.what(), HasSubstr(part));
      }
    }
  }
  // A count the model it is read against was not built with: the op names would not match.
  const auto two = folder.Write("p.yaml", "default: 0\nmicro_batches: 2\n");
  for (const graph::Graph* g : {&p.mb.graph, &p.plain}) {
    try {
      graph::ReadPlacementYaml(two, *g, devices);
      ADD_FAILURE() << "no error";
    } catch (const graph::PlacementError& error) {
      EXPECT_THAT(error.what(), ::testing::AllOf(HasSubstr("p.yaml"), HasSubstr("micro_batches: 2"),
                                                 HasSubstr("not micro-batched")));
    }
  }
  EXPECT_EQ(graph::ReadPlacementYaml(folder.Write("p.yaml", "default: 0\nmicro_batches: 4\n"),
                                     p.mb.graph, devices)
                .micro_batches,
            4);
}

}  // namespace
}  // namespace placer::runtime
