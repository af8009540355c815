// Tensor parallelism (graph/tensor_parallel.h): a model whose linear layers are split over shards
// computes what it computes on one device, under Megatron's placement and under random ones, and
// the rewrite adds exactly Megatron's collectives to a transformer.
#include "graph/tensor_parallel.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "graph/models.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "graph/training_step.h"
#include "graph/zoo.h"
#include "runtime/executor.h"
#include "runtime/tensor_parallel.h"
#include "tests/forward_builders.h"
#include "tests/support.h"
#include "tests/torch_support.h"

namespace placer::runtime {
namespace {

using placer::test_support::CpuWorkers;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr double kLearningRate = 0.2;

graph::Graph Mlp() {
  return graph::BuildParallelMlp({.batch_size = 8,
                                  .in_features = 12,
                                  .width = 16,
                                  .depth = 3,
                                  .branches = 1,
                                  .classes = 5,
                                  .init_stddev = 0.3,
                                  .training_step = false});
}

graph::Graph Encoder(int layers = 2) { return test_support::SmallEncoderForward(4, 0, layers); }

// A GPT-style decoder as ONNX exports of LLaMA-family models give it: pre-normalisation, linear
// layers as MatMul by a [in, out] parameter, a causal mask added to the scores, a SwiGLU MLP
// (SiLU(gate) * up, then down), next-token logits over the vocabulary. With `fused_qkv`, GPT-2's
// attention: one linear layer computes the query, key and value, split apart after it.
graph::Graph Decoder(int layers = 2, bool fused_qkv = false) {
  using graph::op_types::kMatMul;
  constexpr int64_t kBatch = 2, kSeq = 6, kWidth = 24, kHeads = 4, kHead = kWidth / kHeads;
  constexpr int64_t kMlp = 48, kVocab = 40;
  graph::Graph graph;
  graph::ModelBuilder b(graph);
  const graph::Initializer normal{graph::Initializer::Kind::kNormal, 0.2};
  auto linear = [&](const std::string& name, graph::TensorId x, int64_t out) {
    const int64_t in = b.ShapeOf(x).back();
    return b.Apply(name, kMatMul, {x, b.Parameter(name + ".weight", {in, out}, normal)});
  };
  const graph::TensorId ids = b.Input("tokens", {kBatch, kSeq}, graph::DType::kInt64);
  const graph::TensorId labels =
      b.Input("next_tokens", {kBatch * kSeq}, graph::DType::kInt64, graph::TensorKind::kLabel);
  graph::TensorId x = b.Apply("embed", graph::op_types::kGather,
                              {b.Parameter("embed.table", {kVocab, kWidth}, normal), ids});
  std::vector<float> mask(kSeq * kSeq, 0.0F);
  for (int64_t i = 0; i < kSeq; ++i) {
    for (int64_t j = i + 1; j < kSeq; ++j) mask[static_cast<size_t>(i * kSeq + j)] = -1e9F;
  }
  const graph::TensorId causal = b.Constant("causal_mask", {kSeq, kSeq}, mask);
  for (int l = 0; l < layers; ++l) {
    const std::string p = fmt::format("h{}/", l);
    const graph::TensorId normed = b.LayerNorm(p + "ln_1", x, 1e-5);
    std::vector<graph::TensorId> projected;
    if (fused_qkv) {
      const graph::TensorId qkv = linear(p + "c_attn", normed, 3 * kWidth);
      projected = b.Split(p + "qkv", qkv, -1, {kWidth, kWidth, kWidth});
    } else {
      for (const char* what : {"q_proj", "k_proj", "v_proj"})
        projected.push_back(linear(p + what, normed, kWidth));
    }
    auto heads = [&](int which, const char* what, std::vector<int64_t> perm) {
      graph::TensorId t = projected[static_cast<size_t>(which)];
      t = b.Reshape(p + what + "_split", t, {kBatch, kSeq, kHeads, kHead});
      return b.Transpose(p + what + "_heads", t, perm);
    };
    const graph::TensorId q = heads(0, "q_proj", {0, 2, 1, 3});
    const graph::TensorId k = heads(1, "k_proj", {0, 2, 3, 1});
    const graph::TensorId v = heads(2, "v_proj", {0, 2, 1, 3});
    graph::TensorId scores = b.Apply(p + "scores", kMatMul, {q, k});
    scores = b.Apply(p + "masked", graph::op_types::kAdd, {scores, causal});
    const graph::TensorId probs = b.Softmax(p + "probs", scores, -1);
    graph::TensorId context = b.Apply(p + "context", kMatMul, {probs, v});
    context = b.Transpose(p + "context_heads", context, {0, 2, 1, 3});
    context = b.Reshape(p + "context_merge", context, {kBatch, kSeq, kWidth});
    x = b.Apply(p + "attn_residual", graph::op_types::kAdd,
                {linear(p + "o_proj", context, kWidth), x});
    const graph::TensorId m = b.LayerNorm(p + "ln_2", x, 1e-5);
    const graph::TensorId gate = linear(p + "gate_proj", m, kMlp);
    const graph::TensorId silu =
        b.Apply(p + "silu", graph::op_types::kMul,
                {gate, b.Apply(p + "sigmoid", graph::op_types::kSigmoid, {gate})});
    const graph::TensorId up = linear(p + "up_proj", m, kMlp);
    const graph::TensorId gated = b.Apply(p + "gated", graph::op_types::kMul, {silu, up});
    x = b.Apply(p + "mlp_residual", graph::op_types::kAdd,
                {linear(p + "down_proj", gated, kWidth), x});
  }
  x = b.LayerNorm("ln_f", x, 1e-5);
  const graph::TensorId logits =
      b.Reshape("logits_2d", linear("lm_head", x, kVocab), {kBatch * kSeq, kVocab});
  b.SoftmaxCrossEntropy("loss", logits, labels);
  return graph;
}

graph::Graph WithStep(graph::Graph forward) {
  graph::AppendBackwardAndUpdate(forward, kLearningRate);
  forward.Validate();
  return forward;
}

// Two steps of the model on one device against two steps of it split `ways` ways over `devices`
// CPU workers: under Megatron's placement (shard s on worker s, the rest on worker 0) and two
// random ones, the same losses, and the shards' parameters put back together the same parameters.
void CheckMatchesOneDevice(const graph::Graph& forward, const std::vector<std::string>& starts,
                           int ways, int devices, uint32_t seed) {
  const graph::Graph plain = WithStep(forward);
  const TensorMap initial = InitializeParameters(plain, seed);
  const TensorMap minibatch = SyntheticBatch(plain, seed + 1);
  Executor reference(plain, CpuWorkers(1), graph::Placement::AllOn(plain, {"cpu:0"}, 0), initial);
  std::vector<double> losses;
  for (int step = 0; step < 2; ++step) losses.push_back(reference.RunStep(minibatch).loss);
  const TensorMap expected = reference.Parameters();

  const graph::TensorParallelGraph sharded = graph::ShardTensorParallel(forward, starts, ways);
  const graph::Graph step = graph::TensorParallelStep(sharded, kLearningRate);
  std::mt19937 rng(seed);
  for (int trial = 0; trial < 3; ++trial) {
    graph::Placement placement =
        graph::Placement::AllOn(step, graph::DeviceNames(CpuWorkers(devices)), 0);
    std::uniform_int_distribution<int> pick(0, devices - 1);
    for (graph::OpId id : step.OpsInPhase(graph::Phase::kForward)) {
      const int shard = sharded.shard_of_op[static_cast<size_t>(id)];
      placement.device_of_op[static_cast<size_t>(id)] =
          trial == 0 ? (shard < 0 ? 0 : shard % devices) : pick(rng);
    }
    const std::string context =
        fmt::format("{} ways over {} workers, {}", ways, devices,
                    trial == 0 ? "Megatron's placement" : "random placement");
    Executor executor(step, CpuWorkers(devices), placement, ShardParameters(initial, sharded));
    for (int s = 0; s < 2; ++s) {
      EXPECT_NEAR(executor.RunStep(minibatch).loss, losses[static_cast<size_t>(s)], 1e-5)
          << context << ", step " << s;
    }
    const TensorMap trained = executor.Parameters();
    test_support::ExpectSameParameters(GatherParameters(trained, sharded), expected, context, 1e-6);
    // The copies of a replicated parameter took the same steps.
    for (const graph::ReplicatedParameter& p : sharded.replicated_parameters) {
      for (graph::TensorId copy : p.copies) {
        const std::string& name = step.tensor(copy).name;
        EXPECT_TRUE(
            trained.at(name).allclose(trained.at(step.tensor(p.copies.front()).name), 0, 1e-6))
            << context << ": " << name;
      }
    }
    if (::testing::Test::HasFailure()) return;
  }
}

TEST(TensorParallelTest, AnMlpSplitOverTwoAndFourShardsMatchesOneDevice) {
  const graph::Graph mlp = Mlp();
  const std::vector<std::string> starts = graph::MegatronColumnStarts(mlp, 2);
  EXPECT_THAT(starts, ElementsAre("tower0.fc0", "tower0.fc2"));  // and fc1, the classifier: rows
  CheckMatchesOneDevice(mlp, starts, 2, 2, 7);
  CheckMatchesOneDevice(mlp, starts, 4, 3, 8);
}

TEST(TensorParallelTest, ATransformerEncoderSplitByHeadsAndFeaturesMatchesOneDevice) {
  const graph::Graph encoder = Encoder();
  CheckMatchesOneDevice(encoder, graph::MegatronColumnStarts(encoder, 2), 2, 2, 11);
  CheckMatchesOneDevice(encoder, graph::MegatronColumnStarts(encoder, 4), 4, 4, 12);
}

TEST(TensorParallelTest, AGptStyleDecoderSplitByHeadsAndFeaturesMatchesOneDevice) {
  const graph::Graph decoder = Decoder();
  const std::vector<std::string> starts = graph::MegatronColumnStarts(decoder, 2);
  EXPECT_THAT(starts,
              ElementsAre("h0/q_proj", "h0/k_proj", "h0/v_proj", "h0/gate_proj", "h0/up_proj",
                          "h1/q_proj", "h1/k_proj", "h1/v_proj", "h1/gate_proj", "h1/up_proj"));
  const graph::TensorParallelGraph sharded = graph::ShardTensorParallel(decoder, starts, 2);
  EXPECT_EQ(sharded.partial_sums, 4);
  EXPECT_EQ(sharded.all_reduces, 3);  // the last MLP's sum feeds the head, which is not split
  CheckMatchesOneDevice(decoder, starts, 2, 2, 17);
  CheckMatchesOneDevice(decoder, graph::MegatronColumnStarts(decoder, 4), 4, 4, 18);
}

TEST(TensorParallelTest, AFusedQueryKeyValueProjectionSplitsByHeadsWithoutAGather) {
  // GPT-2's c_attn: each shard owns its heads' rows of the query, the key and the value (three
  // blocks of the fused weight), as Megatron lays the fused projection out on its ranks.
  const graph::Graph decoder = Decoder(2, /*fused_qkv=*/true);
  const std::vector<std::string> starts = graph::MegatronColumnStarts(decoder, 2);
  EXPECT_THAT(starts, ElementsAre("h0/c_attn", "h0/gate_proj", "h0/up_proj", "h1/c_attn",
                                  "h1/gate_proj", "h1/up_proj"));
  const graph::TensorParallelGraph sharded = graph::ShardTensorParallel(decoder, starts, 2);
  EXPECT_EQ(sharded.gathers, 0);
  EXPECT_EQ(sharded.scatters, 0);
  EXPECT_EQ(sharded.partial_sums, 4);
  const graph::Tensor& weight =
      sharded.forward.tensor(sharded.forward.TensorByName(graph::ShardName(1, "h0/c_attn.weight")));
  EXPECT_THAT(weight.shape, ElementsAre(24, 36));  // 3 blocks of 24 features, 12 of each
  CheckMatchesOneDevice(decoder, starts, 2, 2, 19);
  CheckMatchesOneDevice(decoder, graph::MegatronColumnStarts(decoder, 4), 4, 4, 20);
}

TEST(TensorParallelTest, BlocksMeetingOtherCutsAreGatheredAndScatteredInBlockOrder) {
  // Two fused projections split into three blocks each: one meets a layer cut into plain pieces
  // (so both are gathered whole, the blocks' pieces put back in block order), the other an
  // activation that no start splits (scattered into each shard's piece of every block).
  constexpr int64_t kRows = 4, kIn = 6, kFeatures = 12, kBlock = kFeatures / 3;
  graph::Graph graph;
  graph::ModelBuilder b(graph);
  const graph::Initializer normal{graph::Initializer::Kind::kNormal, 0.3};
  const graph::TensorId x = b.Input("x", {kRows, kIn});
  const graph::TensorId labels =
      b.Input("labels", {kRows}, graph::DType::kInt64, graph::TensorKind::kLabel);
  auto linear = [&](const std::string& name) {
    return b.Apply(name, graph::op_types::kMatMul,
                   {x, b.Parameter(name + ".weight", {kIn, kFeatures}, normal)});
  };
  const graph::TensorId fused = linear("fused"), plain = linear("plain");
  const graph::TensorId other = linear("other"), side = linear("side");
  std::vector<graph::TensorId> terms = b.Split(
      "mixed", b.Apply("mix", graph::op_types::kAdd, {fused, plain}), -1, {kBlock, kBlock, kBlock});
  for (graph::TensorId t :
       b.Split("shifted", b.Apply("shift", graph::op_types::kAdd, {other, side}), -1,
               {kBlock, kBlock, kBlock})) {
    terms.push_back(t);
  }
  terms.push_back(b.Slice("plain_head", plain, -1, 0, kBlock));  // keeps `plain` in one block
  graph::TensorId y = terms[0];
  for (size_t k = 1; k < terms.size(); ++k) {
    y = b.Apply(fmt::format("sum{}", k), graph::op_types::kAdd, {y, terms[k]});
  }
  b.SoftmaxCrossEntropy("loss", y, labels);

  const std::vector<std::string> starts{"fused", "plain", "other"};
  const graph::TensorParallelGraph sharded = graph::ShardTensorParallel(graph, starts, 2);
  EXPECT_GE(sharded.gathers, 2);   // `fused` and `plain` before they are added
  EXPECT_GE(sharded.scatters, 1);  // `side`, in blocks, to meet `other`
  CheckMatchesOneDevice(graph, starts, 2, 2, 21);
  CheckMatchesOneDevice(graph, starts, 2, 3, 22);
}

TEST(TensorParallelTest, AnyLinearLayerMayStartASplitWhereverItEnds) {
  // Column splits that end in gathers and scatters (the second layer's output meets the residual
  // and the normalisation whole) still compute the model.
  const std::vector<std::string> starts{"l0/ffn/output", "l0/attention/query"};
  const graph::TensorParallelGraph sharded = graph::ShardTensorParallel(Encoder(1), starts, 2);
  EXPECT_GT(sharded.gathers, 0);
  EXPECT_GT(sharded.scatters, 0);
  CheckMatchesOneDevice(Encoder(1), starts, 2, 3, 13);
}

TEST(TensorParallelTest, MegatronsStartsGiveOneSumPerAttentionAndMlpAndNoOtherCollective) {
  const graph::Graph encoder = Encoder(3);
  const std::vector<std::string> starts = graph::MegatronColumnStarts(encoder, 4);
  std::vector<std::string> expected;
  for (int l = 0; l < 3; ++l) {
    for (const char* what :
         {"attention/query", "attention/key", "attention/value", "ffn/intermediate"}) {
      expected.push_back(fmt::format("l{}/{}", l, what));
    }
  }
  expected.push_back("head/pooler");  // with the classifier, a column-row pair too
  std::vector<std::string> sorted = starts;
  std::sort(sorted.begin(), sorted.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(sorted, expected);

  const graph::TensorParallelGraph sharded = graph::ShardTensorParallel(encoder, starts, 4);
  EXPECT_EQ(sharded.gathers, 0);
  EXPECT_EQ(sharded.scatters, 0);
  EXPECT_EQ(sharded.partial_sums, 2 * 3 + 1);
  // Every layer's sums feed the next split, so they are all-reduced and what follows them
  // (residual, normalisation) runs on every shard; the classifier's sum feeds only the loss.
  EXPECT_EQ(sharded.all_reduces, 2 * 3);
  // Every weight of a split layer is sliced, not copied: the shards together hold the model's
  // parameters once, but for the copies every shard keeps of what it repeats (each layer's two
  // LayerNorms and the row-parallel layers' biases, added after the all-reduce), as Megatron does.
  int64_t copied = 0;
  for (const graph::ReplicatedParameter& p : sharded.replicated_parameters) {
    ASSERT_EQ(p.copies.size(), 4u) << p.source;
    EXPECT_EQ(sharded.forward.tensor(p.copies[1]).name, graph::ShardName(1, p.source));
    copied += graph::NumElements(sharded.forward.tensor(p.copies[0]).shape);
  }
  EXPECT_EQ(sharded.replicated_parameters.size(), 3u * (2 * 2 + 2));
  EXPECT_EQ(sharded.forward.ParameterCount(), encoder.ParameterCount() + 3 * copied);
  const graph::Tensor& query = sharded.forward.tensor(
      sharded.forward.TensorByName(graph::ShardName(3, "l0/attention/query.weight")));
  EXPECT_THAT(query.shape, ElementsAre(8, 32));
}

TEST(TensorParallelTest, ASplitThatCannotStartIsAnErrorNamingTheOp) {
  const graph::Graph encoder = Encoder(1);
  EXPECT_THAT([&] { graph::ShardTensorParallel(encoder, {"l0/attention/probs"}, 2); },
              ::testing::ThrowsMessage<graph::GraphError>(
                  HasSubstr("op 'l0/attention/probs' (Softmax) cannot start a column split")));
  EXPECT_THAT([&] { graph::ShardTensorParallel(encoder, {"l0/ffn/intermediate"}, 3); },
              ::testing::ThrowsMessage<graph::GraphError>(
                  HasSubstr("op 'l0/ffn/intermediate' has 64 output features, which 3 shards")));
  EXPECT_THAT([&] { graph::ShardTensorParallel(encoder, {"no/such/op"}, 2); },
              ::testing::ThrowsMessage<graph::GraphError>(HasSubstr("no op 'no/such/op'")));
  EXPECT_THAT([&] { graph::ShardTensorParallel(WithStep(encoder), {"l0/ffn/intermediate"}, 2); },
              ::testing::ThrowsMessage<graph::GraphError>(HasSubstr("rewrites a forward graph")));
}

}  // namespace
}  // namespace placer::runtime
