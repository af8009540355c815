// The executor as a specification: under every placement, the training step computes exactly what
// a plain single-device LibTorch training step computes; failures are reported, never crashes.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <chrono>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "graph/data_parallel.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "runtime/executor.h"
#include "runtime/measured_evaluator.h"
#include "runtime/profiler.h"
#include "runtime/trace.h"
#include "tests/support.h"
#include "tests/torch_support.h"

namespace placer::runtime {
namespace {

using ::testing::HasSubstr;

using placer::test_support::CpuWorkers;

// The d2l LeNet training step written directly in LibTorch: the reference every placement must
// reproduce.
void ReferenceLeNetStep(TensorMap& p, const TensorMap& batch, double lr) {
  std::vector<std::string> names = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                    "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};
  std::vector<at::Tensor> params;
  for (const auto& name : names) params.push_back(p.at(name).detach().requires_grad_(true));
  at::Tensor h = at::conv2d(batch.at("images"), params[0], params[1]);
  h = at::avg_pool2d(at::relu(h), {2, 2}, {2, 2});
  h = at::conv2d(h, params[2], params[3]);
  h = at::avg_pool2d(at::relu(h), {2, 2}, {2, 2});
  h = at::relu(at::linear(h.flatten(1), params[4], params[5]));
  at::Tensor logits = at::linear(h, params[6], params[7]);
  at::Tensor loss = at::cross_entropy_loss(logits, batch.at("labels"));
  std::vector<at::Tensor> grads = torch::autograd::grad({loss}, params);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < names.size(); ++i) p[names[i]] = p.at(names[i]) - lr * grads[i];
}

// The parallel MLP's step, likewise.
void ReferenceMlpStep(TensorMap& p, const TensorMap& batch, const graph::ParallelMlpOptions& o) {
  std::vector<std::string> names;
  for (const auto& [name, value] : p) names.push_back(name);
  std::map<std::string, at::Tensor> w;
  std::vector<at::Tensor> leaves;
  for (const auto& name : names) {
    w[name] = p.at(name).detach().requires_grad_(true);
    leaves.push_back(w[name]);
  }
  at::Tensor sum;
  for (int64_t b = 0; b < o.branches; ++b) {
    at::Tensor h = batch.at("features");
    for (int64_t l = 0; l < o.depth; ++l) {
      std::string layer = "tower" + std::to_string(b) + ".fc" + std::to_string(l);
      h = at::relu(at::linear(h, w[layer + ".weight"], w[layer + ".bias"]));
    }
    sum = b == 0 ? h : sum + h;
  }
  at::Tensor logits = at::linear(sum, w["classifier.weight"], w["classifier.bias"]);
  at::Tensor loss = at::cross_entropy_loss(logits, batch.at("labels"));
  std::vector<at::Tensor> grads = torch::autograd::grad({loss}, leaves);
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < names.size(); ++i) {
    p[names[i]] = p.at(names[i]) - o.learning_rate * grads[i];
  }
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

void ExpectSameParameters(const TensorMap& actual, const TensorMap& expected,
                          const std::string& context) {
  test_support::ExpectSameParameters(actual, expected, context, /*atol=*/1e-6);
}

TEST(ExecutorTest, LeNetOnOneDeviceMatchesThePlainLibTorchStep) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 64});
  TensorMap initial = InitializeParameters(g, 7);
  TensorMap batch = SyntheticBatch(g, 8);
  Executor executor(g, CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0), initial);
  TensorMap reference = initial;
  for (int step = 0; step < 3; ++step) {
    StepResult r = executor.RunStep(batch);
    ReferenceLeNetStep(reference, batch, 0.2);
    EXPECT_GT(r.loss, 0.0);
  }
  ExpectSameParameters(executor.Parameters(), reference, "one device");
}

TEST(ExecutorTest, LeNetLossMatchesTheReferenceLoss) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 32});
  TensorMap initial = InitializeParameters(g, 1);
  TensorMap batch = SyntheticBatch(g, 2);
  Executor executor(g, CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0), initial);
  StepResult r = executor.RunStep(batch);
  // Ten classes and near-zero weights: the first loss is close to log(10).
  EXPECT_NEAR(r.loss, std::log(10.0), 1e-3);
}

TEST(ExecutorTest, FiftyRandomLeNetPlacementsMatchTheReference) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 16, .image_size = 28});
  TensorMap initial = InitializeParameters(g, 3);
  TensorMap batch = SyntheticBatch(g, 4);
  TensorMap reference = initial;
  for (int step = 0; step < 2; ++step) ReferenceLeNetStep(reference, batch, 0.2);
  std::mt19937 rng(11);
  for (int trial = 0; trial < 50; ++trial) {
    graph::Placement placement = RandomPlacement(g, 2, rng);
    Executor executor(g, CpuWorkers(2), placement, initial);
    for (int step = 0; step < 2; ++step) executor.RunStep(batch);
    ExpectSameParameters(executor.Parameters(), reference, "placement " + std::to_string(trial));
    if (HasFailure()) {
      ADD_FAILURE() << graph::PlacementToYaml(g, placement);
      return;
    }
  }
}

TEST(ExecutorTest, FiftyRandomBranchingPlacementsOverThreeWorkersMatchTheReference) {
  graph::ParallelMlpOptions options{
      .batch_size = 8, .in_features = 12, .width = 16, .depth = 2, .branches = 3, .classes = 5};
  graph::Graph g = graph::BuildParallelMlp(options);
  TensorMap initial = InitializeParameters(g, 5);
  TensorMap batch = SyntheticBatch(g, 6);
  TensorMap reference = initial;
  for (int step = 0; step < 2; ++step) ReferenceMlpStep(reference, batch, options);
  std::mt19937 rng(12);
  for (int trial = 0; trial < 50; ++trial) {
    graph::Placement placement = RandomPlacement(g, 3, rng);
    Executor executor(g, CpuWorkers(3), placement, initial);
    for (int step = 0; step < 2; ++step) executor.RunStep(batch);
    ExpectSameParameters(executor.Parameters(), reference, "placement " + std::to_string(trial));
    if (HasFailure()) return;
  }
}

TEST(ExecutorTest, CrossDeviceTensorsAreCopiedAndCounted) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 16});
  graph::Placement placement = graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 0);
  placement.device_of_op[static_cast<size_t>(*g.FindOp("fc1"))] = 1;
  Executor executor(g, CpuWorkers(2), placement, InitializeParameters(g, 0),
                    {.record_trace = true});
  StepResult r = executor.RunStep(SyntheticBatch(g, 0));
  // Forward: flatten's output goes to fc1 on cpu:1, fc1's output comes back to relu3 on cpu:0.
  // Backward: relu3's gradient goes to fc1's backward on cpu:1, which returns flatten's gradient.
  int64_t bytes_to_cpu1 = 0, bytes_to_cpu0 = 0;
  for (const graph::TransferStats& t : r.transfers) {
    if (t.from == "cpu:0" && t.to == "cpu:1") bytes_to_cpu1 = t.bytes;
    if (t.from == "cpu:1" && t.to == "cpu:0") bytes_to_cpu0 = t.bytes;
  }
  EXPECT_EQ(bytes_to_cpu1, 16 * 800 * 4 + 16 * 128 * 4);
  EXPECT_EQ(bytes_to_cpu0, 16 * 128 * 4 + 16 * 800 * 4);
  ASSERT_EQ(r.devices.size(), 2u);
  EXPECT_GT(r.devices[1].busy_seconds, 0.0);
  // fc1's parameters live on cpu:1.
  EXPECT_GE(r.devices[1].peak_memory_bytes, (800 * 128 + 128) * 4);

  const std::string text = ChromeTraceJson(r.trace, "test");
  nlohmann::json trace = nlohmann::json::parse(text);
  // Written event by event, it is the text of the whole document dumped at once.
  EXPECT_EQ(text, trace.dump() + "\n");
  std::set<std::string> lanes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") lanes.insert(e["args"]["name"]);
  }
  EXPECT_TRUE(lanes.count("cpu:0") && lanes.count("cpu:1") && lanes.count("cpu:0->cpu:1") &&
              lanes.count("cpu:1->cpu:0"));
}

TEST(ExecutorTest, OverCapacityIsAStepFailureNamingTheDeviceAndTheExecutorSurvives) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 16});
  graph::DeviceSet devices = CpuWorkers(2);
  devices[1].memory_capacity = 100 * 1024;  // fc1's weight alone is 400 KiB
  graph::Placement placement = graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 0);
  placement.device_of_op[static_cast<size_t>(*g.FindOp("fc2"))] = 1;
  placement.device_of_op[static_cast<size_t>(*g.FindOp("relu3"))] = 1;
  Executor executor(g, devices, placement, InitializeParameters(g, 0));
  EXPECT_NO_THROW(executor.RunStep(SyntheticBatch(g, 0)));

  placement.device_of_op[static_cast<size_t>(*g.FindOp("fc1"))] = 1;
  MeasuredEvaluator evaluator(g, devices, {.warmup_steps = 1, .timed_steps = 1});
  graph::EvaluationResult r = evaluator.Evaluate(placement);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.invalid_reason, AllOf(HasSubstr("out of memory on cpu:1"), HasSubstr("bytes")));
  // The same evaluator goes on to measure a valid placement.
  EXPECT_TRUE(evaluator.Evaluate(graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 0)).valid);
}

TEST(ExecutorTest, ActivationsOverCapacityFailMidStepAndTheExecutorCanRunAgain) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 64});
  graph::DeviceSet devices = CpuWorkers(2);
  // conv1's output (64x20x26x26 floats, 3.3 MiB) does not fit in 2 MiB.
  devices[1].memory_capacity = 2 << 20;
  graph::Placement placement = graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 1);
  Executor executor(g, devices, placement, InitializeParameters(g, 0));
  for (int attempt = 0; attempt < 2; ++attempt) {
    try {
      executor.RunStep(SyntheticBatch(g, 0));
      FAIL() << "expected an out-of-memory failure";
    } catch (const StepFailure& failure) {
      EXPECT_THAT(failure.what(), HasSubstr("out of memory on cpu:1"));
    }
  }
}

// Data parallel as in the d2l chapter: shards of the minibatch, gradients summed across replicas,
// the same update everywhere, equal to the single-device update.
void CheckDataParallelMatchesReference(const std::vector<double>& weights) {
  const int64_t batch_size = 24;
  graph::Graph single = graph::BuildLeNet({.batch_size = batch_size});
  TensorMap initial = InitializeParameters(single, 21);
  TensorMap batch = SyntheticBatch(single, 22);
  TensorMap reference = initial;
  for (int step = 0; step < 2; ++step) ReferenceLeNetStep(reference, batch, 0.2);

  std::vector<std::string> names;
  for (size_t r = 0; r < weights.size(); ++r) names.push_back("cpu:" + std::to_string(r));
  graph::DataParallelGraph dp = graph::BuildDataParallel(
      [](int64_t shard, int64_t normalizer) {
        return graph::BuildLeNet(
            {.batch_size = shard, .loss_normalizer = normalizer, .training_step = false});
      },
      batch_size, names, weights, 0.2);
  TensorMap replicated, shards;
  int64_t offset = 0;
  for (size_t r = 0; r < weights.size(); ++r) {
    const int replica = static_cast<int>(r);
    for (const auto& [name, value] : initial) replicated[graph::ReplicaName(replica, name)] = value;
    for (const auto& [name, value] : batch) {
      shards[graph::ReplicaName(replica, name)] = value.narrow(0, offset, dp.shard_sizes[r]);
    }
    offset += dp.shard_sizes[r];
  }
  Executor executor(dp.graph, CpuWorkers(static_cast<int>(weights.size())), dp.placement,
                    replicated);
  for (int step = 0; step < 2; ++step) executor.RunStep(shards);
  TensorMap trained = executor.Parameters();
  for (size_t r = 0; r < weights.size(); ++r) {
    TensorMap replica_params;
    for (const auto& [name, value] : reference) {
      replica_params[name] = trained.at(graph::ReplicaName(static_cast<int>(r), name));
    }
    ExpectSameParameters(replica_params, reference, "replica " + std::to_string(r));
  }
}

TEST(DataParallelTest, EvenShardsOverTwoWorkersMatchTheSingleDeviceUpdate) {
  CheckDataParallelMatchesReference({1, 1});
}

TEST(DataParallelTest, ProportionalShardsOverThreeWorkersMatchTheSingleDeviceUpdate) {
  CheckDataParallelMatchesReference({3, 1, 2});
}

TEST(DataParallelTest, SplitBatchIsProportionalAndComplete) {
  EXPECT_EQ(graph::SplitBatch(256, {1, 1}), (std::vector<int64_t>{128, 128}));
  EXPECT_EQ(graph::SplitBatch(10, {3, 1}), (std::vector<int64_t>{7, 3}));
  EXPECT_EQ(graph::SplitBatch(3, {100, 1, 1}), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_THROW(graph::SplitBatch(1, {1, 1}), graph::GraphError);
}

TEST(MeasuredEvaluatorTest, ReportsMedianAndSpreadOfTheTimedSteps) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 16});
  MeasuredEvaluator evaluator(g, CpuWorkers(2), {.warmup_steps = 2, .timed_steps = 5});
  graph::EvaluationResult r = evaluator.Evaluate(graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 1));
  ASSERT_TRUE(r.valid) << r.invalid_reason;
  EXPECT_EQ(r.step_samples.size(), 5u);
  EXPECT_LE(r.min_seconds, r.step_seconds);
  EXPECT_LE(r.step_seconds, r.max_seconds);
  EXPECT_GT(r.min_seconds, 0.0);
}

TEST(MeasuredEvaluatorTest, TimeLimitMakesThePlacementInvalid) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 64});
  MeasuredEvaluator evaluator(g, CpuWorkers(1),
                              {.warmup_steps = 1000, .timed_steps = 5, .time_limit_seconds = 0.05});
  graph::EvaluationResult r = evaluator.Evaluate(graph::Placement::AllOn(g, {"cpu:0"}, 0));
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.invalid_reason, HasSubstr("time limit"));
}

TEST(ProfilerTest, TimesEveryOpOnEveryWorkerAndFitsBothDirectionsFromRealCopies) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 16});
  const graph::DeviceSet devices = CpuWorkers(2);
  sim::ProfiledCostModel profile =
      ProfileDevices(g, devices, {.warmup_steps = 1, .timed_steps = 3, .model_name = "lenet"});
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    for (const graph::Device& device : devices) {
      std::optional<double> seconds = profile.FindOpSeconds(g.op(id).name, device.name);
      ASSERT_TRUE(seconds.has_value()) << g.op(id).name << " on " << device.name;
      EXPECT_GT(*seconds, 0.0) << g.op(id).name << " on " << device.name;
    }
  }
  // The alternating placement copies LeNet's activations and gradients of several sizes each way:
  // both directions are fitted, and a copy costs more the more bytes it moves.
  for (auto [from, to] : {std::pair{"cpu:0", "cpu:1"}, std::pair{"cpu:1", "cpu:0"}}) {
    std::optional<sim::LinkSpec> link = profile.FindLink(from, to);
    ASSERT_TRUE(link.has_value()) << from << "->" << to;
    EXPECT_GT(link->seconds_per_byte, 0.0) << from << "->" << to;
    EXPECT_GE(link->latency_seconds, 0.0) << from << "->" << to;
    // The ops reading the other worker's tensors ran slower than alone by some (never a negative)
    // amount per byte.
    EXPECT_GE(link->receive_seconds_per_byte, 0.0) << from << "->" << to;
    EXPECT_TRUE(std::isfinite(link->receive_seconds_per_byte)) << from << "->" << to;
  }
  // The two workers were also timed running at once: how much slower that made them (never
  // faster: a measured speed-up is noise).
  std::optional<sim::ContentionSpec> contention = profile.FindContention(graph::DeviceType::kCpu);
  ASSERT_TRUE(contention.has_value());
  EXPECT_EQ(contention->devices, 2);
  EXPECT_GE(contention->slowdown, 1.0);
  EXPECT_TRUE(std::isfinite(contention->slowdown));
  EXPECT_FALSE(profile.FindContention(graph::DeviceType::kCuda).has_value());
}

// The fit itself, on recorded times made up so that the answer is known: copies that cost
// 2 us + 1 ns per byte, and one op on the receiving worker that ran 40 us slower than alone while
// reading one tensor from the other worker. The receive cost is those 40 us over that tensor's
// bytes; with no op slower it is zero.
TEST(ProfilerTest, FitsTheReceiveCostFromTheOpsThatRanSlowerInTheCrossingStep) {
  const graph::Graph g = graph::BuildLeNet({.batch_size = 16});
  const std::vector<std::string> names = {"cpu:0", "cpu:1"};
  graph::Placement alternating = graph::Placement::AllOn(g, names, 0);
  int k = 0;
  for (graph::OpId id : g.TopologicalOrder()) {
    if (g.op(id).phase == graph::Phase::kForward) {
      alternating.device_of_op[static_cast<size_t>(id)] = k++ % 2;
    }
  }
  CrossingTimes crossing;
  crossing.device_of_op = graph::ExpandPlacement(g, alternating);
  auto device_of = [&](graph::OpId op) { return crossing.device_of_op[static_cast<size_t>(op)]; };
  // The first forward op on cpu:1 that reads a tensor cpu:0 produced; the bytes it reads so.
  std::optional<graph::OpId> slow;
  int64_t received = 0;
  for (graph::OpId id : g.TopologicalOrder()) {
    const graph::Op& op = g.op(id);
    if (op.phase != graph::Phase::kForward || device_of(id) != 1) continue;
    for (graph::TensorId t : std::set<graph::TensorId>(op.inputs.begin(), op.inputs.end())) {
      const graph::OpId producer = g.tensor(t).producer;
      if (producer != graph::kNoOp && device_of(producer) == 0) received += g.tensor(t).bytes();
    }
    if (received > 0) {
      slow = id;
      break;
    }
  }
  ASSERT_TRUE(slow.has_value());
  std::set<int64_t> sizes;
  for (const graph::Tensor& t : g.tensors()) {
    if (t.producer == graph::kNoOp || device_of(t.producer) != 0 || sizes.size() == 3) continue;
    if (!sizes.insert(t.bytes()).second) continue;
    crossing.copy_times["cpu:0->cpu:1"][t.name] = {{2e-6 + 1e-9 * static_cast<double>(t.bytes())}};
  }
  ASSERT_GE(sizes.size(), 2u);
  std::map<std::string, double> alone;
  for (const graph::Op& op : g.ops()) alone[op.name] = 1e-4;
  const std::string slow_name = g.op(*slow).name;
  crossing.op_times[slow_name] = {{1e-4 + 40e-6}, {1e-4 + 40e-6}, {1e-4 + 40e-6}};

  std::optional<sim::LinkSpec> link = FitCrossingLink(g, crossing, names, 0, 1, alone);
  ASSERT_TRUE(link.has_value());
  EXPECT_NEAR(link->seconds_per_byte, 1e-9, 1e-12);
  EXPECT_NEAR(link->latency_seconds, 2e-6, 1e-9);
  EXPECT_NEAR(link->receive_seconds_per_byte, 40e-6 / static_cast<double>(received), 1e-15)
      << slow_name << " read " << received << " bytes from cpu:0";
  EXPECT_GT(link->receive_seconds_per_byte, 0.0);

  crossing.op_times[slow_name] = {{1e-4}, {1e-4}, {1e-4}};
  link = FitCrossingLink(g, crossing, names, 0, 1, alone);
  ASSERT_TRUE(link.has_value());
  EXPECT_EQ(link->receive_seconds_per_byte, 0.0);
  // Nothing was copied the other way: no link fitted from this step.
  EXPECT_FALSE(FitCrossingLink(g, crossing, names, 1, 0, alone).has_value());
}

TEST(SummariseSamplesTest, MedianOfOddAndEvenCounts) {
  graph::EvaluationResult r;
  SummariseSamples({3, 1, 2}, r);
  EXPECT_DOUBLE_EQ(r.step_seconds, 2);
  SummariseSamples({4, 1, 3, 2}, r);
  EXPECT_DOUBLE_EQ(r.step_seconds, 2.5);
  EXPECT_DOUBLE_EQ(r.min_seconds, 1);
  EXPECT_DOUBLE_EQ(r.max_seconds, 4);
}

}  // namespace
}  // namespace placer::runtime

namespace placer::runtime {
namespace {

// An op far longer than the step's time limit (a 4096^3 matmul on one thread: seconds) stands
// for a hung kernel: the step fails soon after the limit, naming the op, instead of waiting.
TEST(ExecutorTest, AnOpOutlivingTheTimeLimitIsAbandonedAndTheProcessGoesOn) {
  graph::Graph g;
  graph::ModelBuilder b(g);
  graph::TensorId x = b.Input("x", {4096, 4096});
  graph::TensorId huge = b.Linear("huge", x, 4096, 0.01);
  b.SoftmaxCrossEntropy("loss", b.Linear("head", huge, 2, 0.01),
                        b.Input("labels", {4096}, graph::DType::kInt64, graph::TensorKind::kLabel));
  const TensorMap batch = SyntheticBatch(g, 1);
  auto executor = std::make_unique<Executor>(
      g, CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0), InitializeParameters(g, 1),
      ExecutorOptions{.forward_only = true, .abandon_grace_seconds = 0.05});
  const auto start = std::chrono::steady_clock::now();
  try {
    executor->RunStep(batch, /*time_limit_seconds=*/0.02);
    ADD_FAILURE() << "the step finished within its time limit";
  } catch (const StepFailure& failure) {
    EXPECT_THAT(failure.what(), AllOf(HasSubstr("abandoned"), HasSubstr("'huge' on cpu:0")));
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 1.0);
  EXPECT_THROW(executor->RunStep(batch), StepFailure);
  executor.reset();  // returns at once: the busy worker is left behind, not joined

  // Other executors keep working.
  graph::Graph lenet = graph::BuildLeNet({.batch_size = 8});
  Executor fresh(lenet, CpuWorkers(1), graph::Placement::AllOn(lenet, {"cpu:0"}, 0),
                 InitializeParameters(lenet, 2));
  EXPECT_GT(fresh.RunStep(SyntheticBatch(lenet, 3)).loss, 0.0);
}

}  // namespace
}  // namespace placer::runtime
