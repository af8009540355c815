// The algorithmic baselines on graphs whose best placement or schedule is known by hand, under a
// cost model with fixed op and link times; then every algorithm on LeNet's and a parallel MLP's
// training steps, checked by the simulator.
#include "placer/baselines/baselines.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "graph/grouping.h"
#include "graph/ir.h"
#include "graph/micro_batches.h"
#include "graph/models.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "placer/baselines/pipeline.h"
#include "placer/baselines/task_graph.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulator.h"
#include "tests/forward_builders.h"

namespace placer::baselines {
namespace {

using graph::Device;
using graph::DeviceSet;
using graph::DeviceType;
using graph::Graph;
using graph::Grouping;
using graph::ModelBuilder;
using graph::OpId;
using graph::TensorId;
using ::testing::AllOf;
using ::testing::DoubleNear;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Optional;
using ::testing::ThrowsMessage;

Device Cpu(int index, int64_t capacity = 0) {
  return {.name = "cpu:" + std::to_string(index),
          .type = DeviceType::kCpu,
          .index = index,
          .memory_capacity = capacity};
}
Device Cuda(int index) {
  return {.name = "cuda:" + std::to_string(index), .type = DeviceType::kCuda, .index = index};
}
DeviceSet Cpus(int count, int64_t capacity = 0) {
  DeviceSet devices;
  for (int i = 0; i < count; ++i) devices.push_back(Cpu(i, capacity));
  return devices;
}

// Fixed op times by op name (others take `default_seconds`), multiplied by a per-device slowdown
// (1 unless given); one link for every pair of devices; the minibatch loads for free everywhere.
class FixedCostModel : public sim::CostModel {
 public:
  FixedCostModel(std::map<std::string, double> op_seconds, sim::LinkSpec link,
                 double default_seconds = 1, std::map<std::string, double> slowdown = {})
      : op_seconds_(std::move(op_seconds)),
        link_(link),
        default_seconds_(default_seconds),
        slowdown_(std::move(slowdown)) {}

  double OpSeconds(const Graph& graph, OpId op, const Device& device) const override {
    auto it = op_seconds_.find(graph.op(op).name);
    const double seconds = it == op_seconds_.end() ? default_seconds_ : it->second;
    auto slow = slowdown_.find(device.name);
    return seconds * (slow == slowdown_.end() ? 1.0 : slow->second);
  }
  double TransferSeconds(int64_t bytes, const Device* from, const Device&) const override {
    return from == nullptr ? 0 : link_.Seconds(bytes);
  }

 private:
  std::map<std::string, double> op_seconds_;
  sim::LinkSpec link_;
  double default_seconds_;
  std::map<std::string, double> slowdown_;
};

// Every tensor of the hand-made graphs below is 4 floats, 16 bytes, unless said otherwise; these
// links move one in a tenth of a second, or in 100 seconds.
constexpr sim::LinkSpec kCheapLink{.latency_seconds = 0.1};
constexpr sim::LinkSpec kExpensiveLink{.latency_seconds = 100};

// Owns what a PlacementProblem points to.
struct TestProblem {
  TestProblem(Graph g, DeviceSet d, std::unique_ptr<sim::CostModel> c)
      : graph(std::move(g)),
        grouping(graph::OpPerGroup(graph)),
        devices(std::move(d)),
        costs(std::move(c)) {}
  PlacementProblem problem() const { return {&graph, &grouping, devices, costs.get()}; }

  // The device of the group holding forward op `name`.
  int DeviceOf(const BaselineResult& result, const std::string& name) const {
    return result.placement.device_of_op.at(static_cast<size_t>(*graph.FindOp(name)));
  }
  std::vector<int> DevicesOf(const BaselineResult& result,
                             const std::vector<std::string>& names) const {
    std::vector<int> devices_of;
    for (const std::string& name : names) devices_of.push_back(DeviceOf(result, name));
    return devices_of;
  }

  Graph graph;
  Grouping grouping;
  DeviceSet devices;
  std::unique_ptr<sim::CostModel> costs;
};

TestProblem MakeProblem(Graph graph, DeviceSet devices, std::map<std::string, double> op_seconds,
                        sim::LinkSpec link, std::map<std::string, double> slowdown = {}) {
  return TestProblem(
      std::move(graph), std::move(devices),
      std::make_unique<FixedCostModel>(std::move(op_seconds), link, 1.0, std::move(slowdown)));
}

int DevicesUsed(const BaselineResult& result) {
  return static_cast<int>(
      std::set<int>(result.group_devices.begin(), result.group_devices.end()).size());
}

// x (minibatch) -> a -> b -> c -> d, each a Relu.
Graph Chain() {
  Graph g;
  ModelBuilder b(g);
  b.Relu("d", b.Relu("c", b.Relu("b", b.Relu("a", b.Input("x", {4})))));
  return g;
}

// x -> a -> {b, c} -> d = b + c.
Graph ForkJoin() {
  Graph g;
  ModelBuilder b(g);
  TensorId a = b.Relu("a", b.Input("x", {4}));
  TensorId left = b.Relu("b", a);
  TensorId right = b.Relu("c", a);
  b.Apply("d", graph::op_types::kAdd, {left, right});
  return g;
}

// x -> a -> {light, heavy}: two sinks, `light` first in the graph's order.
Graph Fork() {
  Graph g;
  ModelBuilder b(g);
  TensorId a = b.Relu("a", b.Input("x", {4}));
  b.Relu("light", a);
  b.Relu("heavy", a);
  return g;
}

// Two chains of three ops joined by one 4-byte tensor; inside each, 1 KiB tensors:
// x -> a1 -> a2 -> a3 (Linear to 1 feature) -> b1 (Linear to 256) -> b2 -> b3.
Graph TwoClusters() {
  Graph g;
  ModelBuilder b(g);
  TensorId a = b.Relu("a2", b.Relu("a1", b.Input("x", {1, 256})));
  TensorId bridge = b.Linear("a3", a, 1, 0.1);
  b.Relu("b3", b.Relu("b2", b.Linear("b1", bridge, 256, 0.1)));
  return g;
}

// `width` independent Relus of the minibatch.
Graph Wide(int width) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  for (int i = 0; i < width; ++i) b.Relu(fmt::format("r{}", i), x);
  return g;
}

// ---------------------------------------------------------------------------------------------
// The task graph.

TEST(TaskGraphTest, AGroupCostsItsForwardBackwardAndUpdateOps) {
  Graph lenet = graph::BuildLeNet({.batch_size = 8});
  const Grouping grouping = graph::OpPerGroup(lenet);
  sim::RooflineCostModel costs;
  const DeviceSet devices = Cpus(2);
  const TaskGraph tasks({&lenet, &grouping, devices, &costs});
  ASSERT_EQ(tasks.num_tasks(), grouping.num_groups());
  double task_seconds = 0, op_seconds = 0;
  for (int task = 0; task < tasks.num_tasks(); ++task)
    task_seconds += tasks.ComputeSeconds(task, 1);
  for (OpId op = 0; op < lenet.num_ops(); ++op) {
    op_seconds += costs.OpSeconds(lenet, op, devices[1]);
  }
  // CPU workers read the minibatch in place, so loads add nothing here.
  EXPECT_NEAR(task_seconds, op_seconds, 1e-12);
}

TEST(TaskGraphTest, AnEdgeCarriesTheForwardTensorAndItsGradientBack) {
  Graph lenet = graph::BuildLeNet({.batch_size = 8});
  const Grouping grouping = graph::OpPerGroup(lenet);
  sim::RooflineCostModel costs;
  const DeviceSet devices = Cpus(2);
  const TaskGraph tasks({&lenet, &grouping, devices, &costs});
  const int conv1 = tasks.task_of_group(grouping.group_of_op[*lenet.FindOp("conv1")]);
  const int relu1 = tasks.task_of_group(grouping.group_of_op[*lenet.FindOp("relu1")]);
  const int64_t activation = lenet.tensor(lenet.TensorByName("conv1")).bytes();
  bool found = false;
  for (size_t e = 0; e < tasks.edges().size(); ++e) {
    const TaskEdge& edge = tasks.edges()[e];
    if (edge.from != conv1 || edge.to != relu1) continue;
    found = true;
    EXPECT_THAT(edge.forward_tensor_bytes, ElementsAre(activation));
    EXPECT_THAT(edge.gradient_tensor_bytes, ElementsAre(activation));
    const sim::LinkSpec link = costs.LinkOf(&devices[0], devices[1]);
    EXPECT_NEAR(tasks.CommunicationSeconds(static_cast<int>(e), 0, 1), 2 * link.Seconds(activation),
                1e-12);
    EXPECT_EQ(tasks.CommunicationSeconds(static_cast<int>(e), 1, 1), 0);
  }
  EXPECT_TRUE(found);
  for (const TaskEdge& edge : tasks.edges()) EXPECT_LT(edge.from, edge.to);
}

TEST(TaskGraphTest, GroupsThatDependOnEachOtherBecomeOneTask) {
  TestProblem t = MakeProblem(Chain(), Cpus(2), {}, kExpensiveLink);
  // {a, c} and {b, d}: a -> b -> c -> d goes back and forth between the two groups.
  t.grouping = Grouping{};
  t.grouping.group_of_op.assign(static_cast<size_t>(t.graph.num_ops()), -1);
  for (const auto& [name, group] :
       std::vector<std::pair<std::string, int>>{{"a", 0}, {"c", 0}, {"b", 1}, {"d", 1}}) {
    t.grouping.group_of_op[*t.graph.FindOp(name)] = group;
  }
  t.grouping.members = {{*t.graph.FindOp("a"), *t.graph.FindOp("c")},
                        {*t.graph.FindOp("b"), *t.graph.FindOp("d")}};
  const TaskGraph tasks(t.problem());
  EXPECT_EQ(tasks.num_tasks(), 1);
  EXPECT_THAT(tasks.groups_of_task(0), ElementsAre(0, 1));
  EXPECT_EQ(tasks.Describe(0), "groups 0, 1 (a, c, +2 more)");
  const BaselineResult result = MEtf(t.problem());
  EXPECT_EQ(result.group_devices[0], result.group_devices[1]);
}

TEST(TaskGraphTest, InvalidProblemsAreRejectedWithTheReason) {
  TestProblem t = MakeProblem(Chain(), Cpus(2), {}, kCheapLink);
  PlacementProblem problem = t.problem();
  problem.graph = nullptr;
  EXPECT_THAT([&] { TaskGraph{problem}; },
              ThrowsMessage<std::invalid_argument>(HasSubstr("no graph")));

  problem = t.problem();
  problem.devices = {Cpu(0), Cpu(0)};
  EXPECT_THAT([&] { TaskGraph{problem}; },
              ThrowsMessage<std::invalid_argument>(HasSubstr("'cpu:0' is listed twice")));

  problem = t.problem();
  problem.devices.clear();
  EXPECT_THAT([&] { TaskGraph{problem}; },
              ThrowsMessage<std::invalid_argument>(HasSubstr("no devices")));

  const Graph other = Fork();
  const Grouping other_grouping = graph::OpPerGroup(other);
  problem = t.problem();
  problem.grouping = &other_grouping;
  EXPECT_THAT([&] { TaskGraph{problem}; },
              ThrowsMessage<std::invalid_argument>(HasSubstr("another graph")));

  FixedCostModel negative({{"c", -1}}, kCheapLink);
  problem = t.problem();
  problem.costs = &negative;
  EXPECT_THAT([&] { TaskGraph{problem}; },
              ThrowsMessage<std::invalid_argument>(HasSubstr("op 'c' on cpu:0")));

  EXPECT_THAT([&] { SingleDevice(t.problem(), 2); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("out of range")));
  EXPECT_THAT([&] { RunBaseline("random", t.problem()); },
              ThrowsMessage<std::invalid_argument>(HasSubstr("m-topo, m-etf, m-sct")));
}

// ---------------------------------------------------------------------------------------------
// List schedulers.

// Two equal heavy branches, cheap links: each device takes one. Hand schedule (m-ETF): a on cpu:0
// [0, 1]; b on cpu:0 [1, 11]; c on cpu:1 from 1.1 (a's output arrives) to 11.1; d where its
// inputs arrive first, cpu:1 at 11.1 (b's arrives at 11.1 there), ends 12.1.
TEST(ListSchedulingTest, ForkJoinWithCheapLinksSplitsTheBranches) {
  const TestProblem t = MakeProblem(ForkJoin(), Cpus(2), {{"b", 10}, {"c", 10}}, kCheapLink);
  for (const BaselineResult& result : {MEtf(t.problem()), MSct(t.problem()), Heft(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_NE(t.DeviceOf(result, "b"), t.DeviceOf(result, "c"));
    EXPECT_THAT(result.estimated_step_seconds, Optional(DoubleNear(12.1, 1e-9)));
    EXPECT_THAT(result.memory_warning, IsEmpty());
  }
}

TEST(ListSchedulingTest, ForkJoinWithExpensiveLinksStaysOnOneDevice) {
  const TestProblem t = MakeProblem(ForkJoin(), Cpus(2), {{"b", 10}, {"c", 10}}, kExpensiveLink);
  for (const BaselineResult& result : {MEtf(t.problem()), MSct(t.problem()), Heft(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_EQ(DevicesUsed(result), 1);
    EXPECT_THAT(result.estimated_step_seconds, Optional(DoubleNear(22, 1e-9)));
  }
}

TEST(ListSchedulingTest, AChainStaysOnOneDevice) {
  const TestProblem t = MakeProblem(Chain(), Cpus(3), {{"b", 5}}, kCheapLink);
  for (const BaselineResult& result : {MEtf(t.problem()), MSct(t.problem()), Heft(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_EQ(DevicesUsed(result), 1);
    EXPECT_THAT(result.estimated_step_seconds, Optional(DoubleNear(8, 1e-9)));
  }
}

// A device twice as fast takes the whole chain: HEFT by earliest finish, m-ETF by its tie-break on
// the earlier finish among equal start times.
TEST(ListSchedulingTest, AFasterDeviceIsPreferred) {
  const TestProblem t = MakeProblem(Chain(), Cpus(2), {}, kCheapLink, {{"cpu:0", 2.0}});
  for (const BaselineResult& result : {MEtf(t.problem()), Heft(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_THAT(result.group_devices, Each(1));
    EXPECT_THAT(result.estimated_step_seconds, Optional(DoubleNear(4, 1e-9)));
  }
}

// x -> a (3 s) -> heavy1, heavy2 (10 s each); x -> light (2 s); 1 s per transfer. By rank a, heavy1
// and heavy2 go first: heavy1 after a on cpu:0 [3, 13], heavy2 on cpu:1 once a's output arrives
// [4, 14], which leaves cpu:1 idle until 4. Light, ranked last, goes into that gap at 0.
TEST(ListSchedulingTest, HeftInsertsATaskIntoAnIdleGap) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  TensorId a = b.Relu("a", x);
  b.Relu("heavy1", a);
  b.Relu("heavy2", a);
  b.Relu("light", x);
  const TestProblem t =
      MakeProblem(std::move(g), Cpus(2), {{"a", 3}, {"heavy1", 10}, {"heavy2", 10}, {"light", 2}},
                  sim::LinkSpec{.latency_seconds = 1});
  const TaskSchedule schedule = ScheduleHeft(TaskGraph(t.problem()));
  EXPECT_THAT(schedule.device, ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(schedule.start_seconds, ElementsAre(0, 3, 4, 0));
  EXPECT_DOUBLE_EQ(schedule.makespan_seconds, 14);
}

// CPOP keeps the critical path on one device where HEFT follows each task's earliest finish.
// a (6 s) and s (2 s) feed c (1 s); cpu:1 is 1.5 times slower; s's output takes 4.5 s to cross,
// a's 0.0045 s. By mean times the critical path is a -> c (priority 8.7545 against s's 8.25), and
// cpu:0 computes it soonest (7 s against 10.5). CPOP: a on cpu:0 [0, 6]; s where it finishes
// first, cpu:1 [0, 3]; c on the path's device once s's output has crossed: [7.5, 8.5]. HEFT puts
// c where it finishes first: cpu:1, [6.0045, 7.5045].
TEST(ListSchedulingTest, CpopKeepsTheCriticalPathOnOneDevice) {
  Graph g;
  ModelBuilder b(g);
  const TensorId a = b.Relu("a", b.Input("small", {1}));
  const TensorId s = b.Relu("s", b.Input("large", {1000}));
  b.Concat("c", {a, s}, 0);
  const TestProblem t =
      MakeProblem(std::move(g), Cpus(2), {{"a", 6}, {"s", 2}, {"c", 1}},
                  sim::LinkSpec{.seconds_per_byte = 4.5 / 4000}, {{"cpu:1", 1.5}});
  const TaskGraph tasks(t.problem());
  auto task = [&](const std::string& name) {
    return Index(tasks.task_of_group(t.grouping.group_of_op[Index(*t.graph.FindOp(name))]));
  };
  const TaskSchedule cpop = ScheduleCpop(tasks);
  EXPECT_EQ(cpop.device[task("a")], 0);
  EXPECT_EQ(cpop.device[task("s")], 1);
  EXPECT_EQ(cpop.device[task("c")], 0);
  EXPECT_NEAR(cpop.start_seconds[task("c")], 7.5, 1e-9);
  EXPECT_NEAR(cpop.makespan_seconds, 8.5, 1e-9);
  const TaskSchedule heft = ScheduleHeft(tasks);
  EXPECT_EQ(heft.device[task("c")], 1);
  EXPECT_NEAR(heft.makespan_seconds, 7.5045, 1e-9);
  const BaselineResult by_name = RunBaseline("cpop", t.problem());
  EXPECT_EQ(by_name.algorithm, "CPOP");
  EXPECT_THAT(by_name.estimated_step_seconds, Optional(DoubleNear(8.5, 1e-9)));
}

// ---------------------------------------------------------------------------------------------
// m-SCT.

// a (1 s) -> light (1 s) and a -> heavy (10 s), 2 s per transfer. The relaxation's optimum, 11,
// needs heavy right after a (x = 0) and light paying the transfer (x = 1): heavy is a's favourite.
TEST(MSctTest, TheRelaxationMakesTheLongBranchTheFavouriteChild) {
  const TestProblem t =
      MakeProblem(Fork(), Cpus(2), {{"heavy", 10}}, sim::LinkSpec{.latency_seconds = 2});
  const TaskGraph tasks(t.problem());
  ASSERT_EQ(tasks.edges().size(), 2u);
  const int heavy = 2;  // tasks in the graph's order: a, light, heavy
  const SctRelaxation relaxation = SolveSctRelaxation(tasks);
  EXPECT_NEAR(relaxation.makespan_seconds, 11, 1e-9);
  for (size_t e = 0; e < 2; ++e) {
    EXPECT_NEAR(relaxation.edge_communication[e], tasks.edges()[e].to == heavy ? 0 : 1, 1e-9);
  }
  EXPECT_THAT(FavouriteChildren(tasks, relaxation, 0.1), ElementsAre(heavy, -1, -1));
}

// m-ETF starts light first (lower topological index, same start), so heavy waits; m-SCT keeps the
// device awake for heavy and sends light across. The simulator (GPU streams, where the copy runs on
// the receiving stream) agrees with both estimates.
TEST(MSctTest, TheFavouriteChildRuleBeatsEarliestTaskFirst) {
  const TestProblem t = MakeProblem(Fork(), DeviceSet{Cuda(0), Cuda(1)}, {{"heavy", 10}},
                                    sim::LinkSpec{.latency_seconds = 2});
  const BaselineResult etf = MEtf(t.problem());
  const BaselineResult sct = MSct(t.problem());
  EXPECT_THAT(etf.estimated_step_seconds, Optional(DoubleNear(12, 1e-9)));
  EXPECT_THAT(sct.estimated_step_seconds, Optional(DoubleNear(11, 1e-9)));
  EXPECT_THAT(t.DevicesOf(sct, {"a", "heavy", "light"}), ElementsAre(0, 0, 1));
  const sim::Simulator simulator(t.graph, t.devices, *t.costs);
  EXPECT_DOUBLE_EQ(simulator.Simulate(etf.placement).step_seconds, 12);
  EXPECT_DOUBLE_EQ(simulator.Simulate(sct.placement).step_seconds, 11);
}

// ---------------------------------------------------------------------------------------------
// Memory: m-TOPO, the memory-aware schedulers, and over-memory inputs. In the chain every group
// writes 16 bytes; a also reads the 16-byte minibatch, and a group reading its input from the other
// device holds a 16-byte copy.

// The pipeline's stages: contiguous runs of the chain a -> b -> c -> d, the slowest stage (its ops
// plus sending across its cut, 0.1 s each way on the cheap link) as fast as it can be.
TEST(PipelineStagesTest, TheChainIsCutWhereTheSlowestStageIsFastest) {
  const TestProblem even = MakeProblem(Chain(), Cpus(2), {}, kCheapLink);
  StagePartition two = PartitionIntoStages(even.graph, even.devices, *even.costs);
  EXPECT_THAT(two.stage_end, ElementsAre(2, 4));  // 2 + 0.2 | 2, not 1 + 0.2 | 3
  EXPECT_DOUBLE_EQ(two.bottleneck_seconds, 2.2);
  StagePartition three = PartitionIntoStages(even.graph, Cpus(3), *even.costs);
  EXPECT_THAT(three.stage_end, ElementsAre(1, 2, 4));  // 1.2 | 1.2 | 2
  EXPECT_DOUBLE_EQ(three.bottleneck_seconds, 2.0);

  const TestProblem heavy_first = MakeProblem(Chain(), Cpus(2), {{"a", 3}}, kCheapLink);
  StagePartition alone =
      PartitionIntoStages(heavy_first.graph, heavy_first.devices, *heavy_first.costs);
  EXPECT_THAT(alone.stage_end, ElementsAre(1, 4));  // 3.2 | 3
  EXPECT_EQ(alone.placement.device_of_op[static_cast<size_t>(*heavy_first.graph.FindOp("b"))], 1);
}

TEST(PipelineStagesTest, AnExpensiveLinkKeepsEveryOpInTheFirstStage) {
  const TestProblem t = MakeProblem(Chain(), Cpus(3), {}, kExpensiveLink);
  StagePartition stages = PartitionIntoStages(t.graph, t.devices, *t.costs);
  EXPECT_THAT(stages.stage_end, ElementsAre(4, 4, 4));
  EXPECT_DOUBLE_EQ(stages.bottleneck_seconds, 4.0);
}

// The grid's steps that were built already (the search's) are simulated where they are: only the
// shapes the hook lacks are built, and every trial is what building them all afresh gives.
TEST(PipelineGridTest, StepsBuiltAlreadyAreSimulatedWhereTheyAreWithTheSameTrials) {
  constexpr int64_t kBatch = 16;
  constexpr double kLearningRate = 0.1;
  int forwards_built = 0;
  const graph::ForwardBuilder counted = [&](int64_t rows, int64_t normalizer) {
    ++forwards_built;
    return test_support::LeNetForward(rows, normalizer);
  };
  const Graph base = test_support::PlainStep(counted, kBatch, kLearningRate);
  const DeviceSet devices = Cpus(4);
  sim::RooflineCostModel costs;
  const PipelineGrid afresh{.micro_batch_counts = {1, 2, 4}, .replica_counts = {1, 2}};
  forwards_built = 0;
  const PipelineBaselineResult built_here =
      PipelineBaseline(base, counted, kBatch, kLearningRate, devices, costs, afresh);
  EXPECT_GT(forwards_built, 0);

  // What a search would hold: every shape but the one-replica step without micro-batches.
  std::map<std::pair<int, int>, Graph> held;
  held.emplace(std::pair{1, 2}, graph::BuildMicroBatched(counted, kBatch, 2, kLearningRate).graph);
  held.emplace(std::pair{1, 4}, graph::BuildMicroBatched(counted, kBatch, 4, kLearningRate).graph);
  for (int m : {1, 2, 4}) {
    held.emplace(
        std::pair{2, m},
        graph::BuildReplicatedPipelines(counted, kBatch, {"r0", "r1"}, m, kLearningRate).graph);
  }
  std::set<std::pair<int, int>> asked;
  PipelineGrid reusing = afresh;
  reusing.built = [&](int replicas, int micro_batches) -> const Graph* {
    asked.emplace(replicas, micro_batches);
    auto it = held.find({replicas, micro_batches});
    return it == held.end() ? nullptr : &it->second;
  };
  forwards_built = 0;
  const PipelineBaselineResult reused =
      PipelineBaseline(base, counted, kBatch, kLearningRate, devices, costs, reusing);
  EXPECT_EQ(forwards_built, 1);  // the one-replica step without micro-batches alone
  EXPECT_EQ(asked.size(), 6u);

  ASSERT_EQ(reused.trials.size(), built_here.trials.size());
  EXPECT_EQ(reused.best, built_here.best);
  for (size_t i = 0; i < reused.trials.size(); ++i) {
    const PipelineTrial& a = reused.trials[i];
    const PipelineTrial& b = built_here.trials[i];
    SCOPED_TRACE(fmt::format("R = {}, M = {}", b.replicas, b.micro_batches));
    EXPECT_EQ(a.replicas, b.replicas);
    EXPECT_EQ(a.micro_batches, b.micro_batches);
    EXPECT_EQ(a.schedule, b.schedule);
    EXPECT_EQ(a.result.step_seconds, b.result.step_seconds);
    ASSERT_EQ(a.result.devices.size(), b.result.devices.size());
    for (size_t d = 0; d < a.result.devices.size(); ++d) {
      EXPECT_EQ(a.result.devices[d].peak_memory_bytes, b.result.devices[d].peak_memory_bytes);
    }
  }
}

TEST(MTopoTest, FillsEachDeviceUpToItsCapacityInTopologicalOrder) {
  const TestProblem t = MakeProblem(Chain(), Cpus(2, 48), {}, kCheapLink);
  const BaselineResult result = MTopo(t.problem(), {.uniform = false});
  // cpu:0: x, a, b = 48 bytes; cpu:1: b's copy, c, d = 48 bytes.
  EXPECT_THAT(result.group_devices, ElementsAre(0, 0, 1, 1));
  EXPECT_THAT(result.memory_warning, IsEmpty());
  const sim::Simulator simulator(t.graph, t.devices, *t.costs);
  EXPECT_TRUE(simulator.Simulate(result.placement).valid);
}

TEST(MTopoTest, WithoutMemoryPressureThePlainVariantUsesOneDeviceAndTheUniformOneSpreads) {
  const TestProblem t = MakeProblem(Chain(), Cpus(2), {}, kCheapLink);
  EXPECT_THAT(MTopo(t.problem(), {.uniform = false}).group_devices, ElementsAre(0, 0, 0, 0));
  // Uniform cap: 64 / 2 + 16 = 48 bytes of the groups' own memory per device but the last.
  const BaselineResult uniform = MTopo(t.problem());
  EXPECT_THAT(uniform.group_devices, ElementsAre(0, 0, 0, 1));
  EXPECT_EQ(uniform.algorithm, "m-TOPO (uniform)");
}

TEST(MTopoTest, FailsNamingTheGroupAndTheLastDeviceWhenTheGroupsDoNotFitInOrder) {
  // 40 bytes each: a (32) on cpu:0; b (48 there) moves to cpu:1 (32 with a's copy); c does not fit.
  const TestProblem t = MakeProblem(Chain(), Cpus(2, 40), {}, kCheapLink);
  EXPECT_THAT([&] { MTopo(t.problem()); },
              ThrowsMessage<BaselineError>(AllOf(HasSubstr("group 2 (c)"), HasSubstr("cpu:1"),
                                                 HasSubstr("8 of its 40 bytes free"))));
}

TEST(MemoryAwareSchedulingTest, MEtfSplitsWhenOneDeviceCannotHoldEverything) {
  // Expensive links would keep the chain together; 48 bytes per device forbid it.
  const TestProblem t = MakeProblem(Chain(), Cpus(2, 48), {}, kExpensiveLink);
  const sim::Simulator simulator(t.graph, t.devices, *t.costs);
  for (const BaselineResult& result : {MEtf(t.problem()), MSct(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_THAT(result.group_devices, ElementsAre(0, 0, 1, 1));
    EXPECT_THAT(result.memory_warning, IsEmpty());
    EXPECT_TRUE(simulator.Simulate(result.placement).valid);
  }
}

TEST(MemoryAwareSchedulingTest, MEtfFailsNamingTheGroupThatFitsNowhere) {
  const TestProblem t = MakeProblem(Chain(), Cpus(2, 40), {}, kCheapLink);
  EXPECT_THAT([&] { MEtf(t.problem()); },
              ThrowsMessage<BaselineError>(AllOf(HasSubstr("m-ETF found no device that holds "
                                                           "group 2 (c)"),
                                                 HasSubstr("cpu:0"), HasSubstr("cpu:1"))));
}

TEST(MemoryTest, AlgorithmsThatIgnoreMemoryReportAnOverCapacityPlacement) {
  const TestProblem t = MakeProblem(Chain(), Cpus(2, 48), {}, kExpensiveLink);
  for (const BaselineResult& result : {SingleDevice(t.problem(), 0), Heft(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_THAT(result.group_devices, Each(0));
    EXPECT_THAT(result.memory_warning,
                HasSubstr("cpu:0 may run out of memory: its groups need up to 80 bytes, its "
                          "capacity is 48 bytes"));
  }
}

TEST(MemoryTest, AProblemNoPlacementCanHoldIsAnErrorForEveryAlgorithm) {
  // Each group needs 16 bytes; 10 bytes per device hold none of them.
  const TestProblem too_small = MakeProblem(Chain(), Cpus(2, 10), {}, kCheapLink);
  // 20 bytes per device hold any one group, but not 64 bytes in all.
  const TestProblem too_little = MakeProblem(Chain(), Cpus(2, 20), {}, kCheapLink);
  for (const std::string& name : BaselineNames()) {
    SCOPED_TRACE(name);
    EXPECT_THAT([&] { RunBaseline(name, too_small.problem()); },
                ThrowsMessage<BaselineError>(
                    HasSubstr("group 0 (a) needs 16 bytes for its parameters and values, more than "
                              "any device holds (the largest, cpu:0, holds 10 bytes)")));
    EXPECT_THAT([&] { RunBaseline(name, too_little.problem()); },
                ThrowsMessage<BaselineError>(HasSubstr("need 64 bytes")));
  }
}

// ---------------------------------------------------------------------------------------------
// Partitioners.

TEST(PartitionerTest, CutTheCheapEdgeOfTwoClusters) {
  const TestProblem t = MakeProblem(TwoClusters(), Cpus(2), {}, kCheapLink);
  for (const BaselineResult& result : {MetisPartition(t.problem()), ScotchMapping(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    const std::vector<int> devices = t.DevicesOf(result, {"a1", "a2", "a3", "b1", "b2", "b3"});
    EXPECT_EQ(devices[0], devices[1]);
    EXPECT_EQ(devices[0], devices[2]);
    EXPECT_EQ(devices[3], devices[4]);
    EXPECT_EQ(devices[3], devices[5]);
    EXPECT_NE(devices[0], devices[3]);
  }
}

TEST(PartitionerTest, BalancedWorkUsesEveryDeviceAndNeverMore) {
  const TestProblem wide = MakeProblem(Wide(8), Cpus(4), {}, kCheapLink);
  for (const BaselineResult& result :
       {MetisPartition(wide.problem()), ScotchMapping(wide.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_EQ(DevicesUsed(result), 4);
    std::map<int, int> per_device;
    for (int device : result.group_devices) ++per_device[device];
    EXPECT_THAT(per_device, Each(testing::Pair(testing::_, 2)));
  }
}

TEST(PartitionerTest, AFasterDeviceGetsProportionallyMoreWork) {
  // cpu:1 is three times slower: shares 3/4 and 1/4 of 8 equal tasks.
  const TestProblem t = MakeProblem(Wide(8), Cpus(2), {}, kCheapLink, {{"cpu:1", 3.0}});
  for (const BaselineResult& result : {MetisPartition(t.problem()), ScotchMapping(t.problem())}) {
    SCOPED_TRACE(result.algorithm);
    EXPECT_EQ(std::count(result.group_devices.begin(), result.group_devices.end(), 0), 6);
  }
}

TEST(PartitionerTest, OneDeviceOrFewerGroupsThanDevices) {
  const TestProblem one = MakeProblem(TwoClusters(), Cpus(1), {}, kCheapLink);
  const TestProblem many = MakeProblem(Fork(), Cpus(4), {}, kCheapLink);   // 3 groups
  const TestProblem pair = MakeProblem(Wide(2), Cpus(2), {}, kCheapLink);  // as many as devices
  for (const std::string name : {"metis", "scotch"}) {
    SCOPED_TRACE(name);
    EXPECT_THAT(RunBaseline(name, one.problem()).group_devices, Each(0));
    const BaselineResult spread = RunBaseline(name, many.problem());
    EXPECT_LE(DevicesUsed(spread), 3);
    EXPECT_THAT(spread.group_devices, Each(AllOf(testing::Ge(0), testing::Lt(4))));
    EXPECT_EQ(DevicesUsed(RunBaseline(name, pair.problem())), 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Every algorithm on real training steps, judged by the simulator.

struct ModelCase {
  std::string name;
  int devices;
};

class TrainingStepTest : public testing::TestWithParam<ModelCase> {};

Graph BuildModel(const std::string& name) {
  if (name == "lenet") return graph::BuildLeNet({});
  return graph::BuildParallelMlp({.branches = 4});
}

TEST_P(TrainingStepTest, EveryAlgorithmPlacesValidlyAndLosesToOneDeviceAtMostItsTransfers) {
  const Graph model = BuildModel(GetParam().name);
  const Grouping grouping = graph::OpPerGroup(model);
  const sim::RooflineCostModel costs;
  const DeviceSet devices = Cpus(GetParam().devices);
  const PlacementProblem problem{&model, &grouping, devices, &costs};
  const sim::Simulator simulator(model, devices, costs);

  double worst_single_device = 0;
  for (int d = 0; d < GetParam().devices; ++d) {
    const sim::SimulationResult single = simulator.Simulate(SingleDevice(problem, d).placement);
    ASSERT_TRUE(single.valid) << single.invalid_reason;
    worst_single_device = std::max(worst_single_device, single.step_seconds);
  }
  for (const std::string& name : BaselineNames()) {
    SCOPED_TRACE(name);
    const BaselineResult result = RunBaseline(name, problem);
    EXPECT_GT(result.seconds_to_place, 0);
    ASSERT_EQ(result.placement.device_of_op.size(), static_cast<size_t>(model.num_ops()));
    for (OpId op = 0; op < model.num_ops(); ++op) {
      if (model.op(op).phase != graph::Phase::kForward) continue;
      EXPECT_GE(result.placement.device_of_op[static_cast<size_t>(op)], 0);
      EXPECT_LT(result.placement.device_of_op[static_cast<size_t>(op)], GetParam().devices);
    }
    EXPECT_LE(DevicesUsed(result), GetParam().devices);
    const sim::SimulationResult simulated = simulator.Simulate(result.placement);
    ASSERT_TRUE(simulated.valid) << simulated.invalid_reason;
    // The simulator never idles while work is ready, so a placement loses at most its transfers
    // to a single device (all devices are alike).
    double transfer_seconds = 0;
    for (const sim::ChannelStats& channel : simulated.transfers)
      transfer_seconds += channel.seconds;
    EXPECT_LE(simulated.step_seconds, worst_single_device + transfer_seconds + 1e-12);
    // The list schedulers weigh transfers against parallelism, so they never lose to a single
    // device. m-TOPO and the partitioners split by memory or balance alone: on LeNet, a chain,
    // they pay transfers for no parallelism; only the parallel MLP lets them win.
    const bool list_scheduler = name == "m-etf" || name == "m-sct" || name == "heft";
    if (list_scheduler || GetParam().name == "parallel_mlp") {
      EXPECT_LE(simulated.step_seconds, worst_single_device * (1 + 1e-9))
          << simulated.step_seconds << " vs " << worst_single_device;
    }
    // Deterministic: the same placement again.
    EXPECT_EQ(RunBaseline(name, problem).group_devices, result.group_devices);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TrainingStepTest,
                         testing::Values(ModelCase{"lenet", 2}, ModelCase{"lenet", 3},
                                         ModelCase{"parallel_mlp", 2},
                                         ModelCase{"parallel_mlp", 4}),
                         [](const testing::TestParamInfo<ModelCase>& info) {
                           return info.param.name + "_on_" + std::to_string(info.param.devices);
                         });

// Capacities below what the parallel MLP needs on one device: the memory-aware algorithms spread
// it. Under the upper-bound model the simulator is bound to accept their placements; under the
// default estimate they fit by that estimate.
TEST(TrainingStepMemoryTest, MemoryAwareAlgorithmsFitAModelIntoDevicesTooSmallForItAlone) {
  const Graph model = graph::BuildParallelMlp({.branches = 4});
  const Grouping grouping = graph::OpPerGroup(model);
  const sim::RooflineCostModel costs;
  PlacementProblem problem{&model, &grouping, Cpus(2), &costs};
  const int64_t single_device_peak = sim::Simulator(model, problem.devices, costs)
                                         .Simulate(SingleDevice(problem, 0).placement)
                                         .peak_memory_bytes[0];
  problem.devices = Cpus(2, single_device_peak * 7 / 10);
  const sim::Simulator simulator(model, problem.devices, costs);
  EXPECT_FALSE(simulator.Simulate(SingleDevice(problem, 0).placement).valid);
  for (const MemoryModel memory_model :
       {MemoryModel::kEverythingWritten, MemoryModel::kParametersAndActivations}) {
    problem.memory_model = memory_model;
    for (const BaselineResult& result : {MTopo(problem), MEtf(problem), MSct(problem)}) {
      SCOPED_TRACE(result.algorithm);
      EXPECT_THAT(result.memory_warning, IsEmpty());
      EXPECT_EQ(DevicesUsed(result), 2);
      if (memory_model == MemoryModel::kEverythingWritten) {
        const sim::SimulationResult simulated = simulator.Simulate(result.placement);
        EXPECT_TRUE(simulated.valid) << simulated.invalid_reason;
      }
    }
  }
}

// The default estimate leaves gradients out; the upper bound counts them and every copy.
TEST(TrainingStepMemoryTest, TheUpperBoundCountsGradientsTheEstimateLeavesOut) {
  const Graph lenet = graph::BuildLeNet({.batch_size = 8});
  const Grouping grouping = graph::OpPerGroup(lenet);
  const sim::RooflineCostModel costs;
  PlacementProblem problem{&lenet, &grouping, Cpus(1), &costs};
  int64_t parameters = 0, activations = 0, gradients = 0;
  for (const graph::Tensor& tensor : lenet.tensors()) {
    if (tensor.kind == graph::TensorKind::kParameter) parameters += tensor.bytes();
    if (tensor.kind == graph::TensorKind::kActivation) activations += tensor.bytes();
    if (tensor.kind == graph::TensorKind::kGradient) gradients += tensor.bytes();
  }
  auto total = [&](MemoryModel memory_model) {
    problem.memory_model = memory_model;
    const TaskGraph tasks(problem);
    int64_t bytes = 0;
    for (int task = 0; task < tasks.num_tasks(); ++task) bytes += tasks.memory_bytes(task);
    return bytes;
  };
  EXPECT_EQ(total(MemoryModel::kParametersAndActivations), parameters + activations);
  EXPECT_EQ(total(MemoryModel::kEverythingWritten), parameters + activations + gradients);
}

}  // namespace
}  // namespace placer::baselines
