// The learned placer as a specification: on a graph whose optimal placement is known, REINFORCE
// gets within 5% of it and beats uniform random search at the same number of evaluations; a
// search interrupted and resumed ends exactly where an uninterrupted one does.
#include "placer/search.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>

#include "graph/grouping.h"
#include "graph/models.h"
#include "proto/writers.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/simulated_evaluator.h"
#include "tests/support.h"

namespace placer::search {
namespace {

using placer::test_support::CpuWorkers;

// Two independent heavy towers on two devices joined by a slow link: the best placement runs the
// towers side by side and crosses devices as little as possible. Small enough (15 groups) for the
// optimum to be found by enumerating all 2^15 placements with the simulator.
struct ChainsInstance {
  graph::Graph graph = graph::BuildParallelMlp({.batch_size = 64,
                                                .in_features = 64,
                                                .width = 512,
                                                .depth = 3,
                                                .branches = 2,
                                                .classes = 10});
  graph::Grouping grouping = graph::OpPerGroup(graph);
  runtime::DeviceSet devices = CpuWorkers(2);
  sim::RooflineCostModel costs = [] {
    sim::RooflineOptions options;
    options.cpu_to_cpu = {.seconds_per_byte = 5e-10, .latency_seconds = 50e-6};
    return sim::RooflineCostModel(options);
  }();
  std::vector<std::string> names = runtime::DeviceNames(devices);

  double Optimum(runtime::Evaluator& evaluator) const {
    const int groups = grouping.num_groups();
    double best = std::numeric_limits<double>::infinity();
    std::vector<int> devices(static_cast<size_t>(groups));
    for (int64_t code = 0; code < (int64_t{1} << groups); ++code) {
      for (int g = 0; g < groups; ++g) devices[static_cast<size_t>(g)] = (code >> g) & 1;
      runtime::EvaluationResult r =
          evaluator.Evaluate(graph::ToPlacement(graph, grouping, devices, names));
      if (r.valid) best = std::min(best, r.step_seconds);
    }
    return best;
  }
};

SearchOptions LearnerOptions(uint64_t seed) {
  SearchOptions o;
  o.policy_steps = 100;
  o.max_evaluations = 400;
  o.max_wall_seconds = 600;
  o.seed = seed;
  o.policy.hidden_size = 64;
  o.reinforce.learning_rate = 0.005;
  o.reinforce.entropy_weight = 0.01;
  return o;
}

TEST(SearchTest, LearnsTheKnownOptimumAndBeatsRandomSearch) {
  ChainsInstance instance;
  sim::SimulatedEvaluator evaluator(instance.graph, instance.devices, instance.costs);
  const double optimum = instance.Optimum(evaluator);
  const double single =
      evaluator.Evaluate(graph::Placement::AllOn(instance.graph, instance.names, 0)).step_seconds;
  ASSERT_LT(optimum, 0.8 * single) << "the instance must reward spreading the towers";

  std::vector<double> learned, random;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    SearchOutcome policy = RunSearch(instance.graph, instance.grouping, evaluator, instance.names,
                                     LearnerOptions(seed));
    ASSERT_TRUE(policy.found_valid);
    EXPECT_GE(policy.best_seconds, optimum * (1 - 1e-9)) << "nothing beats the optimum";
    SearchOutcome baseline = RandomSearch(instance.graph, instance.grouping, evaluator,
                                          instance.names, policy.evaluations, seed);
    learned.push_back(policy.best_seconds);
    random.push_back(baseline.best_seconds);
  }
  std::sort(learned.begin(), learned.end());
  std::sort(random.begin(), random.end());
  EXPECT_LE(learned[2], 1.05 * optimum) << "median learned vs optimum " << optimum;
  EXPECT_LT(learned[2], random[2]) << "median learned vs median random search";
}

TEST(SearchTest, IsDeterministicForASeed) {
  ChainsInstance instance;
  sim::SimulatedEvaluator evaluator(instance.graph, instance.devices, instance.costs);
  SearchOptions o = LearnerOptions(7);
  o.policy_steps = 8;
  SearchOutcome a = RunSearch(instance.graph, instance.grouping, evaluator, instance.names, o);
  SearchOutcome b = RunSearch(instance.graph, instance.grouping, evaluator, instance.names, o);
  EXPECT_EQ(a.best_group_devices, b.best_group_devices);
  EXPECT_EQ(a.evaluations, b.evaluations);
  ASSERT_EQ(a.curve.size(), b.curve.size());
  for (size_t i = 0; i < a.curve.size(); ++i) {
    EXPECT_DOUBLE_EQ(a.curve[i].mean_seconds, b.curve[i].mean_seconds);
  }
}

std::string ReadFile(const std::filesystem::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(SearchTest, ResumedRunEndsLikeAnUninterruptedOne) {
  ChainsInstance instance;
  sim::SimulatedEvaluator evaluator(instance.graph, instance.devices, instance.costs);
  auto root = std::filesystem::temp_directory_path() / "placer_search_test_resume";
  std::filesystem::remove_all(root);

  SearchOptions whole = LearnerOptions(3);
  whole.policy_steps = 12;
  whole.checkpoint_every = 4;
  whole.run_dir = root / "whole";
  SearchOutcome uninterrupted =
      RunSearch(instance.graph, instance.grouping, evaluator, instance.names, whole);

  // Interrupted after 6 steps (the stop flag is honoured after a step, with a checkpoint)...
  SearchOptions part = whole;
  part.run_dir = root / "parts";
  part.policy_steps = 6;
  RunSearch(instance.graph, instance.grouping, evaluator, instance.names, part);
  // ... then resumed with the full budget.
  part.policy_steps = 12;
  part.resume = true;
  SearchOutcome resumed =
      RunSearch(instance.graph, instance.grouping, evaluator, instance.names, part);

  EXPECT_EQ(resumed.steps, 12);
  EXPECT_EQ(resumed.best_group_devices, uninterrupted.best_group_devices);
  EXPECT_DOUBLE_EQ(resumed.best_seconds, uninterrupted.best_seconds);
  EXPECT_EQ(resumed.evaluations, uninterrupted.evaluations);
  EXPECT_EQ(ReadFile(root / "parts" / "search.csv"), ReadFile(root / "whole" / "search.csv"));
  EXPECT_EQ(ReadFile(root / "parts" / "best_placement.yaml"),
            ReadFile(root / "whole" / "best_placement.yaml"));
  // The exported protobuf reads back as the same placement.
  graph::Placement from_proto = proto::ReadPlacementProto(root / "whole" / "best_placement.pb",
                                                          instance.graph, instance.names);
  EXPECT_EQ(from_proto, uninterrupted.best);
  graph::Placement from_text = proto::ReadPlacementProto(root / "whole" / "best_placement.pbtxt",
                                                         instance.graph, instance.names);
  EXPECT_EQ(from_text, uninterrupted.best);
}

TEST(SearchTest, StopRequestCheckpointsAndAFreshRunRefusesToOverwrite) {
  ChainsInstance instance;
  sim::SimulatedEvaluator evaluator(instance.graph, instance.devices, instance.costs);
  auto dir = std::filesystem::temp_directory_path() / "placer_search_test_stop";
  std::filesystem::remove_all(dir);
  std::atomic<bool> stop{true};
  SearchOptions o = LearnerOptions(5);
  o.run_dir = dir;
  o.stop_requested = &stop;
  SearchOutcome outcome =
      RunSearch(instance.graph, instance.grouping, evaluator, instance.names, o);
  EXPECT_TRUE(outcome.interrupted);
  EXPECT_EQ(outcome.steps, 1);
  EXPECT_TRUE(std::filesystem::exists(dir / "checkpoint.pt"));
  o.stop_requested = nullptr;
  try {
    RunSearch(instance.graph, instance.grouping, evaluator, instance.names, o);
    FAIL() << "a second fresh search in the same directory must not overwrite the first";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("--resume"));
  }
}

TEST(SearchTest, ResumeUnderAnotherGroupingIsRefused) {
  ChainsInstance instance;
  sim::SimulatedEvaluator evaluator(instance.graph, instance.devices, instance.costs);
  auto dir = std::filesystem::temp_directory_path() / "placer_search_test_regroup";
  std::filesystem::remove_all(dir);
  SearchOptions o = LearnerOptions(7);
  o.policy_steps = 2;
  o.run_dir = dir;
  o.grouping_name = "op";
  RunSearch(instance.graph, instance.grouping, evaluator, instance.names, o);
  o.resume = true;
  o.grouping_name = "colocate";
  const graph::Grouping chains =
      graph::MakeGrouping(instance.graph, {graph::GroupingMethod::kColocate, 256});
  ASSERT_NE(chains.num_groups(), instance.grouping.num_groups());
  try {
    RunSearch(instance.graph, chains, evaluator, instance.names, o);
    FAIL() << "a checkpoint of one grouping must not be resumed under another";
  } catch (const std::runtime_error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr(fmt::format(
                                  "this search placed {} groups made by grouping 'op', the config "
                                  "now gives {} groups by grouping 'colocate'",
                                  instance.grouping.num_groups(), chains.num_groups())));
  }
  // The same grouping resumes.
  o.grouping_name = "op";
  o.policy_steps = 3;
  EXPECT_EQ(RunSearch(instance.graph, instance.grouping, evaluator, instance.names, o).steps, 3);
}

TEST(ReinforceTest, ImitationMakesTheWarmStartPlacementLikely) {
  ChainsInstance instance;
  graph::GroupFeatures features = graph::ComputeGroupFeatures(instance.graph, instance.grouping);
  Reinforce learner(features, 2, {.hidden_size = 32}, {.samples_per_step = 16}, 9);
  std::vector<int> target(static_cast<size_t>(instance.grouping.num_groups()), 0);
  for (size_t g = target.size() / 2; g < target.size(); ++g) target[g] = 1;
  EXPECT_LT(learner.Imitate(target, 0.8, 500), 500) << "the warm-up did not converge";
  int agreeing = 0, total = 0;
  for (const std::vector<int>& sample : learner.Sample()) {
    for (size_t g = 0; g < sample.size(); ++g) {
      agreeing += sample[g] == target[g];
      ++total;
    }
  }
  // At a geometric mean of 0.8 per group most groups follow the target, not all.
  EXPECT_GT(agreeing, total * 7 / 10);
  EXPECT_LT(agreeing, total);
  // A geometric mean of 0.8 can leave a group or two below even odds: the greedy decoding is the
  // target nearly everywhere, not necessarily everywhere.
  const std::vector<int> greedy = learner.Greedy();
  int greedy_agreeing = 0;
  for (size_t g = 0; g < target.size(); ++g) greedy_agreeing += greedy[g] == target[g];
  EXPECT_GE(greedy_agreeing, static_cast<int>(target.size()) * 9 / 10);
}

TEST(SearchTest, WarmStartPlacementsAreEvaluatedFirstAndBoundTheResult) {
  ChainsInstance instance;
  sim::SimulatedEvaluator evaluator(instance.graph, instance.devices, instance.costs);
  SearchOptions o = LearnerOptions(4);
  o.policy_steps = 3;
  o.warm_start = {std::vector<int>(static_cast<size_t>(instance.grouping.num_groups()), 1)};
  SearchOutcome outcome =
      RunSearch(instance.graph, instance.grouping, evaluator, instance.names, o);
  double single =
      evaluator.Evaluate(graph::Placement::AllOn(instance.graph, instance.names, 1)).step_seconds;
  EXPECT_LE(outcome.best_seconds, single);
  EXPECT_GE(outcome.evaluations, 1);
}

}  // namespace
}  // namespace placer::search
