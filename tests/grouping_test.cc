// Groupings as a specification: every forward op in exactly one group, the group graph acyclic and
// numbered topologically, at most max_groups groups, the co-location rules merging exactly the
// chains they name, the same answer every time, and per-op placements out of per-group devices.
#include "graph/grouping.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/group_features.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "graph/training_step.h"
#include "graph/zoo.h"

namespace placer::graph {
namespace {

constexpr GroupingMethod kMethods[] = {GroupingMethod::kOpPerGroup, GroupingMethod::kColocate,
                                       GroupingMethod::kCoarsen};

// The groups as sets of op names, for readable expectations.
std::vector<std::set<std::string>> Names(const Graph& graph, const Grouping& grouping) {
  std::vector<std::set<std::string>> groups;
  for (const auto& members : grouping.members) {
    std::set<std::string> names;
    for (OpId id : members) names.insert(graph.op(id).name);
    groups.push_back(std::move(names));
  }
  return groups;
}

// Every property a grouping promises, for one graph and one set of options.
void ExpectValid(const Graph& graph, const GroupingOptions& options) {
  SCOPED_TRACE(::testing::Message() << ToString(options.method) << ", max " << options.max_groups);
  const Grouping grouping = MakeGrouping(graph, options);
  ASSERT_NO_THROW(CheckGrouping(graph, grouping));  // exactly once, topological, acyclic
  const int forward = static_cast<int>(graph.OpsInPhase(Phase::kForward).size());
  if (options.method == GroupingMethod::kCoarsen) {
    EXPECT_LE(grouping.num_groups(), options.max_groups);
    EXPECT_EQ(grouping.num_groups(), std::min(forward, options.max_groups));
  }
  if (options.method == GroupingMethod::kOpPerGroup) {
    EXPECT_EQ(grouping.num_groups(), forward);
  }
  EXPECT_EQ(MakeGrouping(graph, options), grouping);  // deterministic
  // A device per group gives every op of the training step a device, backward and update ops
  // their forward op's.
  std::vector<int> group_devices(static_cast<size_t>(grouping.num_groups()));
  for (size_t g = 0; g < group_devices.size(); ++g) group_devices[g] = static_cast<int>(g % 3);
  const Placement placement =
      ToPlacement(graph, grouping, group_devices, {"cpu:0", "cpu:1", "cpu:2"});
  const std::vector<int> device = ExpandPlacement(graph, placement);
  for (OpId id = 0; id < graph.num_ops(); ++id) {
    const Op& op = graph.op(id);
    const OpId anchor = op.phase == Phase::kForward ? id : op.forward_op;
    ASSERT_EQ(device[static_cast<size_t>(id)],
              group_devices[static_cast<size_t>(grouping.group_of_op[static_cast<size_t>(anchor)])])
        << op.name;
  }
  const GroupFeatures features = ComputeGroupFeatures(graph, grouping);
  EXPECT_EQ(features.values.size(),
            static_cast<size_t>(grouping.num_groups() * features.feature_dim));
}

// A random DAG of Linear, Relu and Add ops on [2, 4] activations: each op reads one or two of the
// tensors made so far (recent ones more often, so there are long chains as well as skips and
// fan-outs), in `components` independent parts, each ending in its own loss (summed by the
// training step) after all its unread tensors are added up.
Graph RandomDag(uint64_t seed, int ops, int components, bool training_step) {
  std::mt19937_64 rng(seed);
  Graph graph;
  ModelBuilder b(graph);
  const TensorId labels = b.Input("labels", {2}, DType::kInt64, TensorKind::kLabel);
  for (int c = 0; c < components; ++c) {
    const std::string prefix = "c" + std::to_string(c) + "/";
    std::vector<TensorId> made = {b.Input(prefix + "x", {2, 4})};
    std::vector<bool> read = {false};
    auto pick = [&] {
      std::geometric_distribution<int> back(0.3);
      const int k = static_cast<int>(made.size()) - 1 - back(rng) % static_cast<int>(made.size());
      read[static_cast<size_t>(k)] = true;
      return made[static_cast<size_t>(k)];
    };
    const int count = std::max(1, ops / components);
    for (int i = 0; i < count; ++i) {
      const std::string name = prefix + "op" + std::to_string(i);
      const int kind = static_cast<int>(rng() % 10);
      TensorId out;
      if (kind < 4) {
        out = b.Linear(name, pick(), 4, 0.1);
      } else if (kind < 7) {
        out = b.Relu(name, pick());
      } else if (kind < 8) {
        // Weight preprocessing: an op on a parameter only, read by one Linear.
        const TensorId w = b.Parameter(name + ".w", {4, 4}, {Initializer::Kind::kNormal, 0.1});
        const TensorId prep = b.Relu(name + "/prep", w);
        out = b.Apply(name, "Linear", {pick(), prep});
      } else {
        const TensorId x = pick();
        out = b.Apply(name, "Add", {x, pick()});
      }
      made.push_back(out);
      read.push_back(false);
    }
    TensorId sum = kNoOp;
    for (size_t k = 1; k < made.size(); ++k) {
      if (read[k]) continue;
      sum = sum == kNoOp ? made[k]
                         : b.Apply(prefix + "sum" + std::to_string(k), "Add", {sum, made[k]});
    }
    const TensorId logits = b.Linear(prefix + "head", sum, 3, 0.1);
    b.SoftmaxCrossEntropy(prefix + "loss", logits, labels);
  }
  if (training_step) AppendBackwardAndUpdate(graph, 0.1);
  graph.Validate();
  return graph;
}

TEST(GroupingTest, MethodNamesRoundTrip) {
  for (GroupingMethod method : kMethods) {
    EXPECT_EQ(ParseGroupingMethod(ToString(method)), method);
  }
  EXPECT_EQ(ParseGroupingMethod("learned"), std::nullopt);
}

TEST(GroupingTest, OpPerGroupIsTheOldGrouping) {
  const Graph lenet = BuildLeNet({});
  EXPECT_EQ(MakeGrouping(lenet, {GroupingMethod::kOpPerGroup, 1}), OpPerGroup(lenet));
  // Coarsening leaves a graph that already fits alone.
  EXPECT_EQ(MakeGrouping(lenet, {GroupingMethod::kCoarsen, 256}), OpPerGroup(lenet));
  EXPECT_THROW(MakeGrouping(lenet, {GroupingMethod::kCoarsen, 0}), GraphError);
}

// x -> a -> b -> c -> {d, e} -> f -> h -> g -> loss, and h also reads prep = Relu(P) of a
// parameter P: prep joins h (weight preprocessing, one consumer); a-b-c is a chain (c has two
// consumers, so it ends there); d and e stay alone (f has two producers); f-h-g-loss is a chain
// (h's other producer, prep, is absorbed and does not count).
TEST(GroupingTest, ColocationMergesExactlyTheSingleConsumerChains) {
  Graph graph;
  ModelBuilder b(graph);
  const TensorId x = b.Input("x", {2, 4});
  const TensorId labels = b.Input("labels", {2}, DType::kInt64, TensorKind::kLabel);
  const TensorId p = b.Parameter("P", {4, 4}, {Initializer::Kind::kNormal, 0.1});
  const TensorId prep = b.Relu("prep", p);
  const TensorId c = b.Linear("c", b.Relu("b", b.Linear("a", x, 4, 0.1)), 4, 0.1);
  const TensorId f = b.Apply("f", "Add", {b.Relu("d", c), b.Relu("e", c)});
  const TensorId h = b.Apply("h", "Linear", {f, prep});
  b.SoftmaxCrossEntropy("loss", b.Linear("g", h, 3, 0.1), labels);
  AppendBackwardAndUpdate(graph, 0.1);
  graph.Validate();

  const Grouping grouping = MakeGrouping(graph, {GroupingMethod::kColocate, 1});
  ASSERT_NO_THROW(CheckGrouping(graph, grouping));
  using Set = std::set<std::string>;
  EXPECT_THAT(Names(graph, grouping), ::testing::ElementsAre(Set{"a", "b", "c"}, Set{"d"}, Set{"e"},
                                                             Set{"prep", "f", "h", "g", "loss"}));
  // Members in topological order: prep was added first.
  EXPECT_EQ(graph.op(grouping.members[3].front()).name, "prep");
  EXPECT_EQ(graph.op(grouping.members[3].back()).name, "loss");
  // LeNet is one chain from conv1 to the loss.
  const Graph lenet = BuildLeNet({});
  EXPECT_EQ(MakeGrouping(lenet, {GroupingMethod::kColocate, 256}).num_groups(), 1);
  // The parallel MLP: each tower is a chain up to the Adds that join them.
  const Graph mlp = BuildParallelMlp({.depth = 3, .branches = 3});
  const Grouping towers = MakeGrouping(mlp, {GroupingMethod::kColocate, 256});
  ASSERT_NO_THROW(CheckGrouping(mlp, towers));
  auto tower = [](int t) {
    std::set<std::string> ops;
    for (int l = 0; l < 3; ++l) {
      ops.insert(fmt::format("tower{}.fc{}", t, l));
      ops.insert(fmt::format("tower{}.fc{}.relu", t, l));
    }
    return ops;
  };
  // merge1 = tower0 + tower1 feeds only merge2, but merge2 also reads tower2: not a chain.
  EXPECT_THAT(Names(mlp, towers),
              ::testing::ElementsAre(tower(0), tower(1), Set{"merge1"}, tower(2),
                                     Set{"merge2", "classifier", "loss"}));
}

TEST(GroupingTest, CheckGroupingRejectsACyclicGroupGraph) {
  // c -> d -> f with c and f together and d apart: group {c, f} feeds d, which feeds it back.
  Graph graph;
  ModelBuilder b(graph);
  const TensorId c = b.Relu("c", b.Input("x", {2, 4}));
  b.Apply("f", "Add", {c, b.Relu("d", c)});
  Grouping grouping;
  grouping.group_of_op = {0, 1, 0};
  grouping.members = {{0, 2}, {1}};
  EXPECT_THROW(CheckGrouping(graph, grouping), GraphError);
  grouping.group_of_op = {0, 1, 1};
  grouping.members = {{0}, {1, 2}};
  EXPECT_NO_THROW(CheckGrouping(graph, grouping));
}

TEST(GroupingTest, BuiltInModelsAtEveryBound) {
  const Graph lenet = BuildLeNet({});
  const Graph mlp = BuildParallelMlp({.depth = 4, .branches = 4});
  for (const Graph* graph : {&lenet, &mlp}) {
    for (GroupingMethod method : kMethods) {
      for (int max_groups : {1, 2, 3, 5, 8, 13, 256}) ExpectValid(*graph, {method, max_groups});
    }
  }
}

// The zoo's recurrent and convolutional graphs (gate-level LSTM cells, attention, inception
// branches), small.
TEST(GroupingTest, ZooModels) {
  const Graph nmt = BuildNmt({.batch_size = 2,
                              .layers = 3,
                              .source_steps = 4,
                              .target_steps = 3,
                              .hidden = 8,
                              .embedding = 8,
                              .source_vocab = 11,
                              .target_vocab = 13});
  const Graph inception =
      BuildInceptionV3({.batch_size = 1, .image_size = 75, .classes = 5, .width_multiplier = 0.1});
  for (const Graph* graph : {&nmt, &inception}) {
    for (GroupingMethod method : kMethods) {
      for (int max_groups : {1, 4, 32, 100}) ExpectValid(*graph, {method, max_groups});
    }
  }
}

TEST(GroupingTest, RandomDags) {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    SCOPED_TRACE(::testing::Message() << "seed " << seed);
    // Mostly small graphs, every tenth one of 500 to 3,000 forward ops: far more than the bound.
    const int ops = seed % 10 == 0 ? 500 + static_cast<int>(seed * 37 % 2500)
                                   : 3 + static_cast<int>(seed * 13 % 80);
    const int components = 1 + static_cast<int>(seed % 4);
    const Graph graph = RandomDag(seed, ops, components, /*training_step=*/seed % 3 != 0);
    for (GroupingMethod method : kMethods) {
      for (int max_groups : {1, 3, 16, 64}) {
        if (method != GroupingMethod::kCoarsen && max_groups != 1) continue;
        ExpectValid(graph, {method, max_groups});
        if (HasFatalFailure()) return;
      }
    }
  }
}

// Hundreds of unconnected parts leave nothing to merge along edges or shared tensors: coarsening
// falls back to merging groups adjacent in a topological order, which is always safe.
TEST(GroupingTest, ManyUnconnectedParts) {
  const Graph graph = RandomDag(7, 1500, 500, /*training_step=*/true);
  for (int max_groups : {1, 16, 100, 499})
    ExpectValid(graph, {GroupingMethod::kCoarsen, max_groups});
}

// Data-parallel replicas share no forward op: coarsening never mixes them while there are at least
// as many groups as replicas, so "replica r on device r" stays a placement of the groups.
TEST(GroupingTest, CoarseningKeepsReplicasApart) {
  const DataParallelGraph dp = BuildDataParallel(
      [](int64_t batch, int64_t normalizer) {
        return BuildLeNet(
            {.batch_size = batch, .loss_normalizer = normalizer, .training_step = false});
      },
      8, {"cpu:0", "cpu:1", "cpu:2"}, {1, 1, 1}, 0.1);
  for (int max_groups : {3, 4, 7, 20}) {
    const Grouping grouping = MakeGrouping(dp.graph, {GroupingMethod::kCoarsen, max_groups});
    ASSERT_NO_THROW(CheckGrouping(dp.graph, grouping));
    for (const auto& members : grouping.members) {
      std::set<std::string> replicas;
      for (OpId id : members) {
        const std::string& name = dp.graph.op(id).name;
        replicas.insert(name.substr(0, name.find('/')));
      }
      EXPECT_EQ(replicas.size(), 1u) << "max_groups " << max_groups;
    }
  }
}

// Merged groups stay balanced: on a long uniform chain no group holds much more than its share.
TEST(GroupingTest, CoarseningBalancesCost) {
  Graph graph;
  ModelBuilder b(graph);
  TensorId x = b.Input("x", {2, 4});
  for (int i = 0; i < 1000; ++i) x = b.Linear(fmt::format("l{}", i), x, 4, 0.1);
  const Grouping grouping = MakeGrouping(graph, {GroupingMethod::kCoarsen, 50});
  ASSERT_NO_THROW(CheckGrouping(graph, grouping));
  ASSERT_EQ(grouping.num_groups(), 50);
  for (const auto& members : grouping.members) EXPECT_LE(members.size(), 30u);
}

TEST(GroupingTest, FingerprintTellsGroupingsApart) {
  const Graph mlp = BuildParallelMlp({});
  const Grouping ops = MakeGrouping(mlp, {GroupingMethod::kOpPerGroup, 256});
  const Grouping chains = MakeGrouping(mlp, {GroupingMethod::kColocate, 256});
  EXPECT_EQ(GroupingFingerprint(ops), GroupingFingerprint(OpPerGroup(mlp)));
  EXPECT_NE(GroupingFingerprint(ops), GroupingFingerprint(chains));
  EXPECT_EQ(GroupingFingerprint(ops).size(), 16u);
}

}  // namespace
}  // namespace placer::graph

namespace placer::graph {
namespace {

// A 3-layer NMT small enough to group in milliseconds, its ops named by layer and time step.
Graph SmallNmt() {
  return BuildNmt({.batch_size = 2,
                   .layers = 3,
                   .source_steps = 6,
                   .target_steps = 5,
                   .hidden = 8,
                   .embedding = 8,
                   .source_vocab = 11,
                   .target_vocab = 13});
}

// A layer-per-device placement (classes by layer, as the NMT expert's) stays expressible: every
// group holds one class, and the group-level view of the placement is the placement itself.
TEST(GroupingTest, KeepApartClassesStayInSeparateGroupsWhileTheyCan) {
  const Graph nmt = SmallNmt();
  Placement by_layer = Placement::AllOn(nmt, {"gpu0", "gpu1", "gpu2", "gpu3"}, 3);
  for (OpId id : nmt.OpsInPhase(Phase::kForward)) {
    const std::string& name = nmt.op(id).name;
    for (int layer = 0; layer < 3; ++layer) {
      if (name.find(fmt::format("/l{}/", layer)) != std::string::npos) {
        by_layer.device_of_op[static_cast<size_t>(id)] = layer;
      }
    }
  }
  GroupingOptions options{GroupingMethod::kCoarsen, 24, by_layer.device_of_op};
  const Grouping grouping = MakeGrouping(nmt, options);
  EXPECT_LE(grouping.num_groups(), 24);
  CheckGrouping(nmt, grouping);
  for (const auto& members : grouping.members) {
    for (OpId id : members) {
      EXPECT_EQ(by_layer.device_of_op[static_cast<size_t>(id)],
                by_layer.device_of_op[static_cast<size_t>(members.front())])
          << nmt.op(id).name << " shares a group with " << nmt.op(members.front()).name;
    }
  }
  EXPECT_EQ(ToPlacement(nmt, grouping, GroupDevices(nmt, grouping, by_layer), by_layer.devices)
                .device_of_op,
            by_layer.device_of_op);
  // Fewer groups than classes allow: classes mix, and the bound still holds.
  options.max_groups = 2;
  EXPECT_LE(MakeGrouping(nmt, options).num_groups(), 2);
}

TEST(GroupingTest, NameClassesFollowTheFirstPathComponentsOfForwardOps) {
  const Graph nmt = SmallNmt();
  const std::vector<int> classes = NameClasses(nmt, 2);
  ASSERT_EQ(classes.size(), static_cast<size_t>(nmt.num_ops()));
  std::map<int, std::string> prefix_of_class;
  for (OpId id = 0; id < nmt.num_ops(); ++id) {
    const Op& op = nmt.op(id);
    const int c = classes[static_cast<size_t>(id)];
    if (op.phase != Phase::kForward) {
      EXPECT_EQ(c, -1) << op.name;
      continue;
    }
    ASSERT_GE(c, 0) << op.name;
    const size_t second = op.name.find('/', op.name.find('/') + 1);
    const std::string prefix = op.name.substr(0, second);
    const auto [it, added] = prefix_of_class.emplace(c, prefix);
    EXPECT_EQ(it->second, prefix) << op.name << " shares class " << c << " with another prefix";
  }
  // Distinct prefixes get distinct classes: layers of the encoder are told apart.
  std::set<std::string> prefixes;
  for (const auto& [c, prefix] : prefix_of_class) prefixes.insert(prefix);
  EXPECT_EQ(prefixes.size(), prefix_of_class.size());
  EXPECT_TRUE(prefixes.contains("enc/l0") && prefixes.contains("enc/l2"))
      << fmt::format("{}", fmt::join(prefixes, " "));
}

TEST(GroupingTest, CombinedClassesSeparateWhatEitherSeparates) {
  EXPECT_EQ(CombineClasses({}, {0, 1}), (std::vector<int>{0, 1}));
  EXPECT_EQ(CombineClasses({0, 1}, {}), (std::vector<int>{0, 1}));
  const std::vector<int> combined = CombineClasses({0, 0, 0, 1, -1}, {0, 1, 0, 1, -1});
  EXPECT_EQ(combined[0], combined[2]);
  EXPECT_NE(combined[0], combined[1]);
  EXPECT_NE(combined[1], combined[3]);
  EXPECT_EQ(combined[4], -1);
  EXPECT_THROW(CombineClasses({0}, {0, 1}), GraphError);
}

}  // namespace
}  // namespace placer::graph
