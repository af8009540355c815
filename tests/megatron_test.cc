// The Megatron-style baseline (placer/baselines/megatron.h): its tensor x data parallel steps
// compute what one device computes, its shards sit where Megatron puts them, and its grid tries
// the shapes a practitioner would and keeps the fastest.
#include "placer/baselines/megatron.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "graph/step_names.h"
#include "graph/training_step.h"
#include "runtime/executor.h"
#include "runtime/sim/cost_model.h"
#include "runtime/tensor_parallel.h"
#include "tests/forward_builders.h"
#include "tests/support.h"
#include "tests/tensor_parallel_support.h"
#include "tests/torch_support.h"

namespace placer::baselines {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr double kLearningRate = 0.2;

graph::Graph Encoder(int64_t rows, int64_t normalizer) {
  return test_support::SmallEncoderForward(rows, normalizer);
}

std::vector<std::string> Names(int count) {
  return graph::DeviceNames(test_support::CpuWorkers(count));
}

// Two steps of `step` (R replicas of M micro-batches, from the model's parameters drawn from
// `seed`) give the losses and parameters of two steps of the plain model on one device.
runtime::TensorMap ExpectTrainsAsOneDevice(const MegatronStep& step, int64_t batch, int replicas,
                                           int micro_batches, uint32_t seed) {
  return test_support::ExpectSplitTrainsAsOneDevice(Encoder, kLearningRate, step.graph,
                                                    step.placement, *step.split, batch, replicas,
                                                    micro_batches, seed);
}

// T = 2 shards x R = 2 replicas over 4 CPU workers, placed as the baseline places them: two steps
// give one device's losses, and every replica's shards put back together give its parameters.
TEST(MegatronTest, TensorTimesDataParallelStepsMatchOneDevice) {
  constexpr int64_t kBatch = 4;
  constexpr int kWays = 2, kReplicas = 2;
  const MegatronStep step = BuildMegatronStep(Encoder, kBatch, kLearningRate,
                                              Names(kWays * kReplicas), {.tensor_ways = kWays});
  ASSERT_TRUE(step.split.has_value());
  EXPECT_EQ(step.partial_sums, 2 * 2 + 1);  // attention and MLP per layer, and the pooler's
  // Shard s of replica r on device r T + s; the ops no split reaches on the replica's first.
  for (graph::OpId id : step.graph.OpsInPhase(graph::Phase::kForward)) {
    const std::string& name = step.graph.op(id).name;
    const int replica = graph::ParseStepName(name).replica.value_or(-1);
    ASSERT_GE(replica, 0) << name;
    EXPECT_EQ(step.placement.device_of_op[static_cast<size_t>(id)],
              replica * kWays + graph::ShardOfName(name).value_or(0))
        << name;
  }
  // The data-parallel all-reduce packs each bucket's gradients where they were computed: a bucket
  // holds one shard's parameters, so no gradient crosses to another device to be packed.
  auto device_of = [&](graph::OpId op) {
    const graph::OpId forward = step.graph.op(op).forward_op;
    return step.placement.device_of_op[static_cast<size_t>(forward == graph::kNoOp ? op : forward)];
  };
  int packs = 0;
  for (graph::OpId id = 0; id < step.graph.num_ops(); ++id) {
    const graph::Op& op = step.graph.op(id);
    if (!op.name.ends_with(".allreduce/pack")) continue;
    ++packs;
    for (graph::TensorId in : op.inputs) {
      EXPECT_EQ(device_of(step.graph.tensor(in).producer), device_of(id))
          << op.name << " reads " << step.graph.tensor(in).name;
    }
  }
  EXPECT_GT(packs, 0);
  const runtime::TensorMap trained = ExpectTrainsAsOneDevice(step, kBatch, kReplicas, 1, 5);
  for (int r = 0; r < kReplicas; ++r) {
    // Every shard's copy of a repeated parameter took the same steps.
    for (const graph::ReplicatedParameter& p : step.split->replicated_parameters) {
      for (int s = 0; s < kWays; ++s) {
        const std::string copy = graph::ReplicaName(r, graph::ShardName(s, p.source));
        EXPECT_TRUE(trained.at(copy).allclose(
            trained.at(graph::ReplicaName(0, graph::ShardName(0, p.source))), 0, 1e-6))
            << copy;
      }
    }
  }
}

// T = 2 shards x P = 2 pipeline stages x R replicas of M micro-batches each under 1F1B, over
// T P R CPU workers, placed as the baseline places them: two steps give one device's losses and
// parameters; each replica's stages are contiguous in its op order and all used.
void CheckPipelinedMatchesOneDevice(int64_t batch, int replicas, int micro_batches) {
  constexpr int kWays = 2, kStages = 2;
  const int devices = kWays * kStages * replicas;
  const MegatronStep step = BuildMegatronStep(
      Encoder, batch, kLearningRate, Names(devices),
      {.tensor_ways = kWays, .pipeline_stages = kStages, .micro_batches = micro_batches});
  ASSERT_TRUE(step.split.has_value());
  EXPECT_EQ(step.placement.micro_batches, micro_batches);
  EXPECT_EQ(step.placement.schedule, graph::PipelineSchedule::kOneFOneB);
  std::vector<int> last_stage(static_cast<size_t>(replicas * micro_batches), 0);
  std::set<int> used;
  for (graph::OpId id : step.graph.OpsInPhase(graph::Phase::kForward)) {
    const std::string& name = step.graph.op(id).name;
    const graph::StepName parsed = graph::ParseStepName(name);
    const int device = step.placement.device_of_op[static_cast<size_t>(id)];
    used.insert(device);
    EXPECT_EQ(device % kWays, graph::ShardOfName(name).value_or(0)) << name;
    EXPECT_EQ(device / (kWays * kStages), parsed.replica.value_or(0)) << name;
    const int stage = device / kWays % kStages;
    int& last = last_stage[static_cast<size_t>(parsed.replica.value_or(0) * micro_batches +
                                               parsed.micro_batch.value_or(0))];
    EXPECT_GE(stage, last) << name << ": stages are contiguous";
    last = stage;
  }
  EXPECT_EQ(used.size(), static_cast<size_t>(devices));
  ExpectTrainsAsOneDevice(step, batch, replicas, micro_batches, 7);
}

TEST(MegatronTest, TensorTimesPipelineStepsMatchOneDevice) {
  CheckPipelinedMatchesOneDevice(4, 1, 2);
  CheckPipelinedMatchesOneDevice(8, 2, 4);
}

graph::DeviceSet Gpus(int count) {
  graph::DeviceSet gpus;
  for (int i = 0; i < count; ++i) {
    gpus.push_back(
        {.name = fmt::format("cuda:{}", i), .type = graph::DeviceType::kCuda, .index = i});
  }
  return gpus;
}

// Each trial's shape as "T<t>" or "T<t>P<p>M<m>".
std::vector<std::string> ShapesTried(const MegatronBaselineResult& result) {
  std::vector<std::string> shapes;
  for (const MegatronTrial& t : result.trials) {
    shapes.push_back(t.pipeline_stages == 1 ? fmt::format("T{}", t.tensor_ways)
                                            : fmt::format("T{}P{}M{}", t.tensor_ways,
                                                          t.pipeline_stages, t.micro_batches));
  }
  return shapes;
}

// T runs over the powers of two within a host, and with T > 1 P over the powers of two whose
// T x P stages fit, with M = P, 2P, 4P micro-batches; R = D / (T P); the fastest valid trial wins.
TEST(MegatronTest, TheGridSplitsWithinAHostAndKeepsTheFastest) {
  const graph::DeviceSet gpus = Gpus(4);
  const sim::RooflineCostModel costs;
  const graph::Graph base = test_support::PlainStep(Encoder, 8, kLearningRate);
  std::vector<std::string> log;
  const MegatronBaselineResult one_host =
      MegatronBaseline(base, Encoder, 8, kLearningRate, gpus, costs, 0, 1'000'000, &log);
  EXPECT_THAT(ShapesTried(one_host), ElementsAre("T1", "T2", "T2P2M2", "T2P2M4", "T2P2M8", "T4"));
  ASSERT_GE(one_host.best, 0);
  for (const MegatronTrial& t : one_host.trials) {
    EXPECT_EQ(t.tensor_ways * t.pipeline_stages * t.replicas, 4);
    EXPECT_EQ(t.partial_sums > 0, t.tensor_ways > 1);
    ASSERT_TRUE(t.result.valid) << t.result.invalid_reason;
    EXPECT_GE(t.result.step_seconds,
              one_host.trials[static_cast<size_t>(one_host.best)].result.step_seconds);
  }
  EXPECT_EQ(log.size(), 6u);

  // Tensor parallelism within a host of 2; pipeline stages across the hosts.
  const MegatronBaselineResult two_hosts =
      MegatronBaseline(base, Encoder, 8, kLearningRate, gpus, costs, 2, 1'000'000, nullptr);
  EXPECT_THAT(ShapesTried(two_hosts), ElementsAre("T1", "T2", "T2P2M2", "T2P2M4", "T2P2M8"));

  // 6 rows do not split over 4 replicas; a step over the op bound is left out; both said.
  log.clear();
  const MegatronBaselineResult odd =
      MegatronBaseline(test_support::PlainStep(Encoder, 6, kLearningRate), Encoder, 6,
                       kLearningRate, gpus, costs, 0, 1'000'000, &log);
  EXPECT_THAT(ShapesTried(odd), ElementsAre("T2", "T2P2M2", "T4"));
  EXPECT_THAT(log.front(), HasSubstr("TP 1 x DP 4 left out: 6 rows do not split 4 ways"));
  log.clear();
  EXPECT_TRUE(
      MegatronBaseline(base, Encoder, 8, kLearningRate, gpus, costs, 0, 10, &log).trials.empty());
  EXPECT_THAT(log.front(), HasSubstr("ops are over 10"));

  // Every replica of a shape holds at least the plain step's ops, so a shape whose replicas of
  // it are over the bound is left out before it is built, with no shape lost that would fit.
  for (const MegatronTrial& t : one_host.trials) {
    const MegatronStep step = BuildMegatronStep(Encoder, 8, kLearningRate, graph::DeviceNames(gpus),
                                                {.tensor_ways = t.tensor_ways,
                                                 .pipeline_stages = t.pipeline_stages,
                                                 .micro_batches = t.micro_batches});
    EXPECT_GE(step.graph.num_ops(), t.replicas * base.num_ops())
        << "T" << t.tensor_ways << "P" << t.pipeline_stages << "M" << t.micro_batches;
  }
  log.clear();
  const int64_t bound = 4 * base.num_ops() - 1;
  const MegatronBaselineResult bounded =
      MegatronBaseline(base, Encoder, 8, kLearningRate, gpus, costs, 0, bound, &log);
  EXPECT_THAT(log.front(),
              HasSubstr(fmt::format("TP 1 x DP 4 left out: at least 4 x {} ops are over {}",
                                    base.num_ops(), bound)));
  EXPECT_THAT(ShapesTried(bounded), Not(Contains("T1")));
  // Two replicas of it are under the bound: that shape is built, and left out by its own ops.
  ASSERT_GE(log.size(), 2u);
  EXPECT_THAT(log[1], HasSubstr("TP 2 x DP 2 left out: its"));
}

}  // namespace
}  // namespace placer::baselines
