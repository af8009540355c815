// The earned split of the search's budget (placer/budget_split.h): the policy's share of the
// episodes follows what its episodes gain per evaluation against refinement's, within the floor,
// and the draws are reproducible from the state a checkpoint keeps.
#include "placer/budget_split.h"

#include <gtest/gtest.h>

namespace placer::search {
namespace {

// Episodes alternating between the kinds, each kind's gaining `policy_gain` / `refinement_gain`
// (relative improvement of the best step time) for 640 / 320 evaluations, as the search's
// default episodes judge at most.
EarnedSplit AfterEpisodes(double policy_gain, double refinement_gain, int episodes) {
  EarnedSplit split({}, 1);
  double best = 1.0;
  for (int e = 0; e < episodes; ++e) {
    const bool policy = e % 2 == 1;
    const double after = best * (1 - (policy ? policy_gain : refinement_gain));
    split.Credit(policy ? EpisodeKind::kPolicy : EpisodeKind::kRefinement, best, after,
                 policy ? 640 : 320);
    best = after;
  }
  return split;
}

TEST(EarnedSplitTest, RefinementFirstThenThePolicyThenDraws) {
  EarnedSplit split({}, 7);
  EXPECT_EQ(split.Next(), EpisodeKind::kRefinement);
  split.Credit(EpisodeKind::kRefinement, 1.0, 1.0, 320);
  EXPECT_EQ(split.Next(), EpisodeKind::kPolicy);
}

TEST(EarnedSplitTest, APolicyWhoseEpisodesGainNothingIsDrawnAtTheFloor) {
  const EarnedSplitOptions defaults;
  const EarnedSplit split = AfterEpisodes(0.0, 0.01, 20);
  EXPECT_NEAR(split.PolicyShare(), defaults.min_share, 0.01);
}

TEST(EarnedSplitTest, APolicyWhoseEpisodesGainMorePerEvaluationGetsMostDraws) {
  const EarnedSplitOptions defaults;
  // 3% per 640 evaluations against 0.5% per 320: six times refinement's rate... halved by cost.
  const EarnedSplit split = AfterEpisodes(0.03, 0.005, 20);
  EXPECT_GT(split.PolicyShare(), 0.7);
  EXPECT_LE(split.PolicyShare(), 1 - defaults.min_share);
  // Equal gains per evaluation give equal shares.
  EXPECT_NEAR(AfterEpisodes(0.02, 0.01, 20).PolicyShare(), 0.5, 0.05);
}

TEST(EarnedSplitTest, WhatPaidEarlyStopsHoldingTheBudgetOnceItStopsPaying) {
  EarnedSplit split = AfterEpisodes(0.05, 0.0, 10);
  ASSERT_GT(split.PolicyShare(), 0.9);
  double best = 0.5;
  for (int e = 0; e < 12; ++e) {
    const bool policy = e % 2 == 1;
    const double after = policy ? best : best * 0.99;
    split.Credit(policy ? EpisodeKind::kPolicy : EpisodeKind::kRefinement, best, after,
                 policy ? 640 : 320);
    best = after;
  }
  EXPECT_LT(split.PolicyShare(), 0.2);
}

TEST(EarnedSplitTest, DrawsFollowTheShareAndRepeatFromASavedState) {
  const EarnedSplit split = AfterEpisodes(0.01, 0.01, 6);
  const double share = split.PolicyShare();
  int policy = 0;
  constexpr int kSeeds = 2000;
  for (int seed = 0; seed < kSeeds; ++seed) {
    EarnedSplit drawn({}, static_cast<uint64_t>(seed));
    drawn.LoadState(split.SaveState());
    policy += drawn.Next() == EpisodeKind::kPolicy ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(policy) / kSeeds, share, 0.04);

  EarnedSplit restored({}, 1);
  restored.LoadState(split.SaveState());
  EXPECT_EQ(restored.episodes(), split.episodes());
  EXPECT_DOUBLE_EQ(restored.PolicyShare(), share);
  EXPECT_EQ(restored.Next(), split.Next());
}

}  // namespace
}  // namespace placer::search
