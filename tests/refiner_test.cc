// Refinement's edits, one test each: what the edit may change of a candidate (and nothing else),
// on a chain of groups over four devices; and every edit, drawn as refinement draws them, stays in
// the action space.
#include "placer/refiner.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "graph/micro_batches.h"
#include "placer/action_space.h"

namespace placer::search {
namespace {

constexpr int kGroups = 20;
constexpr int kDevices = 4;
constexpr int kTrials = 300;

// Groups 0 -> 1 -> ... -> 19: a group's producers and consumers are its neighbours in the chain.
graph::GroupFeatures Chain() {
  graph::GroupFeatures f;
  f.type_ids.assign(kGroups, 0);
  for (int g = 0; g + 1 < kGroups; ++g) f.edges.push_back({g, g + 1, 1024});
  return f;
}

// Groups 0-9 on device 0 and 10-19 on device 1 (one replica).
Candidate TwoStages(const ActionSpace& space) {
  Candidate c{1, std::vector<int>(kGroups, space.SingleDeviceOption(0))};
  for (int g = kGroups / 2; g < kGroups; ++g) c.options[g] = space.SingleDeviceOption(1);
  return c;
}

std::vector<int> Changed(const Candidate& before, const Candidate& after) {
  std::vector<int> changed;
  for (int g = 0; g < kGroups; ++g) {
    if (before.options[g] != after.options[g]) changed.push_back(g);
  }
  return changed;
}

bool Contiguous(const std::vector<int>& groups) {
  return groups.empty() || groups.back() - groups.front() + 1 == static_cast<int>(groups.size());
}

struct RefinerEdits : ::testing::Test {
  ActionSpace space{kDevices, {1, 2, 4}};
  graph::GroupFeatures features = Chain();
  Refiner refiner{space, features, {}, 5};
  Candidate start = TwoStages(space);
};

TEST_F(RefinerEdits, MoveGroupChangesOneGroup) {
  int moved = 0;
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = refiner.Apply(EditKind::kMoveGroup, start);
    ASSERT_LE(Changed(start, next).size(), 1u);
    ASSERT_EQ(next.replicas, start.replicas);
    moved += next != start;
  }
  // Half of the draws copy a neighbour's option (in a stage, its own), half draw any of 4 devices.
  EXPECT_GT(moved, kTrials / 4);
}

TEST_F(RefinerEdits, ShiftBoundaryMovesTheStageBoundaryByOneGroup) {
  std::set<int> seen;
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = refiner.Apply(EditKind::kShiftBoundary, start);
    const std::vector<int> changed = Changed(start, next);
    ASSERT_EQ(changed.size(), 1u);
    const int g = changed[0];
    ASSERT_TRUE(g == 9 || g == 10) << g;
    // The group takes its neighbour's device across the boundary.
    ASSERT_EQ(next.options[g], start.options[g == 9 ? 10 : 9]);
    seen.insert(g);
  }
  EXPECT_EQ(seen.size(), 2u) << "both directions";
}

TEST_F(RefinerEdits, MoveBandPutsConsecutiveGroupsOnOneOption) {
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = refiner.Apply(EditKind::kMoveBand, start);
    const std::vector<int> changed = Changed(start, next);
    ASSERT_TRUE(Contiguous(changed)) << fmt::format("{}", fmt::join(changed, ","));
    ASSERT_LE(changed.size(), static_cast<size_t>(kGroups / 4));
    for (int g : changed) ASSERT_EQ(next.options[g], next.options[changed.front()]);
  }
}

TEST_F(RefinerEdits, MoveSegmentMovesConnectedGroupsOfOneOptionTogether) {
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = refiner.Apply(EditKind::kMoveSegment, start);
    const std::vector<int> changed = Changed(start, next);
    ASSERT_TRUE(Contiguous(changed)) << fmt::format("{}", fmt::join(changed, ","));
    ASSERT_LE(changed.size(), static_cast<size_t>(kGroups / 4));
    for (int g : changed) {
      ASSERT_EQ(start.options[g], start.options[changed.front()]) << "one option before";
      ASSERT_EQ(next.options[g], next.options[changed.front()]) << "one option after";
    }
  }
}

TEST_F(RefinerEdits, SwapSegmentsTradesTwoSegmentsOptions) {
  int swaps = 0;
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = refiner.Apply(EditKind::kSwapSegments, start);
    std::vector<int> to_first, to_second;  // groups that changed to device 0's or 1's option
    for (int g : Changed(start, next)) {
      if (next.options[g] == start.options[0] && start.options[g] == start.options[19]) {
        to_first.push_back(g);
      } else if (next.options[g] == start.options[19] && start.options[g] == start.options[0]) {
        to_second.push_back(g);
      } else {
        to_second.clear();  // moved elsewhere: the fallback (two groups of one option)
        to_first = {-1};
      }
    }
    if (!to_first.empty() && !to_second.empty()) {
      ++swaps;
      ASSERT_TRUE(Contiguous(to_first));
      ASSERT_TRUE(Contiguous(to_second));
    }
  }
  // Two groups drawn at random are on different stages half of the time.
  EXPECT_GT(swaps, kTrials / 4);
}

TEST_F(RefinerEdits, RebalanceMovesWorkFromTheBusiestDeviceToTheLeastBusy) {
  Candidate spread = start;  // groups 15-19 on device 2, so that device 3 is idle
  for (int g = 15; g < kGroups; ++g) spread.options[g] = space.SingleDeviceOption(2);
  const std::vector<double> busy = {5.0, 9.0, 2.0, 0.5};  // device 1 busiest, device 3 idle
  int moved = 0;
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = refiner.Apply(EditKind::kRebalance, spread, busy);
    for (int g : Changed(spread, next)) {
      ASSERT_EQ(spread.options[g], space.SingleDeviceOption(1)) << "from the busiest, group " << g;
      ASSERT_EQ(next.options[g], space.SingleDeviceOption(3)) << "to the least busy, group " << g;
      ++moved;
    }
  }
  EXPECT_GT(moved, kTrials);
}

TEST_F(RefinerEdits, ChangeReplicasReachesEveryReplicaCountInTheSpace) {
  std::set<int> counts;
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = refiner.Apply(EditKind::kChangeReplicas, start);
    ASSERT_NE(next.replicas, start.replicas);
    ASSERT_NO_THROW(space.Check(next, kGroups)) << FormatCandidate(next);
    counts.insert(next.replicas);
  }
  EXPECT_EQ(counts, (std::set<int>{2, 4}));
}

TEST_F(RefinerEdits, ChangePipelineChangesTheStepShapeAndKeepsTheStages) {
  const ActionSpace pipelines(kDevices, {1}, {1, 2, 4});
  Refiner pipeline_refiner(pipelines, features, {}, 6);
  std::set<std::string> shapes;
  for (int i = 0; i < kTrials; ++i) {
    const Candidate next = pipeline_refiner.Apply(EditKind::kChangeShape, start);
    ASSERT_EQ(next.options, start.options) << "each group keeps its device";
    ASSERT_NE(next, start);
    ASSERT_NO_THROW(pipelines.Check(next, kGroups)) << FormatCandidate(next);
    shapes.insert(fmt::format("{}/{}", next.micro_batches, graph::ToString(next.schedule)));
  }
  EXPECT_EQ(shapes.size(), pipelines.shapes().size() - 1) << "every other shape";
}

// Refinement's own draw over the edits (Refiner::Edit): each draw changes the candidate and stays
// in the space, and the draws reach every replica count and, where the space has them, every
// pipeline shape.
TEST(RefinerTest, EditsStayInTheSpaceAndChangeTheCandidate) {
  const graph::GroupFeatures features = Chain();
  const ActionSpace space(kDevices, {1, 2, 4});
  Refiner refiner(space, features, {}, 11);
  Candidate c = TwoStages(space);
  std::set<int> replica_counts;
  for (int i = 0; i < 500; ++i) {
    const Candidate next = refiner.Edit(c);
    ASSERT_NE(next, c);
    ASSERT_NO_THROW(space.Check(next, kGroups)) << FormatCandidate(next);
    replica_counts.insert(next.replicas);
    c = next;
  }
  EXPECT_EQ(replica_counts.size(), 3u) << "edits change the replica count too";

  const ActionSpace pipelines(kDevices, {1, 2, 4}, {1, 2, 4});
  Refiner pipeline_refiner(pipelines, features, {}, 12);
  std::set<std::string> shapes;
  for (int i = 0; i < 500; ++i) {
    const Candidate next = pipeline_refiner.Edit(c);
    ASSERT_NE(next, c);
    ASSERT_NO_THROW(pipelines.Check(next, kGroups)) << FormatCandidate(next);
    shapes.insert(
        fmt::format("{}/{}/{}", next.replicas, next.micro_batches, graph::ToString(next.schedule)));
    c = next;
  }
  EXPECT_EQ(shapes.size(), pipelines.shapes().size()) << "every shape is reached";
}

// With tensor-parallel shapes in the space, refinement's draws split and unsplit: they reach every
// shape, split ones included, and stay in the space (a split candidate's options as wide as its
// copies at most).
TEST(RefinerTest, EditsReachTensorParallelShapes) {
  const graph::GroupFeatures features = Chain();
  const ActionSpace split(kDevices, {1, 2, 4}, {1}, {}, {{2, 2}, {4, 2}, {4, 4}});
  Refiner refiner(split, features, {}, 13);
  Candidate c = TwoStages(split);
  std::set<std::string> shapes;
  for (int i = 0; i < 500; ++i) {
    const Candidate next = refiner.Edit(c);
    ASSERT_NE(next, c);
    ASSERT_NO_THROW(split.Check(next, kGroups)) << FormatCandidate(next);
    shapes.insert(fmt::format("{}/t{}", next.replicas, next.tensor_ways));
    c = next;
  }
  EXPECT_EQ(shapes.size(), split.shapes().size()) << "every shape is reached";
}

}  // namespace
}  // namespace placer::search
