// The model zoo (graph/zoo.h): the architectures at the papers' sizes (parameter and op counts
// against the reference implementations), the expert placements in configs/experts/ and the
// placement rules they are written in, the config sections, and tiny versions of every model
// running real training steps on the CPU executor under random placements.
#include "graph/zoo.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "graph/training_step.h"
#include "placer/config/config.h"
#include "placer/setup/model_factory.h"
#include "placer/setup/step_cache.h"
#include "runtime/executor.h"
#include "tests/support.h"

namespace placer {
namespace {

using graph::Graph;
using graph::OpId;
using graph::Phase;
using graph::TensorId;
using ::testing::AllOf;
using ::testing::HasSubstr;

const std::filesystem::path kSource = PLACER_SOURCE_DIR;

int64_t CountOps(const Graph& g, Phase phase, const std::string& type = "") {
  int64_t n = 0;
  for (const graph::Op& op : g.ops()) n += op.phase == phase && (type.empty() || op.type == type);
  return n;
}

// Elements of the parameters whose names start with `prefix`.
int64_t ParametersUnder(const Graph& g, const std::string& prefix) {
  int64_t n = 0;
  for (TensorId id : g.Parameters()) {
    if (g.tensor(id).name.starts_with(prefix)) n += graph::NumElements(g.tensor(id).shape);
  }
  return n;
}

// Parameters of one LSTM layer (one bias, as TensorFlow's cells; PyTorch's nn.LSTM has two).
int64_t LstmLayerParameters(int64_t input, int64_t hidden) {
  return 4 * hidden * (input + hidden + 1);
}

// ------------------------------------------------------------------------------------------------
// Architectures at the papers' sizes

TEST(ZooTest, InceptionV3HasTorchvisionsParametersAndLayers) {
  Graph g = graph::BuildInceptionV3({});
  // torchvision's inception_v3 has 27,161,264 parameters (its model card, IMAGENET1K_V1). Its
  // auxiliary classifier, which this model leaves out, holds 3,326,696 of them: conv 768->128 1x1
  // (98,304) + BN (256), conv 128->768 5x5 (2,457,600) + BN (1,536), fc 768->1000 (769,000).
  EXPECT_EQ(g.ParameterCount(), 27'161'264 - 3'326'696);
  // 94 BasicConv2d (stem 5, 3 x InceptionA 7, InceptionB 4, 4 x InceptionC 10, InceptionD 6,
  // 2 x InceptionE 9), each conv + BN + ReLU; 13 pools (2 stem, one per A/B/C/D/E block), 15
  // concatenations (one per block, three per E), then global pool, flatten, fc and the loss.
  EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kConv2d), 94);
  EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kBatchNorm), 94);
  EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kRelu), 94);
  EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kMaxPool2d) +
                CountOps(g, Phase::kForward, graph::op_types::kAvgPool2d),
            13);
  EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kConcat), 15);
  EXPECT_EQ(CountOps(g, Phase::kForward), 94 * 3 + 13 + 15 + 4);
  // The feature map sizes of the paper's Table 1 at 299x299.
  EXPECT_EQ(g.tensor(g.TensorByName("mixed_5d/concat")).shape, (graph::Shape{32, 288, 35, 35}));
  EXPECT_EQ(g.tensor(g.TensorByName("mixed_6e/concat")).shape, (graph::Shape{32, 768, 17, 17}));
  EXPECT_EQ(g.tensor(g.TensorByName("mixed_7c/concat")).shape, (graph::Shape{32, 2048, 8, 8}));
  // Every parameter gets one update; every forward op on the path to the loss one backward op.
  EXPECT_EQ(CountOps(g, Phase::kUpdate), static_cast<int64_t>(g.Parameters().size()));
  EXPECT_EQ(CountOps(g, Phase::kBackward), CountOps(g, Phase::kForward));
}

TEST(ZooTest, InceptionV3TakesInputsDownToTorchvisionsMinimum) {
  EXPECT_NO_THROW(graph::BuildInceptionV3({.batch_size = 1, .image_size = 75}));
  EXPECT_THAT([] { graph::BuildInceptionV3({.image_size = 74}); },
              ::testing::ThrowsMessage<graph::GraphError>(HasSubstr("image_size")));
  Graph narrow = graph::BuildInceptionV3({.width_multiplier = 0.5});
  EXPECT_EQ(narrow.tensor(narrow.TensorByName("mixed_7c/concat")).shape,
            (graph::Shape{32, 1024, 8, 8}));
}

TEST(ZooTest, TransformerHasBertBasesParameters) {
  Graph g = graph::BuildTransformerEncoder({});
  // BERT-base (Devlin et al. 2019, "110M"): per encoder layer Q, K, V and output projections
  // 4 x (768*768 + 768), two LayerNorms 2 x 1,536, feed-forward 768*3072 + 3072 + 3072*768 + 768:
  // 7,087,872; twelve layers 85,054,464.
  EXPECT_EQ(ParametersUnder(g, "l"), 12 * 7'087'872);
  EXPECT_EQ(ParametersUnder(g, "l"), 85'054'464);
  // Embeddings: words 30522*768, positions 512*768, token types 2*768, LayerNorm 1,536.
  EXPECT_EQ(ParametersUnder(g, "embeddings/"), 23'837'184);
  // With the pooler (768*768 + 768), Hugging Face's BertModel for bert-base-uncased:
  // 109,482,240 parameters. The classifier on top adds 768*2 + 2.
  EXPECT_EQ(g.ParameterCount() - ParametersUnder(g, "head/classifier"), 109'482'240);
  EXPECT_EQ(ParametersUnder(g, "head/classifier"), 768 * 2 + 2);
  // 24 forward ops per layer (3 projections x (Linear, Reshape, Transpose), scores, scale constant
  // and Mul, Softmax, context, Transpose, Reshape, output Linear, residual, LayerNorm; feed-forward
  // Linear, GELU, Linear, residual, LayerNorm); 6 for the embeddings, 6 for head and loss.
  EXPECT_EQ(CountOps(g, Phase::kForward), 12 * 24 + 6 + 6);
  EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kSoftmax), 12);
  EXPECT_EQ(g.tensor(g.TensorByName("l11/attention/probs")).shape,
            (graph::Shape{32, 12, 128, 128}));
  EXPECT_THAT([] { graph::BuildTransformerEncoder({.hidden = 770}); },
              ::testing::ThrowsMessage<graph::GraphError>(HasSubstr("heads")));
}

TEST(ZooTest, RnnLmIsUnrolledWithSharedWeights) {
  const graph::RnnLmOptions o;  // 2 layers of 2048, embedding 1024, vocabulary 40,000, 40 steps
  const int64_t expected = o.vocab * o.embedding + LstmLayerParameters(o.embedding, o.hidden) +
                           LstmLayerParameters(o.hidden, o.hidden) + o.vocab * (o.hidden + 1);
  for (graph::LstmCellKind cell : {graph::LstmCellKind::kGates, graph::LstmCellKind::kFused}) {
    SCOPED_TRACE(graph::ToString(cell));
    Graph g = graph::BuildRnnLm({.cell = cell});
    EXPECT_EQ(g.ParameterCount(), expected);
    // Embedding lookup and split, one reshape per step, a zero state per layer; per step and
    // layer 21 ops (gates) or one LstmCell; per step a projection and a loss.
    const int64_t per_cell = cell == graph::LstmCellKind::kGates ? 21 : 1;
    EXPECT_EQ(CountOps(g, Phase::kForward),
              2 + o.time_steps + o.layers + o.time_steps * o.layers * per_cell + 2 * o.time_steps);
    EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kSoftmaxCrossEntropy), o.time_steps);
  }
  // A layer's weights live with its first step: every later step reads the same tensor.
  Graph g = graph::BuildRnnLm({.cell = graph::LstmCellKind::kFused});
  int64_t readers = 0;
  for (OpId op : g.tensor(g.TensorByName("l1/w_ih")).consumers) {
    readers += g.op(op).phase == Phase::kForward;
  }
  EXPECT_EQ(readers, 40);
  EXPECT_EQ(g.op(graph::OwnerOf(g, g.TensorByName("l1/w_ih"))).name, "l1/t0/lstm");
}

TEST(ZooTest, NmtOfEightLayersHasMoreThanFiftyThousandOps) {
  const graph::NmtOptions o;
  for (int64_t layers : {2, 4, 8}) {
    SCOPED_TRACE(layers);
    Graph g = graph::BuildNmt({.layers = layers});
    int64_t lstm = 0;
    for (int64_t l = 0; l < layers; ++l) {
      lstm += 2 * LstmLayerParameters(l == 0 ? o.embedding : o.hidden, o.hidden);
    }
    EXPECT_EQ(g.ParameterCount(), o.source_vocab * o.embedding + o.target_vocab * o.embedding +
                                      lstm + o.hidden * 2 * o.hidden +
                                      o.target_vocab * (o.hidden + 1));
    EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kSoftmaxCrossEntropy), o.target_steps);
    // Residual connections from the third layer on, in encoder and decoder.
    EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kAdd),
              (o.source_steps + o.target_steps) * layers * 5 +
                  (o.source_steps + o.target_steps) * std::max<int64_t>(0, layers - 2));
    if (layers == 8) {
      // The size of graph the hierarchical planner was built for (training step: forward,
      // backward and update ops).
      EXPECT_GT(g.num_ops(), 50'000);
    }
  }
  Graph g = graph::BuildNmt({.batch_size = 4, .layers = 2, .source_steps = 5, .target_steps = 3});
  EXPECT_EQ(g.tensor(g.TensorByName("attention/memory")).shape, (graph::Shape{4, 5, 1024}));
  EXPECT_EQ(g.tensor(g.TensorByName("attention/t2/weights")).shape, (graph::Shape{4, 5, 1}));
  EXPECT_EQ(g.tensor(g.TensorByName("softmax/t2/logits")).shape, (graph::Shape{4, 32000}));
  // The decoder starts from the encoder's final states.
  const graph::Op& first = g.op(*g.FindOp("dec/l1/t0/gate_f/h"));
  EXPECT_EQ(g.tensor(first.inputs[0]).name, "enc/l1/t4/cell/h");
}

TEST(ZooTest, BadSizesAreRefusedNamingTheSize) {
  auto fails = [](const std::function<void()>& build, const std::string& what) {
    EXPECT_THAT(build, ::testing::ThrowsMessage<graph::GraphError>(HasSubstr(what)));
  };
  fails([] { graph::BuildNmt({.layers = 0}); }, "layers");
  fails([] { graph::BuildNmt({.target_vocab = 1}); }, "target_vocab");
  fails([] { graph::BuildRnnLm({.time_steps = 0}); }, "time_steps");
  fails([] { graph::BuildTransformerEncoder({.seq_length = 600}); }, "max_positions");
  fails([] { graph::BuildInceptionV3({.width_multiplier = 0}); }, "width_multiplier");
}

// Data-parallel replicas: every model's forward builder makes shards that sum to the whole batch.
TEST(ZooTest, EveryModelReplicatesForDataParallelism) {
  std::map<std::string, graph::ForwardBuilder> builders = {
      {"inception_v3",
       [](int64_t batch, int64_t normalizer) {
         return graph::BuildInceptionV3({.batch_size = batch,
                                         .image_size = 75,
                                         .width_multiplier = 0.25,
                                         .loss_normalizer = normalizer,
                                         .training_step = false});
       }},
      {"rnnlm",
       [](int64_t batch, int64_t normalizer) {
         return graph::BuildRnnLm({.batch_size = batch,
                                   .time_steps = 3,
                                   .hidden = 16,
                                   .embedding = 8,
                                   .vocab = 50,
                                   .loss_normalizer = normalizer,
                                   .training_step = false});
       }},
      {"nmt",
       [](int64_t batch, int64_t normalizer) {
         return graph::BuildNmt({.batch_size = batch,
                                 .layers = 3,
                                 .source_steps = 3,
                                 .target_steps = 2,
                                 .hidden = 16,
                                 .embedding = 8,
                                 .source_vocab = 40,
                                 .target_vocab = 50,
                                 .loss_normalizer = normalizer,
                                 .training_step = false});
       }},
      {"transformer",
       [](int64_t batch, int64_t normalizer) {
         return graph::BuildTransformerEncoder({.batch_size = batch,
                                                .seq_length = 6,
                                                .layers = 2,
                                                .hidden = 16,
                                                .heads = 4,
                                                .ffn = 32,
                                                .vocab = 40,
                                                .max_positions = 8,
                                                .loss_normalizer = normalizer,
                                                .training_step = false});
       }},
  };
  for (const auto& [name, build] : builders) {
    SCOPED_TRACE(name);
    graph::DataParallelGraph dp =
        graph::BuildDataParallel(build, 6, {"cpu:0", "cpu:1"}, {1, 1}, 0.1);
    EXPECT_EQ(dp.shard_sizes, (std::vector<int64_t>{3, 3}));
    EXPECT_NO_THROW(dp.graph.Validate());
    Graph single = build(6, 0);
    EXPECT_EQ(dp.graph.ParameterCount(), 2 * single.ParameterCount());
    // Equal shards build equal attributes: replica 1's forward ops keep replica 0's maps (one
    // map, not one per replica), each with every attribute it was built with.
    const Graph shard = build(3, 6);
    int with_attributes = 0;
    for (const graph::Op& op : shard.ops()) {
      const graph::Op& first = dp.graph.op(*dp.graph.FindOp("r0/" + op.name));
      const graph::Op& second = dp.graph.op(*dp.graph.FindOp("r1/" + op.name));
      EXPECT_TRUE(second.attrs.values() == op.attrs.values()) << op.name;
      if (op.attrs.values().empty()) continue;
      ++with_attributes;
      EXPECT_EQ(&second.attrs.values(), &first.attrs.values()) << op.name;
    }
    EXPECT_GT(with_attributes, 0);
  }
}

// ------------------------------------------------------------------------------------------------
// Placement rules and the expert placements

// A placement file in a fresh temporary folder.
class PlacementFile {
 public:
  explicit PlacementFile(const std::string& text) {
    dir_ = std::filesystem::temp_directory_path() /
           fmt::format("zoo_test_{}_{}", ::getpid(), counter_++);
    std::filesystem::create_directories(dir_);
    std::ofstream(path()) << text;
  }
  ~PlacementFile() { std::filesystem::remove_all(dir_); }
  std::filesystem::path path() const { return dir_ / "p.yaml"; }

 private:
  static inline int counter_ = 0;
  std::filesystem::path dir_;
};

Graph SmallNmt(int64_t layers = 2) {
  return graph::BuildNmt({.batch_size = 2,
                          .layers = layers,
                          .source_steps = 3,
                          .target_steps = 2,
                          .hidden = 4,
                          .embedding = 4,
                          .source_vocab = 10,
                          .target_vocab = 10});
}

int DeviceOf(const Graph& g, const graph::Placement& p, const std::string& op) {
  return p.device_of_op[static_cast<size_t>(*g.FindOp(op))];
}

const std::vector<std::string> kFour = {"cuda:0", "cuda:1", "cuda:2", "cuda:3"};

TEST(PlacementRulesTest, FirstMatchingRuleWinsAfterExactNames) {
  Graph g = SmallNmt();
  PlacementFile file(
      "default: 0\n"
      "placement:\n"
      "  attention/t1/tanh: 3\n"
      "rules:\n"
      "  - {match: \"attention/*\", device: 2}\n"
      "  - {match: \"*/l1/*\", device: 1}\n"
      "  - {match: \"*\", device: cuda:3}\n");
  graph::Placement p = graph::ReadPlacementYaml(file.path(), g, kFour);
  EXPECT_EQ(DeviceOf(g, p, "attention/t1/tanh"), 3);     // exact name beats every rule
  EXPECT_EQ(DeviceOf(g, p, "attention/t0/tanh"), 2);     // first rule
  EXPECT_EQ(DeviceOf(g, p, "attention/memory"), 2);      // '*' matches '/'
  EXPECT_EQ(DeviceOf(g, p, "enc/l1/t2/gate_o/act"), 1);  // second rule
  EXPECT_EQ(DeviceOf(g, p, "dec/l1/t0/cell/h"), 1);
  EXPECT_EQ(DeviceOf(g, p, "enc/l0/t0/cell/h"), 3);  // the catch-all rule, not the default
  EXPECT_NO_THROW(graph::ExpandPlacement(g, p));
}

TEST(PlacementRulesTest, RuleMistakesAreErrorsNamingFileLineAndRule) {
  Graph g = SmallNmt();
  struct Case {
    std::string text;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      // A rule for a layer the model does not have (a typo, or another model size).
      {"default: 0\nrules:\n  - {match: \"enc/l0/*\", device: 1}\n  - {match: \"enc/l7/*\", "
       "device: 2}\n",
       {"p.yaml:4", "rules[1]", "enc/l7/*", "places no op"}},
      // A rule shadowed by an earlier one places nothing either.
      {"default: 0\nrules:\n  - {match: \"enc/*\", device: 1}\n  - {match: \"enc/l1/*\", device: "
       "2}\n",
       {"p.yaml:4", "rules[1]", "enc/l1/*", "earlier rule"}},
      {"default: 0\nrules:\n  - {match: \"enc/*\", devise: 1}\n",
       {"p.yaml:3", "rules[0]", "unknown key 'devise'"}},
      {"default: 0\nrules:\n  - {match: \"enc/*\"}\n", {"p.yaml:3", "rules[0]", "needs 'device'"}},
      {"default: 0\nrules:\n  - {device: 1}\n", {"p.yaml:3", "rules[0]", "needs 'match'"}},
      {"default: 0\nrules:\n  - {match: \"enc/*\", device: 9}\n",
       {"p.yaml:3", "rules[0].device", "unknown device '9'"}},
      {"default: 0\nrules: {match: x}\n", {"p.yaml:2", "rules: expected a list"}},
      {"rules:\n  - {match: \"enc/*\", device: 1}\n", {"p.yaml", "misses", "dec/embed"}},
      {"default: 0\nrule: []\n", {"p.yaml:2", "unknown key 'rule'"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    PlacementFile file(c.text);
    try {
      graph::ReadPlacementYaml(file.path(), g, kFour);
      ADD_FAILURE() << "no error";
    } catch (const graph::PlacementError& error) {
      for (const std::string& part : c.expected) EXPECT_THAT(error.what(), HasSubstr(part));
    }
  }
}

TEST(PlacementRulesTest, VariantsAreChosenByDeviceCountAndModelFacts) {
  Graph g = SmallNmt();
  PlacementFile file(
      "variants:\n"
      "  - when: {devices: 4, layers: 8}\n"
      "    default: 3\n"
      "  - when: {devices: 4, layers: 2}\n"
      "    default: 1\n"
      "  - when: {devices: 2}\n"
      "    default: 0\n"
      "    rules: [{match: \"softmax/*\", device: 1}]\n");
  graph::Placement p = graph::ReadPlacementYaml(file.path(), g, kFour, {{"layers", "2"}});
  EXPECT_EQ(DeviceOf(g, p, "softmax/t0/loss"), 1);
  p = graph::ReadPlacementYaml(file.path(), g, {"cpu:0", "cpu:1"}, {{"layers", "2"}});
  EXPECT_EQ(DeviceOf(g, p, "softmax/t0/loss"), 1);
  EXPECT_EQ(DeviceOf(g, p, "enc/embed"), 0);
  EXPECT_THAT(
      [&] {
        graph::ReadPlacementYaml(file.path(), g, {"cpu:0"}, {{"layers", "2"}});
      },
      ::testing::ThrowsMessage<graph::PlacementError>(
          AllOf(HasSubstr("no variant is for devices=1, layers=2"),
                HasSubstr("line 2 (devices=4, layers=8)"), HasSubstr("line 6 (devices=2)"))));
  // A condition the caller knows nothing about is a mistake in the file.
  EXPECT_THAT([&] { graph::ReadPlacementYaml(file.path(), g, kFour); },
              ::testing::ThrowsMessage<graph::PlacementError>(
                  AllOf(HasSubstr("p.yaml:2"), HasSubstr("variants[0].when.layers"),
                        HasSubstr("unknown condition"))));
  PlacementFile mixed("default: 0\nvariants:\n  - when: {devices: 4}\n    default: 1\n");
  EXPECT_THAT([&] { graph::ReadPlacementYaml(mixed.path(), g, kFour); },
              ::testing::ThrowsMessage<graph::PlacementError>(HasSubstr("inside each variant")));
  PlacementFile no_when("variants:\n  - default: 1\n");
  EXPECT_THAT([&] { graph::ReadPlacementYaml(no_when.path(), g, kFour); },
              ::testing::ThrowsMessage<graph::PlacementError>(
                  AllOf(HasSubstr("p.yaml:2"), HasSubstr("variants[0].when"))));
}

// Every zoo model's expert file loads for 4 and 8 GPUs at the configured sizes and places every
// forward op (the reader refuses files that leave ops unplaced or have rules placing nothing).
TEST(ExpertPlacementTest, EveryZooModelHasAnExpertForFourAndEightGpus) {
  struct Case {
    std::string model;
    std::function<Graph()> build;
    std::map<std::string, std::string> facts;
  };
  // Small batches and few steps: the op names, which the rules address, do not depend on them.
  std::vector<Case> cases = {
      {"inception_v3", [] { return graph::BuildInceptionV3({.batch_size = 2}); }, {}},
      {"rnnlm",
       [] { return graph::BuildRnnLm({.batch_size = 2, .time_steps = 12, .hidden = 8}); },
       {{"layers", "2"}}},
      {"rnnlm",
       [] { return graph::BuildRnnLm({.batch_size = 2, .time_steps = 3, .layers = 4}); },
       {{"layers", "4"}}},
      {"transformer",
       [] { return graph::BuildTransformerEncoder({.batch_size = 2, .seq_length = 4}); },
       {{"layers", "12"}}},
  };
  for (int64_t layers : {2, 4, 8}) {
    cases.push_back(
        {"nmt", [layers] { return SmallNmt(layers); }, {{"layers", std::to_string(layers)}}});
    cases.push_back({"nmt",
                     [layers] {
                       return graph::BuildNmt({.batch_size = 2,
                                               .layers = layers,
                                               .source_steps = 12,
                                               .target_steps = 11,
                                               .hidden = 4,
                                               .embedding = 4,
                                               .source_vocab = 10,
                                               .target_vocab = 10,
                                               .cell = graph::LstmCellKind::kFused});
                     },
                     {{"layers", std::to_string(layers)}}});
  }
  for (const Case& c : cases) {
    Graph g = c.build();
    for (int gpus : {4, 8}) {
      SCOPED_TRACE(fmt::format("{} on {} GPUs, {} ops", c.model, gpus, g.num_ops()));
      std::vector<std::string> devices;
      for (int d = 0; d < gpus; ++d) devices.push_back(fmt::format("cuda:{}", d));
      graph::Placement p;
      ASSERT_NO_THROW(p = graph::ReadPlacementYaml(
                          kSource / "configs/experts" / (c.model + ".yaml"), g, devices, c.facts));
      std::set<int> used;
      for (OpId id : g.OpsInPhase(Phase::kForward)) {
        const int d = p.device_of_op[static_cast<size_t>(id)];
        ASSERT_GE(d, 0) << g.op(id).name;
        ASSERT_LT(d, gpus) << g.op(id).name;
        used.insert(d);
      }
      EXPECT_GE(used.size(), 3u);  // a model-parallel split, not everything on one GPU
      EXPECT_NO_THROW(graph::ExpandPlacement(g, p));
    }
  }
}

TEST(ExpertPlacementTest, NmtExpertPutsLayersAttentionAndSoftmaxApart) {
  Graph g = SmallNmt(8);
  const std::vector<std::string> eight = {"cuda:0", "cuda:1", "cuda:2", "cuda:3",
                                          "cuda:4", "cuda:5", "cuda:6", "cuda:7"};
  graph::Placement p =
      graph::ReadPlacementYaml(kSource / "configs/experts/nmt.yaml", g, eight, {{"layers", "8"}});
  EXPECT_EQ(DeviceOf(g, p, "enc/embed"), 0);
  EXPECT_EQ(DeviceOf(g, p, "enc/l3/t2/gate_g/x"), 3);
  EXPECT_EQ(DeviceOf(g, p, "dec/l3/t1/cell/h"), 3);  // decoder layer i with encoder layer i
  EXPECT_EQ(DeviceOf(g, p, "dec/l7/t1/residual"), 6);
  EXPECT_EQ(DeviceOf(g, p, "attention/t1/context"), 7);
  EXPECT_EQ(DeviceOf(g, p, "softmax/t1/loss"), 7);
  // A size without a variant is reported, naming what there is.
  Graph six = SmallNmt(6);
  EXPECT_THAT(
      [&] {
        graph::ReadPlacementYaml(kSource / "configs/experts/nmt.yaml", six, eight,
                                 {{"layers", "6"}});
      },
      ::testing::ThrowsMessage<graph::PlacementError>(
          AllOf(HasSubstr("nmt.yaml"), HasSubstr("no variant is for devices=8, layers=6"))));
}

// ------------------------------------------------------------------------------------------------
// Config sections and the model factory

config::Config Parse(const std::string& text) { return config::ParseConfig(text, "c.yaml"); }

TEST(ZooConfigTest, SizeSectionsAreReadAndChecked) {
  config::Config c = Parse(
      "model:\n  builtin: nmt\n  nmt: {layers: 4, source_steps: 3, target_steps: 2, hidden: 8,\n"
      "        embedding: 6, source_vocab: 20, target_vocab: 30, cell: fused}\n");
  EXPECT_EQ(c.model.batch_size, 128);  // the model's own default minibatch
  EXPECT_EQ(c.model.options_as<graph::NmtOptions>().layers, 4);
  EXPECT_EQ(c.model.options_as<graph::NmtOptions>().target_vocab, 30);
  EXPECT_EQ(c.model.options_as<graph::NmtOptions>().cell, graph::LstmCellKind::kFused);
  EXPECT_EQ(setup::ExpertFacts(c), (std::map<std::string, std::string>{{"layers", "4"}}));
  Graph g = setup::BuildSingleModel(c);
  EXPECT_EQ(CountOps(g, Phase::kForward, graph::op_types::kLstmCell), 4 * (3 + 2));
  EXPECT_EQ(Parse("model: {builtin: inception_v3}\n").model.batch_size, 32);
  EXPECT_EQ(Parse("model: {builtin: rnnlm}\n").model.batch_size, 64);
  EXPECT_EQ(Parse("model: {builtin: transformer, batch_size: 8}\n").model.batch_size, 8);
  EXPECT_EQ(Parse("model: {builtin: lenet}\n").model.batch_size, 256);

  struct Bad {
    std::string text, expected;
  };
  const std::vector<Bad> bad = {
      {"model:\n  builtin: nmt\n  nmt: {layer: 4}\n",
       "c.yaml:3:9: model.nmt.layer: unknown key 'layer'"},
      {"model:\n  builtin: nmt\n  rnnlm: {layers: 4}\n",
       "c.yaml:3:3: model.rnnlm: sizes of model 'rnnlm', but model.builtin is 'nmt'"},
      {"model:\n  builtin: rnnlm\n  rnnlm: {cell: lstm}\n",
       "model.rnnlm.cell: unknown cell 'lstm'; expected 'gates' or 'fused'"},
      {"model:\n  builtin: inception_v3\n  inception_v3: {image_size: 64}\n",
       "model.inception_v3.image_size: must be >= 75, got 64"},
      {"model:\n  builtin: inception_v3\n  inception_v3: {width_multiplier: 0}\n",
       "model.inception_v3.width_multiplier: must be > 0"},
      {"model:\n  builtin: transformer\n  transformer: {hidden: 100}\n",
       "c.yaml:3:3: model.transformer: 12 heads do not divide hidden 100"},
      {"model:\n  builtin: transformer\n  transformer: {heads: 5}\n",
       "model.transformer.heads: 5 heads do not divide hidden 768"},
      {"model:\n  builtin: transformer\n  transformer: {seq_length: 600}\n",
       "model.transformer.seq_length: seq_length 600 exceeds max_positions 512"},
      {"model:\n  builtin: bert\n", "known models: lenet, inception_v3, rnnlm, nmt, transformer"},
  };
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.text);
    EXPECT_THAT([&] { Parse(b.text); },
                ::testing::ThrowsMessage<config::ConfigError>(HasSubstr(b.expected)));
  }
}

TEST(ZooConfigTest, ReplicatedZooModelsAreBuiltFromConfigs) {
  config::Config c = Parse(
      "model:\n  builtin: transformer\n  batch_size: 4\n  replicas: 2\n"
      "  transformer: {seq_length: 4, layers: 1, hidden: 8, heads: 2, ffn: 8, vocab: 10}\n");
  Graph replicated = setup::StepCache(c).Get({.replicas = c.model.replicas}).graph;
  Graph single = setup::BuildSingleModel(c);
  EXPECT_EQ(replicated.ParameterCount(), 2 * single.ParameterCount());
  EXPECT_TRUE(replicated.FindOp("r1/l0/attention/probs").has_value());
}

// Every ready config in configs/ validates through the real binary (model built, devices and
// sizes checked): a config added or edited without a test of its own is still read here.
TEST(ZooConfigTest, EveryReadyConfigIsValid) {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(kSource / "configs")) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 18u) << "configs/ holds fewer ready configs than it shipped with";
  for (const std::filesystem::path& file : files) {
    test_support::CommandResult r = test_support::RunPlacer("validate --config " + file.string());
    EXPECT_EQ(r.exit_code, 0) << file << ": " << r.output;
    EXPECT_THAT(r.output, HasSubstr("valid (")) << file;
  }
}

// Expert files with variants serve `placer evaluate --placement` too (the layer count comes from
// the config), and `placer train`, which reads Fashion-MNIST, refuses the zoo models up front.
TEST(ZooConfigTest, CommandsReadExpertVariantsAndTrainRefusesZooModels) {
  PlacementFile config(
      "model:\n  builtin: nmt\n  batch_size: 4\n"
      "  nmt: {layers: 2, source_steps: 2, target_steps: 2, hidden: 4, embedding: 4,\n"
      "        source_vocab: 10, target_vocab: 10}\n"
      "devices: [cpu:0, cpu:1, cpu:2, cpu:3]\n"
      "measurement: {warmup_steps: 0, timed_steps: 1}\n");
  const std::string expert = (kSource / "configs/experts/nmt.yaml").string();
  test_support::CommandResult r = test_support::RunPlacer(
      fmt::format("evaluate --config {} --placement {}", config.path().string(), expert));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("placement: " + expert));
  r = test_support::RunPlacer(fmt::format("train --config {}", config.path().string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("model.builtin 'nmt' cannot read"));
}

// ------------------------------------------------------------------------------------------------
// Real training steps on the CPU executor

graph::Placement RandomPlacement(const Graph& g, int devices, uint32_t seed) {
  std::mt19937 rng(seed);
  graph::Placement p =
      graph::Placement::AllOn(g, graph::DeviceNames(test_support::CpuWorkers(devices)), 0);
  std::uniform_int_distribution<int> pick(0, devices - 1);
  for (OpId id : g.OpsInPhase(Phase::kForward)) p.device_of_op[static_cast<size_t>(id)] = pick(rng);
  return p;
}

struct StepOutcome {
  double loss = 0;
  runtime::TensorMap parameters;
};

StepOutcome RunOneStep(const Graph& g, const graph::Placement& placement, int devices,
                       const runtime::TensorMap& initial, const runtime::TensorMap& batch) {
  runtime::Executor executor(g, test_support::CpuWorkers(devices), placement, initial);
  runtime::StepResult r = executor.RunStep(batch);
  return {r.loss, executor.Parameters()};
}

void ExpectSameParameters(const runtime::TensorMap& actual, const runtime::TensorMap& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(actual.count(name)) << name;
    EXPECT_TRUE(at::allclose(actual.at(name), value, 1e-4, 1e-6))
        << "parameter " << name << " differs by "
        << (actual.at(name) - value).abs().max().item<double>();
  }
}

// One training step on one CPU worker, then under random placements over two: same loss, same
// updated weights, and the weights did move.
void ExpectPlacementsAgree(const Graph& g) {
  runtime::TensorMap initial = runtime::InitializeParameters(g, 3);
  runtime::TensorMap batch = runtime::SyntheticBatch(g, 4);
  StepOutcome one = RunOneStep(g, graph::Placement::AllOn(g, {"cpu:0"}, 0), 1, initial, batch);
  EXPECT_TRUE(std::isfinite(one.loss));
  EXPECT_GT(one.loss, 0);
  bool moved = false;
  for (const auto& [name, value] : initial)
    moved = moved || !at::equal(value, one.parameters.at(name));
  EXPECT_TRUE(moved);
  for (uint32_t seed : {1u, 2u}) {
    SCOPED_TRACE(fmt::format("random placement {}", seed));
    StepOutcome two = RunOneStep(g, RandomPlacement(g, 2, seed), 2, initial, batch);
    EXPECT_NEAR(two.loss, one.loss, 1e-5 * std::max(1.0, std::abs(one.loss)));
    ExpectSameParameters(two.parameters, one.parameters);
  }
}

TEST(ZooExecutorTest, TinyInceptionV3StepsAlikeUnderRandomPlacements) {
  ExpectPlacementsAgree(graph::BuildInceptionV3(
      {.batch_size = 2, .image_size = 75, .classes = 5, .width_multiplier = 0.0625}));
}

TEST(ZooExecutorTest, TinyRnnLmStepsAlikeUnderRandomPlacements) {
  for (graph::LstmCellKind cell : {graph::LstmCellKind::kGates, graph::LstmCellKind::kFused}) {
    SCOPED_TRACE(graph::ToString(cell));
    ExpectPlacementsAgree(graph::BuildRnnLm({.batch_size = 3,
                                             .time_steps = 4,
                                             .layers = 2,
                                             .hidden = 6,
                                             .embedding = 5,
                                             .vocab = 7,
                                             .cell = cell}));
  }
}

TEST(ZooExecutorTest, TinyNmtStepsAlikeUnderRandomPlacements) {
  for (graph::LstmCellKind cell : {graph::LstmCellKind::kGates, graph::LstmCellKind::kFused}) {
    SCOPED_TRACE(graph::ToString(cell));
    ExpectPlacementsAgree(graph::BuildNmt({.batch_size = 3,
                                           .layers = 3,  // the third has a residual connection
                                           .source_steps = 3,
                                           .target_steps = 4,
                                           .hidden = 6,
                                           .embedding = 5,
                                           .source_vocab = 9,
                                           .target_vocab = 11,
                                           .cell = cell}));
  }
}

TEST(ZooExecutorTest, TinyTransformerStepsAlikeUnderRandomPlacements) {
  ExpectPlacementsAgree(graph::BuildTransformerEncoder({.batch_size = 2,
                                                        .seq_length = 5,
                                                        .layers = 2,
                                                        .hidden = 8,
                                                        .heads = 2,
                                                        .ffn = 12,
                                                        .vocab = 13,
                                                        .max_positions = 7,
                                                        .classes = 3}));
}

// The gate-by-gate LSTM computes exactly what the fused LstmCell computes: the fused weights, cut
// into the gates' blocks (PyTorch's gate order i, f, g, o), give the same loss and the same
// updated weights.
TEST(ZooExecutorTest, GateByGateLstmEqualsTheFusedCell) {
  graph::RnnLmOptions o{
      .batch_size = 3, .time_steps = 3, .layers = 2, .hidden = 4, .embedding = 5, .vocab = 7};
  o.cell = graph::LstmCellKind::kFused;
  Graph fused = graph::BuildRnnLm(o);
  o.cell = graph::LstmCellKind::kGates;
  Graph gates = graph::BuildRnnLm(o);
  runtime::TensorMap fused_initial = runtime::InitializeParameters(fused, 5);
  runtime::TensorMap batch = runtime::SyntheticBatch(fused, 6);
  // The gates' weights: row block g of the fused matrices and bias.
  auto blocks = [&](const runtime::TensorMap& p, int64_t layer) {
    std::map<std::string, at::Tensor> out;
    const std::string l = fmt::format("l{}", layer);
    const std::vector<std::string> names = {"i", "f", "g", "o"};
    for (int64_t g = 0; g < 4; ++g) {
      const std::string gate = fmt::format("{}/gate_{}", l, names[static_cast<size_t>(g)]);
      out[gate + "/w_x"] = p.at(l + "/w_ih").narrow(0, g * o.hidden, o.hidden).clone();
      out[gate + "/w_h"] = p.at(l + "/w_hh").narrow(0, g * o.hidden, o.hidden).clone();
      out[gate + "/bias"] = p.at(l + "/bias").narrow(0, g * o.hidden, o.hidden).clone();
    }
    return out;
  };
  runtime::TensorMap gates_initial;
  for (const auto& [name, value] : fused_initial) {
    if (name.find("/w_") == std::string::npos && name.find("/bias") == std::string::npos) {
      gates_initial[name] = value;
    }
  }
  for (int64_t l = 0; l < o.layers; ++l) {
    for (auto& [name, value] : blocks(fused_initial, l)) gates_initial[name] = value;
  }
  ASSERT_EQ(gates_initial.size(), gates.Parameters().size());

  StepOutcome f =
      RunOneStep(fused, graph::Placement::AllOn(fused, {"cpu:0"}, 0), 1, fused_initial, batch);
  StepOutcome g =
      RunOneStep(gates, graph::Placement::AllOn(gates, {"cpu:0"}, 0), 1, gates_initial, batch);
  EXPECT_NEAR(g.loss, f.loss, 1e-5);
  runtime::TensorMap expected;
  for (const auto& [name, value] : g.parameters) {
    if (f.parameters.count(name)) expected[name] = f.parameters.at(name);
  }
  for (int64_t l = 0; l < o.layers; ++l) {
    for (auto& [name, value] : blocks(f.parameters, l)) expected[name] = value;
  }
  ExpectSameParameters(g.parameters, expected);
}

}  // namespace
}  // namespace placer
