// The simulator as a specification: hand-computed schedules under a cost model with fixed op and
// link times, the executor's rules (rank priority, copies by the sender, step-start pushes,
// memory), the lower bound, the roofline and profiled cost models, and the all-reduce formula.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/ir.h"
#include "graph/models.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "graph/training_step.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulated_evaluator.h"
#include "runtime/sim/simulator.h"

namespace placer::sim {
namespace {

using graph::Device;
using graph::DeviceSet;
using graph::DeviceType;
using graph::Graph;
using graph::ModelBuilder;
using graph::OpId;
using graph::Placement;
using graph::TensorId;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kCpu0[] = "cpu:0";
constexpr char kCpu1[] = "cpu:1";
constexpr char kCuda0[] = "cuda:0";

Device Cpu(int index, int64_t capacity = 0) {
  return {.name = "cpu:" + std::to_string(index),
          .type = DeviceType::kCpu,
          .index = index,
          .memory_capacity = capacity};
}
Device Cuda(int index) {
  return {.name = "cuda:" + std::to_string(index), .type = DeviceType::kCuda, .index = index};
}

std::vector<std::string> Names(const DeviceSet& devices) {
  std::vector<std::string> names;
  for (const Device& d : devices) names.push_back(d.name);
  return names;
}

// Fixed op times by op name (others take `default_seconds`) and one link for every channel, its
// receive cost included; CPU workers read the minibatch for free, as in the executor.
class FixedCostModel : public CostModel {
 public:
  FixedCostModel(std::map<std::string, double> op_seconds, LinkSpec link,
                 double default_seconds = 1, ContentionSpec contention = {})
      : op_seconds_(std::move(op_seconds)),
        link_(link),
        default_seconds_(default_seconds),
        contention_(contention) {}

  double OpSeconds(const Graph& graph, OpId op, const Device&) const override {
    auto it = op_seconds_.find(graph.op(op).name);
    return it == op_seconds_.end() ? default_seconds_ : it->second;
  }
  double TransferSeconds(int64_t bytes, const Device* from, const Device& to) const override {
    if (from == nullptr && to.type == DeviceType::kCpu) return 0;
    return link_.Seconds(bytes);
  }
  double CollectiveHopSeconds(int64_t bytes, const Device&, const Device&) const override {
    return link_.CollectiveHopSeconds(bytes);
  }
  double ReceiveSecondsPerByte(const Device&, const Device&) const override {
    return link_.receive_seconds_per_byte;
  }
  double ContentionFactor(const Device&, int busy) const override {
    return contention_.Factor(busy);
  }

 private:
  std::map<std::string, double> op_seconds_;
  LinkSpec link_;
  double default_seconds_;
  ContentionSpec contention_;
};

// Forward ops on the named devices (by index into `devices`); the rest of the step follows.
Placement Place(const Graph& graph, const DeviceSet& devices,
                const std::map<std::string, int>& device_of, int default_device = 0) {
  Placement placement = Placement::AllOn(graph, Names(devices), default_device);
  for (const auto& [name, device] : device_of) {
    placement.device_of_op.at(static_cast<size_t>(*graph.FindOp(name))) = device;
  }
  return placement;
}

// Events of `lane` as (name, start, duration) in microseconds.
struct Span {
  std::string name;
  double start_us, duration_us;
  bool operator==(const Span&) const = default;
};
std::ostream& operator<<(std::ostream& os, const Span& s) {
  return os << s.name << "@[" << s.start_us << ", +" << s.duration_us << "]";
}
std::vector<Span> Lane(const SimulationResult& result, const std::string& lane) {
  std::vector<Span> spans;
  for (const graph::TraceEvent& e : result.trace) {
    if (e.lane == lane) spans.push_back({e.name, e.start_us, e.duration_us});
  }
  std::sort(spans.begin(), spans.end(),
            [](const Span& a, const Span& b) { return a.start_us < b.start_us; });
  return spans;
}

// Every tensor of these hand-made graphs is 4 floats, 16 bytes; a link of latency 0.5 s and
// 1/16 s per byte moves one in 1.5 s.
constexpr LinkSpec kOneAndAHalfSecondLink{.seconds_per_byte = 1.0 / 16, .latency_seconds = 0.5};

// x (minibatch) -> a -> b -> c, each a Relu.
Graph Chain() {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  b.Relu("c", b.Relu("b", b.Relu("a", x)));
  return g;
}

TEST(SimulatorTest, AChainOnOneDeviceTakesTheSumOfItsOpTimes) {
  Graph g = Chain();
  DeviceSet devices = {Cpu(0)};
  FixedCostModel costs({{"a", 1}, {"b", 2}, {"c", 3}}, kOneAndAHalfSecondLink);
  Simulator simulator(g, devices, costs);
  SimulationResult r = simulator.Simulate(Place(g, devices, {}), /*record_trace=*/true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_DOUBLE_EQ(r.step_seconds, 6);
  EXPECT_THAT(r.busy_seconds, ElementsAre(6));
  EXPECT_TRUE(r.transfers.empty());
  EXPECT_THAT(Lane(r, kCpu0),
              ElementsAre(Span{"a", 0, 1e6}, Span{"b", 1e6, 2e6}, Span{"c", 3e6, 3e6}));
}

TEST(SimulatorTest, AChainSplitOverTwoDevicesPaysOneTransferPerCrossing) {
  Graph g = Chain();
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({{"a", 1}, {"b", 2}, {"c", 3}}, kOneAndAHalfSecondLink);
  Simulator simulator(g, devices, costs);
  SimulationResult r = simulator.Simulate(Place(g, devices, {{"b", 1}}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // a [0,1]; cpu:0 clones a to cpu:1 [1,2.5]; b [2.5,4.5]; cpu:1 clones b back [4.5,6]; c [6,9].
  EXPECT_DOUBLE_EQ(r.step_seconds, 1 + 2 + 3 + 2 * 1.5);
  // A worker's clones count as part of the op that produced the value, as in the executor.
  EXPECT_THAT(r.busy_seconds, ElementsAre(1 + 1.5 + 3, 2 + 1.5));
  ASSERT_EQ(r.transfers.size(), 2u);
  EXPECT_EQ(r.transfers[0].from, 0);
  EXPECT_EQ(r.transfers[0].to, 1);
  EXPECT_EQ(r.transfers[0].count, 1);
  EXPECT_EQ(r.transfers[0].bytes, 16);
  EXPECT_DOUBLE_EQ(r.transfers[0].seconds, 1.5);
  EXPECT_EQ(r.transfers[1].from, 1);
  EXPECT_EQ(r.transfers[1].to, 0);
  EXPECT_THAT(Lane(r, "cpu:0->cpu:1"), ElementsAre(Span{"a", 1e6, 1.5e6}));
  EXPECT_THAT(Lane(r, "cpu:1->cpu:0"), ElementsAre(Span{"b", 4.5e6, 1.5e6}));
  EXPECT_THAT(Lane(r, kCpu0), ElementsAre(Span{"a", 0, 2.5e6}, Span{"c", 6e6, 3e6}));
  EXPECT_THAT(Lane(r, kCpu1), ElementsAre(Span{"b", 2.5e6, 3.5e6}));
}

// A ring collective's hop (produced and read by ops tagged graph::kCollectiveHop) moves inside the
// collective library's running kernel: it pays the link's collective step latency, not a copy's.
TEST(SimulatorTest, ARingCollectivesHopPaysTheCollectiveStepLatencyAndACopyTheLinksLatency) {
  Graph g = Chain();
  for (const char* name : {"a", "b"}) {
    g.mutable_op(*g.FindOp(name)).attrs.Set(std::string(graph::kCollectiveHop), int64_t{1});
  }
  DeviceSet devices = {Cpu(0), Cpu(1)};
  LinkSpec link = kOneAndAHalfSecondLink;
  link.collective_step_seconds = 0.25;
  FixedCostModel costs({{"a", 1}, {"b", 2}, {"c", 3}}, link);
  SimulationResult r =
      Simulator(g, devices, costs).Simulate(Place(g, devices, {{"b", 1}}), /*record_trace=*/true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // a [0,1]; the hop a -> cpu:1 [1,2.25]; b [2.25,4.25]; b's copy back to c [4.25,5.75]; c.
  EXPECT_THAT(Lane(r, "cpu:0->cpu:1"), ElementsAre(Span{"a", 1e6, 1.25e6}));
  EXPECT_THAT(Lane(r, "cpu:1->cpu:0"), ElementsAre(Span{"b", 4.25e6, 1.5e6}));
  EXPECT_DOUBLE_EQ(r.step_seconds, 1 + 1.25 + 2 + 1.5 + 3);
}

TEST(LinkSpecTest, AHopWithoutACollectiveStepLatencyCostsACopy) {
  EXPECT_DOUBLE_EQ(kOneAndAHalfSecondLink.CollectiveHopSeconds(16), 1.5);
  const LinkSpec nvlink = LinkPresets::Nvlink();
  EXPECT_DOUBLE_EQ(nvlink.CollectiveHopSeconds(0), 3.4e-6);  // NCCL's Ring/Simple NVLink step
  EXPECT_DOUBLE_EQ(nvlink.Seconds(1 << 20) - nvlink.CollectiveHopSeconds(1 << 20),
                   nvlink.latency_seconds - 3.4e-6);
}

TEST(SimulatorTest, AnOpReadingATensorFromAnotherDevicePaysTheLinksReceiveCost) {
  Graph g = Chain();
  DeviceSet devices = {Cpu(0), Cpu(1)};
  LinkSpec link = kOneAndAHalfSecondLink;
  link.receive_seconds_per_byte = 1.0 / 16;  // 1 s for a tensor of 16 bytes
  FixedCostModel costs({{"a", 1}, {"b", 2}, {"c", 3}}, link);
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {{"b", 1}}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // a [0,1]; clone [1,2.5]; b reads a's copy: 2 + 1 [2.5,5.5]; clone back [5.5,7]; c 3 + 1.
  EXPECT_DOUBLE_EQ(r.step_seconds, 11);
  EXPECT_THAT(r.busy_seconds, ElementsAre(1 + 1.5 + 4, 3 + 1.5));
  EXPECT_THAT(Lane(r, kCpu1), ElementsAre(Span{"b", 2.5e6, 4.5e6}));
  // The same ops on one device pay nothing: their inputs never crossed, and the minibatch is read
  // where it lies.
  EXPECT_DOUBLE_EQ(Simulator(g, devices, costs).Simulate(Place(g, devices, {}, 1)).step_seconds, 6);
}

TEST(SimulatorTest, OnlyTheInputsThatCrossedPayTheReceiveCost) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  b.Apply("join", graph::op_types::kAdd, {b.Relu("left", x), b.Relu("right", x)});
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs(
      {{"left", 2}, {"right", 3}, {"join", 1}},
      {.seconds_per_byte = 0, .latency_seconds = 1.5, .receive_seconds_per_byte = 0.5 / 16});
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {{"right", 1}}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // join reads left on its own device and right's copy: 1 + 0.5, after right [0,3] + copy 1.5.
  EXPECT_DOUBLE_EQ(r.step_seconds, 3 + 1.5 + 1.5);
}

TEST(SimulatorTest, ForkJoinBranchesOverlapOnTwoDevices) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  b.Apply("join", graph::op_types::kAdd, {b.Relu("left", x), b.Relu("right", x)});
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({{"left", 2}, {"right", 3}, {"join", 1}}, kOneAndAHalfSecondLink);
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {{"right", 1}}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // Both workers read the minibatch in place at 0; join waits for right's copy.
  EXPECT_DOUBLE_EQ(r.step_seconds, std::max(2.0, 3.0 + 1.5) + 1);
  // Serially it would take 2 + 3 + 1.
  SimulationResult serial = Simulator(g, devices, costs).Simulate(Place(g, devices, {}));
  EXPECT_DOUBLE_EQ(serial.step_seconds, 6);
}

// Two CPU workers busy at once each run at 1 / 1.5 of their speed alone.
constexpr ContentionSpec kHalfAgainSlower{.devices = 2, .slowdown = 1.5};

TEST(SimulatorTest, DevicesOfOneKindSlowEachOtherDownWhileTheyOverlap) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  b.Apply("join", graph::op_types::kAdd, {b.Relu("left", x), b.Relu("right", x)});
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({{"left", 2}, {"right", 3}, {"join", 1}}, kOneAndAHalfSecondLink, 1,
                       kHalfAgainSlower);
  SimulationResult r =
      Simulator(g, devices, costs).Simulate(Place(g, devices, {{"right", 1}}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // Both start at 0, both slowed: left's 2 s alone take [0,3]. By then right has done 3 / 1.5 = 2
  // of its 3 s; alone from then on, it ends at 4. cpu:1 clones it to cpu:0 while cpu:0 idles:
  // 1.5 s alone [4,5.5]; join runs alone [5.5,6.5].
  EXPECT_DOUBLE_EQ(r.step_seconds, 6.5);
  EXPECT_THAT(Lane(r, kCpu0), ElementsAre(Span{"left", 0, 3e6}, Span{"join", 5.5e6, 1e6}));
  EXPECT_THAT(Lane(r, kCpu1), ElementsAre(Span{"right", 0, 5.5e6}));
  EXPECT_THAT(Lane(r, "cpu:1->cpu:0"), ElementsAre(Span{"right", 4e6, 1.5e6}));
  EXPECT_THAT(r.busy_seconds, ElementsAre(3 + 1, 4 + 1.5));
  // Without the slowdown: max(2, 3 + 1.5) + 1.
  FixedCostModel alone_costs({{"left", 2}, {"right", 3}, {"join", 1}}, kOneAndAHalfSecondLink);
  EXPECT_DOUBLE_EQ(
      Simulator(g, devices, alone_costs).Simulate(Place(g, devices, {{"right", 1}})).step_seconds,
      5.5);
  // The same ops on one worker never overlap anything: 2 + 3 + 1, as without contention.
  EXPECT_DOUBLE_EQ(Simulator(g, devices, costs).Simulate(Place(g, devices, {})).step_seconds, 6);
}

TEST(SimulatorTest, OnlyDevicesOfTheSameKindSlowEachOtherDown) {
  // left on cpu:0 [0,5] overlaps cuda:0's work from 0 to 6 (x copied in [0,1.5], right
  // [1.5,4.5], right's output to cpu:0 on cuda:0's stream [4.5,6]) and is not slowed by it: join
  // runs [6,7]. (cpu:1 idles; with it busy, cpu:0 would be slowed.)
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  b.Apply("join", graph::op_types::kAdd, {b.Relu("left", x), b.Relu("right", x)});
  DeviceSet devices = {Cpu(0), Cuda(0), Cpu(1)};
  FixedCostModel costs({{"left", 5}, {"right", 3}, {"join", 1}}, kOneAndAHalfSecondLink, 1,
                       kHalfAgainSlower);
  SimulationResult r =
      Simulator(g, devices, costs).Simulate(Place(g, devices, {{"right", 1}}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_DOUBLE_EQ(r.step_seconds, 7);
  EXPECT_THAT(Lane(r, kCpu0), ElementsAre(Span{"left", 0, 5e6}, Span{"join", 6e6, 1e6}));
}

TEST(ContentionSpecTest, GrowsLinearlyWithTheBusyDevicesUpToTheMeasuredCount) {
  const ContentionSpec spec{.devices = 3, .slowdown = 2};
  EXPECT_DOUBLE_EQ(spec.Factor(0), 1);
  EXPECT_DOUBLE_EQ(spec.Factor(1), 1);
  EXPECT_DOUBLE_EQ(spec.Factor(2), 1.5);
  EXPECT_DOUBLE_EQ(spec.Factor(3), 2);
  EXPECT_DOUBLE_EQ(spec.Factor(8), 2);  // not extrapolated beyond what was measured
}

TEST(SimulatorTest, TwoTransfersOnOneChannelAreSerialised) {
  // p and q run on cpu:0 one after the other; both outputs go to cuda:0, whose stream copies them
  // in (the CPU worker is not held up), one at a time.
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  b.Apply("sum", graph::op_types::kAdd, {b.Relu("p", x), b.Relu("q", x)});
  DeviceSet devices = {Cpu(0), Cuda(0)};
  FixedCostModel costs({{"p", 1}, {"q", 1}, {"sum", 1}},
                       {.seconds_per_byte = 0, .latency_seconds = 3});
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {{"sum", 1}}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // p [0,1], q [1,2]; copy p [1,4], copy q waits for the channel: [4,7]; sum [7,8].
  EXPECT_DOUBLE_EQ(r.step_seconds, 8);
  EXPECT_THAT(Lane(r, "cpu:0->cuda:0"), ElementsAre(Span{"p", 1e6, 3e6}, Span{"q", 4e6, 3e6}));
  EXPECT_THAT(r.busy_seconds, ElementsAre(2, 1));
  ASSERT_EQ(r.transfers.size(), 1u);
  EXPECT_EQ(r.transfers[0].count, 2);
  EXPECT_DOUBLE_EQ(r.transfers[0].seconds, 6);
}

TEST(SimulatorTest, AGpuCopiesTheMinibatchInFromHost) {
  Graph g = Chain();
  DeviceSet devices = {Cuda(0)};
  FixedCostModel costs({{"a", 1}, {"b", 1}, {"c", 1}}, kOneAndAHalfSecondLink);
  Simulator simulator(g, devices, costs);
  SimulationResult r = simulator.Simulate(Place(g, devices, {}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_DOUBLE_EQ(r.step_seconds, 1.5 + 3);
  EXPECT_THAT(Lane(r, "host->cuda:0"), ElementsAre(Span{"x", 0, 1.5e6}));
  graph::EvaluationResult e = simulator.ToEvaluationResult(r);
  ASSERT_EQ(e.transfers.size(), 1u);
  EXPECT_EQ(e.transfers[0].from, "host");
  EXPECT_EQ(e.transfers[0].to, kCuda0);
}

TEST(SimulatorTest, CopiesRunOnTheStreamTheExecutorIssuesThemOn) {
  Graph g = Chain();
  FixedCostModel costs({{"a", 1}, {"b", 1}, {"c", 1}}, kOneAndAHalfSecondLink);
  {
    // Between GPUs on the destination's stream: x in [0,1.5], a [1.5,2.5], a to cuda:1 on
    // cuda:1's stream [2.5,4], b [4,5], b to cuda:0 on cuda:0's stream [5,6.5], c [6.5,7.5].
    DeviceSet devices = {Cuda(0), Cuda(1)};
    SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {{"b", 1}}), true);
    ASSERT_TRUE(r.valid) << r.invalid_reason;
    EXPECT_DOUBLE_EQ(r.step_seconds, 7.5);
    EXPECT_THAT(r.busy_seconds, ElementsAre(2, 1));  // a copy onto a stream is not an op's time
    EXPECT_THAT(Lane(r, "cuda:0->cuda:1"), ElementsAre(Span{"a", 2.5e6, 1.5e6}));
    EXPECT_THAT(Lane(r, "cuda:1->cuda:0"), ElementsAre(Span{"b", 5e6, 1.5e6}));
  }
  {
    // From a GPU to a CPU worker on the GPU's stream, right after the op that made the value.
    DeviceSet devices = {Cuda(0), Cpu(0)};
    SimulationResult r =
        Simulator(g, devices, costs).Simulate(Place(g, devices, {{"b", 1}, {"c", 1}}), true);
    ASSERT_TRUE(r.valid) << r.invalid_reason;
    EXPECT_DOUBLE_EQ(r.step_seconds, 1.5 + 1 + 1.5 + 1 + 1);
    EXPECT_THAT(r.busy_seconds, ElementsAre(1 + 1.5, 2));
    EXPECT_THAT(Lane(r, "cuda:0->cpu:0"), ElementsAre(Span{"a", 2.5e6, 1.5e6}));
  }
}

TEST(SimulatorTest, AStreamRunsCopiesAndReadyOpsInTheOrderTheyWereEnqueued) {
  // On cuda:1, long and short are ready at 1.5 (x copied in), after once long is done; p's value
  // is copied from cuda:0 onto cuda:1's stream, enqueued at 2.5 while long runs [1.5, 4.5]. The
  // stream then runs short (launched at 1.5, before the copy was enqueued), the copy (before after,
  // ready at 4.5), after and c.
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {4});
  TensorId long_out = b.Relu("long", x);
  b.Relu("short", x);
  b.Relu("after", long_out);
  TensorId p = b.Relu("p", x);
  b.Relu("c", p);
  DeviceSet devices = {Cuda(0), Cuda(1)};
  FixedCostModel costs({{"long", 3}}, kOneAndAHalfSecondLink);
  SimulationResult r =
      Simulator(g, devices, costs)
          .Simulate(Place(g, devices, {{"long", 1}, {"short", 1}, {"after", 1}, {"c", 1}}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_THAT(Lane(r, "cuda:0->cuda:1"), ElementsAre(Span{"p", 5.5e6, 1.5e6}));
  EXPECT_THAT(Lane(r, "cuda:1"), ElementsAre(Span{"long", 1.5e6, 3e6}, Span{"short", 4.5e6, 1e6},
                                             Span{"after", 7e6, 1e6}, Span{"c", 8e6, 1e6}));
  EXPECT_DOUBLE_EQ(r.step_seconds, 9);
}

TEST(SimulatorTest, AnOpWithoutInputsIsReadyFromTheStart) {
  Graph g;
  TensorId out = g.AddTensor({.name = "out", .shape = {4}});
  g.AddOp({.name = "source", .type = graph::op_types::kRelu, .outputs = {out}});
  DeviceSet devices = {Cpu(0)};
  FixedCostModel costs({{"source", 2}}, kOneAndAHalfSecondLink);
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_DOUBLE_EQ(r.step_seconds, 2);
}

TEST(SimulatorTest, RejectsACostModelThatGivesANegativeTime) {
  Graph g = Chain();
  FixedCostModel costs({{"b", -1}}, kOneAndAHalfSecondLink);
  EXPECT_THAT([&] { Simulator(g, {Cpu(0)}, costs); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("op 'b' on cpu:0")));
}

TEST(SimulatorTest, AWorkerRunsTheReadyOpEarliestInTopologicalOrder) {
  // Op ids: q = 0 reads t, which p = 1 produces; r = 2 reads the minibatch. The topological order
  // is p, q, r: q runs before r although r was ready first and p has the larger id.
  Graph g;
  TensorId x = g.AddTensor({.name = "x", .shape = {4}, .kind = graph::TensorKind::kInput});
  TensorId t = g.AddTensor({.name = "t", .shape = {4}});
  TensorId u = g.AddTensor({.name = "u", .shape = {4}});
  TensorId v = g.AddTensor({.name = "v", .shape = {4}});
  g.AddOp({.name = "q", .type = graph::op_types::kRelu, .inputs = {t}, .outputs = {u}});
  g.AddOp({.name = "p", .type = graph::op_types::kRelu, .inputs = {x}, .outputs = {t}});
  g.AddOp({.name = "r", .type = graph::op_types::kRelu, .inputs = {x}, .outputs = {v}});
  DeviceSet devices = {Cpu(0)};
  FixedCostModel costs({{"p", 1}, {"q", 2}, {"r", 4}}, kOneAndAHalfSecondLink);
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_THAT(Lane(r, kCpu0),
              ElementsAre(Span{"p", 0, 1e6}, Span{"q", 1e6, 2e6}, Span{"r", 3e6, 4e6}));
}

TEST(SimulatorTest, ParametersReadElsewhereArePushedByTheirOwnerAtTheStepStart) {
  // l1 owns w and bias (it reads them first) and runs on cpu:0; l2 reads them on cpu:1.
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {2, 4});
  b.Linear("l1", x, 3, 0.1);
  b.Apply("l2", graph::op_types::kLinear,
          {x, g.TensorByName("l1.weight"), g.TensorByName("l1.bias")});
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({{"l1", 2}, {"l2", 2}}, {.seconds_per_byte = 0, .latency_seconds = 1});
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {{"l2", 1}}), true);
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // cpu:0 clones weight [0,1] and bias [1,2], then runs l1 [2,4]; l2 runs [2,4] on cpu:1.
  EXPECT_DOUBLE_EQ(r.step_seconds, 4);
  EXPECT_THAT(Lane(r, "cpu:0->cpu:1"),
              ElementsAre(Span{"l1.weight", 0, 1e6}, Span{"l1.bias", 1e6, 1e6}));
  EXPECT_THAT(r.busy_seconds, ElementsAre(2, 2));  // step-start pushes are not an op's time
}

// x {2,4} -> fc (Linear, 3) -> loss with labels {2}, and its training step: loss.backward,
// fc.backward, and the updates of fc.weight and fc.bias.
Graph TinyTrainingStep() {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {2, 4});
  TensorId labels = b.Input("labels", {2}, graph::DType::kInt64, graph::TensorKind::kLabel);
  b.SoftmaxCrossEntropy("loss", b.Linear("fc", x, 3, 0.1), labels);
  graph::AppendBackwardAndUpdate(g, 0.1);
  g.Validate();
  return g;
}

TEST(SimulatorTest, PeakMemoryFollowsTheExecutorsAccounting) {
  Graph g = TinyTrainingStep();
  // Bytes: x 32, labels 16, weight 48, bias 12, fc 24, loss 4, and gradients of the same sizes.
  // On one device, in topological order (time does not matter, the order does):
  //   start             params 60 resident, x and labels read in place: 60 + 32 + 16 = 108
  //   fc                + fc 24 = 132 (x is still read by fc.backward)
  //   loss              + loss 4 = 136 (fc and labels are still read by loss.backward)
  //   loss.backward     + fc.grad 24 = 160, then fc and labels are released: 120
  //   fc.backward       + weight.grad 48 + bias.grad 12 = 180 (the peak), then fc.grad and x: 124
  //   the two updates   release the parameter gradients: 64 (the loss, nobody reads it, stays)
  DeviceSet devices = {Cpu(0)};
  FixedCostModel costs({}, kOneAndAHalfSecondLink);
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_THAT(r.peak_memory_bytes, ElementsAre(180));
  EXPECT_DOUBLE_EQ(r.step_seconds, g.num_ops());

  DeviceSet exactly_enough = {Cpu(0, 180)};
  EXPECT_TRUE(Simulator(g, exactly_enough, costs).Simulate(Place(g, devices, {})).valid);

  DeviceSet one_byte_short = {Cpu(0, 179)};
  SimulationResult short_result =
      Simulator(g, one_byte_short, costs).Simulate(Place(g, devices, {}));
  EXPECT_FALSE(short_result.valid);
  EXPECT_EQ(short_result.invalid_reason,
            "out of memory on cpu:0: the step needs at least 180 bytes, the capacity is 179 "
            "bytes");
}

TEST(SimulatorTest, CopiesAreCountedOnTheDeviceTheyArriveAt) {
  Graph g = TinyTrainingStep();
  // fc (and with it its backward and the parameters' updates) on cpu:0, the loss on cpu:1.
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({}, kOneAndAHalfSecondLink);
  SimulationResult r = Simulator(g, devices, costs).Simulate(Place(g, devices, {{"loss", 1}}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // cpu:0: params 60 + x 32 = 92; + fc 24 = 116, which stays (only cpu:1 reads it); fc.grad
  // arrives: 140; fc.backward adds 60: 200, the peak.
  // cpu:1: labels 16; fc arrives: 40; + loss 4 = 44; + fc.grad 24 = 68, the peak.
  EXPECT_THAT(r.peak_memory_bytes, ElementsAre(200, 68));
}

TEST(SimulatorTest, AnOpsInputsAreReleasedOnlyAfterItsWorkersCopies) {
  // x {1,1,4,4} (64 bytes) -> a (cpu:0) -> b (cpu:1); x -> c (cpu:1) -> d, a 2x2 pool (16
  // bytes), on cpu:0. Every copy takes 1.5 s.
  Graph g;
  ModelBuilder builder(g);
  TensorId x = builder.Input("x", {1, 1, 4, 4});
  builder.Relu("b", builder.Relu("a", x));
  graph::Attributes pool;
  pool.Set("kernel", std::vector<int64_t>{2, 2});
  pool.Set("stride", std::vector<int64_t>{2, 2});
  builder.Apply("d", graph::op_types::kAvgPool2d, {builder.Relu("c", x)}, pool);
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({{"a", 1}, {"c", 0.5}}, {.seconds_per_byte = 0, .latency_seconds = 1.5});
  SimulationResult r =
      Simulator(g, devices, costs).Simulate(Place(g, devices, {{"b", 1}, {"c", 1}}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  // cpu:0 holds x (64) and a (64, only cpu:1 reads it); it clones a over [1, 2.5] while c's
  // output arrives from cpu:1 at 2: x is released only when a's clone is done, as the executor
  // releases inputs after RunOp, so 64 + 64 + 64 = 192 at 2. (Releasing x when a itself ends
  // would give a peak of 64 + 64 + 16 = 144, while d runs.)
  EXPECT_EQ(r.peak_memory_bytes[0], 192);
}

TEST(SimulatorTest, SameInputsGiveTheSameResult) {
  Graph g = graph::BuildLeNet({});
  DeviceSet devices = {Cpu(0), Cpu(1)};
  RooflineCostModel costs;
  Simulator simulator(g, devices, costs);
  Placement p = Place(g, devices, {{"conv2", 1}, {"fc1", 1}});
  SimulationResult first = simulator.Simulate(p, true);
  SimulationResult second = simulator.Simulate(p, true);
  EXPECT_EQ(first.step_seconds, second.step_seconds);
  EXPECT_EQ(first.trace.size(), second.trace.size());
}

TEST(SimulatorTest, OneDeviceRunsTheWholeStepBackToBack) {
  Graph g = graph::BuildLeNet({});
  DeviceSet devices = {Cpu(0)};
  RooflineCostModel costs;
  Simulator simulator(g, devices, costs);
  SimulationResult r = simulator.Simulate(Place(g, devices, {}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  double total = 0;
  for (OpId id = 0; id < g.num_ops(); ++id) total += simulator.OpSeconds(id, 0);
  EXPECT_NEAR(r.step_seconds, total, 1e-12 * total);
  EXPECT_TRUE(r.transfers.empty());
}

TEST(SimulatorTest, RejectsAPlacementForOtherDevices) {
  Graph g = Chain();
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({}, kOneAndAHalfSecondLink);
  Simulator simulator(g, devices, costs);
  Placement wrong = Placement::AllOn(g, {kCpu0}, 0);
  EXPECT_THROW(simulator.Simulate(wrong), std::invalid_argument);
  Placement unplaced = Place(g, devices, {{"b", 7}});
  EXPECT_THROW(simulator.Simulate(unplaced), graph::GraphError);
}

TEST(LowerBoundTest, EqualsTheStepTimeOfAChainOnOneDevice) {
  Graph g = Chain();
  DeviceSet devices = {Cpu(0)};
  FixedCostModel costs({{"a", 1}, {"b", 2}, {"c", 3}}, kOneAndAHalfSecondLink);
  LowerBoundResult bound = LowerBound(g, devices, costs);
  EXPECT_DOUBLE_EQ(bound.critical_path_seconds, 6);
  EXPECT_DOUBLE_EQ(bound.work_per_device_seconds, 6);
  EXPECT_DOUBLE_EQ(bound.longest_op_seconds, 3);
  EXPECT_DOUBLE_EQ(bound.seconds,
                   Simulator(g, devices, costs).Simulate(Place(g, devices, {})).step_seconds);
}

TEST(LowerBoundTest, NeverExceedsTheSimulatedTimeOfRandomLeNetPlacements) {
  Graph g = graph::BuildLeNet({});
  DeviceSet devices = {Cpu(0), Cpu(1)};
  RooflineCostModel costs;
  SimulatedEvaluator evaluator(g, devices, costs);
  const double bound = evaluator.lower_bound().seconds;
  EXPECT_GT(bound, 0);
  std::mt19937 random(7);
  std::uniform_int_distribution<int> coin(0, 1);
  for (int trial = 0; trial < 200; ++trial) {
    Placement p = Placement::AllOn(g, Names(devices), 0);
    for (int& device : p.device_of_op) {
      if (device >= 0) device = coin(random);
    }
    graph::EvaluationResult r = evaluator.Evaluate(p);
    ASSERT_TRUE(r.valid) << r.invalid_reason;
    EXPECT_LE(bound, r.step_seconds) << "trial " << trial;
  }
}

TEST(SimulatedEvaluatorTest, ReportsOneSampleWithNamedDevicesAndChannels) {
  Graph g = Chain();
  DeviceSet devices = {Cpu(0), Cpu(1)};
  FixedCostModel costs({{"a", 1}, {"b", 2}, {"c", 3}}, kOneAndAHalfSecondLink);
  SimulatedEvaluator evaluator(g, devices, costs, {.record_trace = true});
  EXPECT_EQ(evaluator.name(), "simulated");
  graph::EvaluationResult r = evaluator.Evaluate(Place(g, devices, {{"b", 1}}));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_DOUBLE_EQ(r.step_seconds, 9);
  EXPECT_DOUBLE_EQ(r.min_seconds, 9);
  EXPECT_DOUBLE_EQ(r.max_seconds, 9);
  EXPECT_THAT(r.step_samples, ElementsAre(9));
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_EQ(r.devices[1].device, kCpu1);
  EXPECT_DOUBLE_EQ(r.devices[1].busy_seconds, 3.5);
  EXPECT_EQ(r.devices[1].peak_memory_bytes, 32);  // a arrives, b is produced, then a goes
  ASSERT_EQ(r.transfers.size(), 2u);
  EXPECT_EQ(r.transfers[0].from, kCpu0);
  EXPECT_EQ(r.transfers[0].to, kCpu1);
  EXPECT_EQ(r.transfers[0].bytes, 16);
  EXPECT_EQ(r.trace.size(), 5u);  // three ops and two copies
  EXPECT_DOUBLE_EQ(evaluator.lower_bound().seconds, 6);
}

TEST(SimulatedEvaluatorTest, ABadPlacementIsInvalidNotAnException) {
  Graph g = Chain();
  DeviceSet devices = {Cpu(0)};
  FixedCostModel costs({}, kOneAndAHalfSecondLink);
  SimulatedEvaluator evaluator(g, devices, costs);
  graph::EvaluationResult r = evaluator.Evaluate(Placement::AllOn(g, {kCpu0, kCpu1}, 1));
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.invalid_reason, HasSubstr("differ"));
}

TEST(RooflineCostModelTest, AddsComputeAndMemoryTimeByDefaultOrTakesTheLarger) {
  Graph g = Chain();  // a Relu over 4 floats: 4 FLOPs, 16 bytes in and 16 out
  const OpId a = *g.FindOp("a");
  Device cpu = Cpu(0);
  RooflineOptions options;
  options.cpu_thread = {.peak_flops = 2, .memory_bandwidth = 8, .op_overhead_seconds = 0.25};
  RooflineCostModel sum(options);
  EXPECT_DOUBLE_EQ(sum.OpSeconds(g, a, cpu), 4.0 / 2 + 32.0 / 8 + 0.25);
  options.overlap_compute_and_memory = true;
  RooflineCostModel overlap(options);
  EXPECT_DOUBLE_EQ(overlap.OpSeconds(g, a, cpu), std::max(4.0 / 2, 32.0 / 8) + 0.25);
  // A worker with four threads computes four times as fast; its memory is no faster.
  Device wide = cpu;
  wide.threads = 4;
  EXPECT_DOUBLE_EQ(sum.OpSeconds(g, a, wide), 4.0 / 8 + 32.0 / 8 + 0.25);
  // A named device's own spec is taken as it is.
  sum.SetDeviceSpec("cpu:0", {.peak_flops = 4, .memory_bandwidth = 32, .op_overhead_seconds = 0});
  EXPECT_DOUBLE_EQ(sum.OpSeconds(g, a, cpu), 4.0 / 4 + 32.0 / 32);
}

TEST(RooflineCostModelTest, PicksTheLinkByTheKindsOfItsEnds) {
  RooflineOptions options;
  options.gpu_to_gpu = LinkPresets::Nvlink();
  RooflineCostModel model(options);
  Device cpu0 = Cpu(0), cpu1 = Cpu(1), gpu0 = Cuda(0), gpu1 = Cuda(1);
  EXPECT_EQ(model.LinkOf(&cpu0, cpu1), LinkPresets::SharedMemoryCpu());
  EXPECT_EQ(model.LinkOf(&cpu0, gpu0), LinkPresets::Pcie4());
  EXPECT_EQ(model.LinkOf(&gpu0, cpu0), LinkPresets::Pcie4());
  EXPECT_EQ(model.LinkOf(nullptr, gpu0), LinkPresets::Pcie4());
  EXPECT_EQ(model.LinkOf(&gpu0, gpu1), LinkPresets::Nvlink());
  EXPECT_DOUBLE_EQ(model.TransferSeconds(1 << 20, nullptr, cpu0), 0);  // read in place
  EXPECT_DOUBLE_EQ(model.TransferSeconds(450'000'000, &gpu0, gpu1), 1e-3 + 25e-6);
  model.SetLink("host", "cuda:0", {.seconds_per_byte = 1e-9, .latency_seconds = 1e-6});
  EXPECT_DOUBLE_EQ(model.TransferSeconds(1000, nullptr, gpu0), 1e-6 + 1e-6);
  EXPECT_THROW(model.SetDeviceSpec("cpu:0", {.peak_flops = 0, .memory_bandwidth = 1}),
               std::invalid_argument);
}

// Two hosts of two GPUs: NVLink within a host, the network between hosts (and between a CPU
// worker, on host 0, and a GPU of host 1); each GPU reads the minibatch on its own host.
TEST(RooflineCostModelTest, CrossesTheNetworkBetweenHosts) {
  RooflineOptions options;
  options.gpu_to_gpu = LinkPresets::Nvlink();
  options.gpus_per_host = 2;
  options.between_hosts = LinkPresets::Network(400, 30e-6);
  RooflineCostModel model(options);
  Device cpu0 = Cpu(0), gpu0 = Cuda(0), gpu1 = Cuda(1), gpu2 = Cuda(2), gpu3 = Cuda(3);
  EXPECT_EQ(model.HostOf(gpu1), 0);
  EXPECT_EQ(model.HostOf(gpu2), 1);
  EXPECT_EQ(model.HostOf(cpu0), 0);
  EXPECT_EQ(model.LinkOf(&gpu0, gpu1), LinkPresets::Nvlink());
  EXPECT_EQ(model.LinkOf(&gpu2, gpu3), LinkPresets::Nvlink());
  EXPECT_EQ(model.LinkOf(&gpu1, gpu2), options.between_hosts);
  EXPECT_EQ(model.LinkOf(&gpu3, gpu0), options.between_hosts);
  EXPECT_EQ(model.LinkOf(&cpu0, gpu2), options.between_hosts);
  EXPECT_EQ(model.LinkOf(nullptr, gpu2), LinkPresets::Pcie4());
  // 50 MB at 400 Gb/s: 1 ms, plus 30 us.
  EXPECT_DOUBLE_EQ(model.TransferSeconds(50'000'000, &gpu0, gpu3), 1e-3 + 30e-6);
  options.gpus_per_host = -1;
  EXPECT_THROW(RooflineCostModel{options}, std::invalid_argument);
}

// Devices of a placement across processes ("w<k>/..."): process k is on host k unless
// process_hosts maps it elsewhere; gpus_per_host does not apply to them.
TEST(RooflineCostModelTest, PutsEachProcessOnItsHost) {
  RooflineOptions options;
  options.gpus_per_host = 8;
  options.between_hosts = LinkPresets::Network(100, 40e-6);
  const Device w0 = {.name = "w0/cpu:0"}, w1 = {.name = "w1/cpu:0"},
               w1_gpu = {.name = "w1/cuda:0", .type = DeviceType::kCuda},
               w2_gpu = {.name = "w2/cuda:0", .type = DeviceType::kCuda};
  RooflineCostModel by_process(options);
  EXPECT_EQ(by_process.HostOf(w0), 0);
  EXPECT_EQ(by_process.HostOf(w1), 1);
  EXPECT_EQ(by_process.HostOf(w2_gpu), 2);
  EXPECT_EQ(by_process.LinkOf(&w0, w1), options.between_hosts);
  EXPECT_EQ(by_process.LinkOf(&w1, w1_gpu), LinkPresets::Pcie4());
  // 50 MB at 100 Gb/s: 4 ms, plus 40 us.
  EXPECT_DOUBLE_EQ(by_process.TransferSeconds(50'000'000, &w0, w1), 4e-3 + 40e-6);
  options.process_hosts = {0, 0, 1};
  RooflineCostModel mapped(options);
  EXPECT_EQ(mapped.HostOf(w1), 0);
  EXPECT_EQ(mapped.LinkOf(&w0, w1), LinkPresets::SharedMemoryCpu());
  EXPECT_EQ(mapped.LinkOf(&w1_gpu, w2_gpu), options.between_hosts);
  options.process_hosts = {0};
  RooflineCostModel short_list(options);
  EXPECT_THROW(short_list.HostOf(w1), std::invalid_argument);
  options.process_hosts = {0, -1};
  EXPECT_THROW(RooflineCostModel{options}, std::invalid_argument);
}

// A LeNet split over two processes (convolutions in process 0, the rest in process 1): the
// activations and their gradients cross the network between the processes' hosts, each transfer
// taking the link's latency plus its bytes at the link's rate, as computed by hand here.
TEST(SimulatorTest, PricesACrossingBetweenProcessesAsTheNetwork) {
  const DeviceSet devices = {{.name = "w0/cpu:0"}, {.name = "w1/cpu:0"}};
  graph::Graph g = graph::BuildLeNet({.batch_size = 32});
  Placement placement = Placement::AllOn(g, Names(devices), 0);
  for (const char* op : {"fc1", "relu3", "fc2", "loss"}) {
    placement.device_of_op[static_cast<size_t>(*g.FindOp(op))] = 1;
  }
  RooflineOptions options;
  options.between_hosts = LinkPresets::Network(100, 40e-6);
  RooflineCostModel costs(options);
  SimulationResult result = Simulator(g, devices, costs).Simulate(placement);
  ASSERT_TRUE(result.valid) << result.invalid_reason;
  int crossings = 0;
  for (const ChannelStats& channel : result.transfers) {
    if (channel.from == kHost) continue;
    ++crossings;
    ASSERT_GT(channel.count, 0);
    // 100 Gb/s = 12.5 GB/s per direction.
    const double by_hand = channel.count * 40e-6 + static_cast<double>(channel.bytes) / 12.5e9;
    EXPECT_NEAR(channel.seconds, by_hand, 1e-12)
        << channel.from << " -> " << channel.to << ": " << channel.bytes << " bytes";
  }
  EXPECT_EQ(crossings, 2);  // activations forward, their gradient back
  // The same placement with both processes on one host copies in shared memory: faster.
  options.process_hosts = {0, 0};
  RooflineCostModel one_host(options);
  SimulationResult shared = Simulator(g, devices, one_host).Simulate(placement);
  ASSERT_TRUE(shared.valid) << shared.invalid_reason;
  EXPECT_LT(shared.step_seconds, result.step_seconds);
}

TEST(CostModelTest, FitsALinkFromTimedTransfers) {
  // 2 us latency, 10 GB/s.
  std::vector<TransferSample> samples;
  for (int64_t bytes : {1'000, 100'000, 10'000'000}) {
    samples.push_back({bytes, 2e-6 + static_cast<double>(bytes) / 10e9});
  }
  LinkSpec link = FitLinkSpec(samples);
  EXPECT_NEAR(link.seconds_per_byte, 1e-10, 1e-16);
  EXPECT_NEAR(link.latency_seconds, 2e-6, 1e-12);
  EXPECT_THROW(FitLinkSpec({{1000, 1e-6}, {1000, 2e-6}}), std::invalid_argument);
}

TEST(CostModelTest, RingAllReduceFollowsTheFormula) {
  const LinkSpec link{.seconds_per_byte = 1e-3, .latency_seconds = 0.5};
  // 2(n-1)/n * bytes * a + 2(n-1) * b with n = 4.
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(1000, 4, link), 2.0 * 3 / 4 * 1000 * 1e-3 + 2.0 * 3 * 0.5);
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(1000, 2, link), 1000 * 1e-3 + 2 * 0.5);
  EXPECT_DOUBLE_EQ(RingAllReduceSeconds(1000, 1, link), 0);
}

class ProfiledCostModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("sim_test_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path Write(const std::string& name, const std::string& text) {
    std::filesystem::path file = dir_ / name;
    std::ofstream(file) << text;
    return file;
  }
  std::filesystem::path dir_;
};

TEST_F(ProfiledCostModelTest, RoundTripsThroughJson) {
  ProfiledCostModel model;
  model.metadata() = {.model = "lenet",
                      .libtorch_version = "2.11.0",
                      .date = "2025-06-01T12:00:00Z",
                      .devices = {{"cpu:0", "cpu, 1 thread"}, {"cuda:0", "NVIDIA H200"}}};
  model.SetOpSeconds("conv1", "cpu:0", 1.25e-3);
  model.SetOpSeconds("conv1", "cuda:0", 2.5e-5);
  model.SetLink("host", "cuda:0", {.seconds_per_byte = 4e-11, .latency_seconds = 8e-6});
  model.SetLink(
      "cpu:0", "cuda:0",
      {.seconds_per_byte = 5e-11, .latency_seconds = 9e-6, .receive_seconds_per_byte = 1e-10});
  model.SetContention(DeviceType::kCpu, {.devices = 2, .slowdown = 1.25});
  const std::filesystem::path file = dir_ / "profile.json";
  model.Save(file);

  ProfiledCostModel loaded = ProfiledCostModel::Load(file);
  EXPECT_EQ(loaded.metadata(), model.metadata());
  EXPECT_EQ(loaded.num_op_entries(), 2u);
  EXPECT_EQ(loaded.FindOpSeconds("conv1", "cpu:0"), 1.25e-3);
  EXPECT_EQ(loaded.FindOpSeconds("conv1", "cuda:0"), 2.5e-5);
  EXPECT_EQ(loaded.FindLink("host", "cuda:0"),
            (LinkSpec{.seconds_per_byte = 4e-11, .latency_seconds = 8e-6}));
  EXPECT_EQ(loaded.FindLink("cpu:0", "cuda:0"), (LinkSpec{.seconds_per_byte = 5e-11,
                                                          .latency_seconds = 9e-6,
                                                          .receive_seconds_per_byte = 1e-10}));
  EXPECT_EQ(loaded.FindContention(DeviceType::kCpu),
            (ContentionSpec{.devices = 2, .slowdown = 1.25}));
  EXPECT_EQ(loaded.FindContention(DeviceType::kCuda), std::nullopt);
  EXPECT_EQ(loaded.ToJson(), model.ToJson());

  // Measured where there is an entry, the roofline fallback elsewhere.
  Graph g = graph::BuildLeNet({});
  Device cpu = Cpu(0), gpu = Cuda(0);
  EXPECT_DOUBLE_EQ(loaded.OpSeconds(g, *g.FindOp("conv1"), cpu), 1.25e-3);
  const OpId conv2 = *g.FindOp("conv2");
  EXPECT_DOUBLE_EQ(loaded.OpSeconds(g, conv2, cpu), loaded.fallback().OpSeconds(g, conv2, cpu));
  EXPECT_DOUBLE_EQ(loaded.TransferSeconds(1'000'000, nullptr, gpu), 8e-6 + 4e-5);
  EXPECT_DOUBLE_EQ(loaded.TransferSeconds(1'000'000, &cpu, gpu), 9e-6 + 5e-5);
  EXPECT_DOUBLE_EQ(loaded.ReceiveSecondsPerByte(cpu, gpu), 1e-10);
  Device cpu1 = Cpu(1);
  EXPECT_DOUBLE_EQ(loaded.TransferSeconds(1'000'000, &cpu, cpu1),
                   loaded.fallback().TransferSeconds(1'000'000, &cpu, cpu1));
  EXPECT_DOUBLE_EQ(loaded.ReceiveSecondsPerByte(cpu, cpu1), 0);
  // The CPU workers' contention, and none measured among GPUs.
  EXPECT_DOUBLE_EQ(loaded.ContentionFactor(cpu, 1), 1);
  EXPECT_DOUBLE_EQ(loaded.ContentionFactor(cpu, 2), 1.25);
  EXPECT_DOUBLE_EQ(loaded.ContentionFactor(gpu, 2), 1);
}

TEST_F(ProfiledCostModelTest, AProfileWithoutReceiveCostsReadsThemAsZero) {
  // Profiles written before the receive cost existed.
  const std::filesystem::path file = Write("older.json", R"({
    "version": 1, "model": "lenet", "libtorch_version": "2.11.0", "date": "2025-06-01",
    "devices": [{"name": "cpu:0", "type": "cpu"}, {"name": "cpu:1", "type": "cpu"}],
    "ops": [],
    "links": [{"from": "cpu:0", "to": "cpu:1", "seconds_per_byte": 1e-10, "latency_seconds": 1e-6}]
  })");
  ProfiledCostModel loaded = ProfiledCostModel::Load(file);
  EXPECT_EQ(loaded.FindLink("cpu:0", "cpu:1"),
            (LinkSpec{.seconds_per_byte = 1e-10, .latency_seconds = 1e-6}));
  // Nor contention: its devices run as they were timed, alone.
  EXPECT_EQ(loaded.FindContention(DeviceType::kCpu), std::nullopt);
  EXPECT_DOUBLE_EQ(loaded.ContentionFactor(Cpu(0), 2), 1);
  const std::filesystem::path negative = Write("negative.json", R"({
    "version": 1, "model": "lenet", "libtorch_version": "2.11.0", "date": "2025-06-01",
    "devices": [], "ops": [],
    "links": [{"from": "cpu:0", "to": "cpu:1", "seconds_per_byte": 1e-10, "latency_seconds": 1e-6,
               "receive_seconds_per_byte": -1e-10}]
  })");
  EXPECT_THAT([&] { ProfiledCostModel::Load(negative); },
              ::testing::ThrowsMessage<ProfileError>(
                  ::testing::AllOf(HasSubstr(negative.string()), HasSubstr("links[0]"),
                                   HasSubstr("receive_seconds_per_byte"))));
}

TEST_F(ProfiledCostModelTest, ABadContentionEntryIsAnErrorNamingTheFileAndTheEntry) {
  auto with = [&](const std::string& name, const std::string& entries) {
    return Write(name, R"({
      "version": 1, "model": "lenet", "libtorch_version": "2.11.0", "date": "2025-06-01",
      "devices": [], "ops": [], "links": [],
      "contention": [)" + entries +
                           "]}");
  };
  auto error_of = [](const std::filesystem::path& file) -> std::string {
    try {
      ProfiledCostModel::Load(file);
    } catch (const ProfileError& error) {
      return error.what();
    }
    return "no error";
  };
  const std::filesystem::path missing =
      with("missing.json", R"({"device_type": "cpu", "devices": 2, "slowdown": 1.2},
                             {"device_type": "cuda", "devices": 4})");
  EXPECT_THAT(error_of(missing),
              HasSubstr(missing.string() + ": contention[1]: missing field 'slowdown'"));
  const std::filesystem::path kind =
      with("kind.json", R"({"device_type": "tpu", "devices": 2, "slowdown": 1.2})");
  EXPECT_THAT(error_of(kind), ::testing::AllOf(HasSubstr(kind.string() + ": contention[0]"),
                                               HasSubstr("device_type")));
  const std::filesystem::path one =
      with("one.json", R"({"device_type": "cpu", "devices": 1, "slowdown": 1.2})");
  EXPECT_THAT(error_of(one), ::testing::AllOf(HasSubstr(one.string() + ": contention[0]"),
                                              HasSubstr("'devices'")));
  const std::filesystem::path faster =
      with("faster.json", R"({"device_type": "cpu", "devices": 2, "slowdown": 0.5})");
  EXPECT_THAT(error_of(faster), ::testing::AllOf(HasSubstr(faster.string() + ": contention[0]"),
                                                 HasSubstr("'slowdown'")));
  const std::filesystem::path twice =
      with("twice.json", R"({"device_type": "cpu", "devices": 2, "slowdown": 1.2},
                           {"device_type": "cpu", "devices": 2, "slowdown": 1.3})");
  EXPECT_THAT(error_of(twice), ::testing::AllOf(HasSubstr(twice.string() + ": contention[1]"),
                                                HasSubstr("a second entry")));
  const std::filesystem::path mistyped =
      with("mistyped.json", R"({"device_type": "cpu", "devices": "2", "slowdown": 1.2})");
  EXPECT_THAT(error_of(mistyped),
              HasSubstr(mistyped.string() +
                        ": contention[0]: field 'devices' must be a number, found string"));
}

TEST_F(ProfiledCostModelTest, AMalformedFileIsAnErrorNamingIt) {
  const std::filesystem::path file = Write("broken.json", "{\"version\": 1, \"model\": ");
  try {
    ProfiledCostModel::Load(file);
    FAIL() << "expected a ProfileError";
  } catch (const ProfileError& error) {
    EXPECT_THAT(error.what(), HasSubstr(file.string()));
    EXPECT_THAT(error.what(), HasSubstr("malformed JSON"));
  }
}

TEST_F(ProfiledCostModelTest, AMissingFieldIsAnErrorNamingTheFileAndTheEntry) {
  const std::filesystem::path file = Write("missing.json", R"({
    "version": 1, "model": "lenet", "libtorch_version": "2.11.0", "date": "2025-06-01",
    "devices": [{"name": "cpu:0", "type": "cpu"}],
    "ops": [{"op": "conv1", "device": "cpu:0", "seconds": 0.001}, {"op": "conv2", "device": "cpu:0"}]
  })");
  EXPECT_THAT([&] { ProfiledCostModel::Load(file); },
              ::testing::ThrowsMessage<ProfileError>(
                  HasSubstr(file.string() + ": ops[1]: missing field 'seconds'")));
  const std::filesystem::path mistyped = Write("mistyped.json", R"({
    "version": 1, "model": "lenet", "libtorch_version": 2, "date": "2025-06-01",
    "devices": [], "ops": []})");
  EXPECT_THAT([&] { ProfiledCostModel::Load(mistyped); },
              ::testing::ThrowsMessage<ProfileError>(
                  HasSubstr("field 'libtorch_version' must be a string, found number")));
  EXPECT_THAT([&] { ProfiledCostModel::Load(dir_ / "absent.json"); },
              ::testing::ThrowsMessage<ProfileError>(HasSubstr("absent.json: cannot open")));
}

}  // namespace
}  // namespace placer::sim

namespace placer::sim {
namespace {

// Data parallelism is a ring all-reduce in the graph, so the simulated (and executed) step moves
// exactly a ring's bytes: every GPU sends only to its successor, 2 (R - 1) / R of the gradients.
TEST(DataParallelTest, GradientsTravelAsARingAllReduce) {
  constexpr int kReplicas = 4;
  const DeviceSet devices = {Cuda(0), Cuda(1), Cuda(2), Cuda(3)};
  graph::DataParallelGraph dp = graph::BuildDataParallel(
      [](int64_t batch, int64_t global) {
        return graph::BuildLeNet(
            {.batch_size = batch, .loss_normalizer = global, .training_step = false});
      },
      64, Names(devices), std::vector<double>(kReplicas, 1.0), 0.1);
  RooflineCostModel costs;
  Simulator simulator(dp.graph, devices, costs);
  SimulationResult result = simulator.Simulate(dp.placement);
  ASSERT_TRUE(result.valid) << result.invalid_reason;
  const double gradient_bytes = 4.0 * static_cast<double>(graph::BuildLeNet({}).ParameterCount());
  std::vector<double> sent(kReplicas, 0.0);
  for (const ChannelStats& channel : result.transfers) {
    if (channel.from == kHost) continue;  // the minibatch
    EXPECT_EQ(channel.to, (channel.from + 1) % kReplicas)
        << "cuda:" << channel.from << " sends to cuda:" << channel.to;
    sent[static_cast<size_t>(channel.from)] += static_cast<double>(channel.bytes);
  }
  for (int r = 0; r < kReplicas; ++r) {
    EXPECT_NEAR(sent[static_cast<size_t>(r)] / gradient_bytes, 2.0 * (kReplicas - 1) / kReplicas,
                0.01)
        << "cuda:" << r;
  }
}

// A data-parallel step whose two replicas sit on two hosts moves its gradients over the network:
// slower than on two GPUs of one host, and slower on 100 Gb/s than on 400 Gb/s.
TEST(DataParallelTest, ReplicasOnTwoHostsWaitForTheNetwork) {
  const DeviceSet devices = {Cuda(0), Cuda(1), Cuda(2), Cuda(3)};
  graph::DataParallelGraph dp = graph::BuildDataParallel(
      [](int64_t batch, int64_t global) {
        return graph::BuildLeNet(
            {.batch_size = batch, .loss_normalizer = global, .training_step = false});
      },
      64, {"r0", "r1"}, {1.0, 1.0}, 0.1);
  auto step_on = [&](int second_device, double gbps) {
    RooflineOptions options;
    options.gpu_to_gpu = LinkPresets::Nvlink();
    options.gpus_per_host = 2;
    options.between_hosts = LinkPresets::Network(gbps, 30e-6);
    RooflineCostModel costs(options);
    Placement placement = Placement::AllOn(dp.graph, Names(devices), 0);
    for (OpId id = 0; id < dp.graph.num_ops(); ++id) {
      int& device = placement.device_of_op[static_cast<size_t>(id)];
      if (device >= 0 && dp.graph.op(id).name.starts_with("r1/")) device = second_device;
    }
    SimulationResult result = Simulator(dp.graph, devices, costs).Simulate(placement);
    EXPECT_TRUE(result.valid) << result.invalid_reason;
    return result.step_seconds;
  };
  const double one_host = step_on(1, 400), two_hosts = step_on(2, 400), slow = step_on(2, 100);
  EXPECT_LT(one_host, two_hosts);
  EXPECT_LT(two_hosts, slow);
  EXPECT_DOUBLE_EQ(step_on(1, 100), one_host);  // within a host, the network is not used
}

}  // namespace
}  // namespace placer::sim
