// The paired comparison of placements judged side by side (placer/paired_comparison.h): ratios
// and intervals computed by hand, the properties a verdict must have (a placement twice as fast
// every round is faster; one measured alike up to noise is tied; pairing cancels the drift that
// hits a whole round), the simplest of the tied rows as the answer, and rounds that go on while
// the fastest is tied, up to the budget, for the contenders and the references only.
#include "placer/paired_comparison.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace placer::search {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(PairedComparisonTest, TwoRoundsGiveTheGeometricMeanAndAnIntervalFromOneRatioToTheOther) {
  // Resampling two rounds draws {a, a} a quarter of the time, {b, b} a quarter, and the mean of
  // logs otherwise: the 2.5% and 97.5% quantiles are exactly the two ratios.
  const PairedRatio r = CompareRounds(std::vector{8.0, 25.0}, std::vector{10.0, 20.0});
  EXPECT_EQ(r.rounds, 2);
  EXPECT_NEAR(r.ratio, 1.0, 1e-12);  // sqrt(0.8 * 1.25)
  EXPECT_NEAR(r.low, 0.8, 1e-12);
  EXPECT_NEAR(r.high, 1.25, 1e-12);
  EXPECT_EQ(Classify(r), Versus::kTied);
  EXPECT_EQ(FormatRatio(r), "1.000 [0.800, 1.250]");
}

TEST(PairedComparisonTest, RoundsPairByIndexAndSkipWhatEitherDidNotMeasure) {
  // Round 1 is invalid for the candidate, round 3 was not run for the reference.
  const PairedRatio r =
      CompareRounds(std::vector{5.0, kNaN, 5.0, 5.0}, std::vector{10.0, 10.0, 10.0});
  EXPECT_EQ(r.rounds, 2);
  EXPECT_DOUBLE_EQ(r.ratio, 0.5);
  EXPECT_DOUBLE_EQ(r.low, 0.5);
  EXPECT_DOUBLE_EQ(r.high, 0.5);
  EXPECT_EQ(CompareRounds(std::vector{kNaN}, std::vector{1.0}).rounds, 0);
}

TEST(PairedComparisonTest, OneRoundHasNoIntervalAndOnlyAnExactOneTies) {
  const PairedRatio same = CompareRounds(std::vector{3e-3}, std::vector{3e-3});
  EXPECT_FALSE(same.has_interval());
  EXPECT_EQ(Classify(same), Versus::kTied);
  EXPECT_EQ(FormatRatio(same), "1.000");
  EXPECT_EQ(Classify(CompareRounds(std::vector{2.999e-3}, std::vector{3e-3})), Versus::kFaster);
  EXPECT_EQ(Classify(CompareRounds(std::vector{3.001e-3}, std::vector{3e-3})), Versus::kSlower);
}

// Ten rounds of a shared machine: each round's drift (+-20%) hits every placement measured in it.
std::vector<double> Drifting(double seconds, const std::vector<double>& noise = {}) {
  const std::vector<double> drift = {1.00, 1.18, 0.85, 1.10, 0.93, 1.20, 0.81, 1.05, 0.97, 1.12};
  std::vector<double> rounds;
  for (size_t r = 0; r < drift.size(); ++r) {
    rounds.push_back(seconds * drift[r] * (r < noise.size() ? 1 + noise[r] : 1));
  }
  return rounds;
}

const std::vector<double> kNoise = {0.02,  -0.03, 0.01,  -0.01,  0.03,
                                    -0.02, 0.0,   0.015, -0.015, 0.01};

TEST(PairedComparisonTest, APlacementTwiceAsFastEveryRoundIsFaster) {
  const PairedRatio r = CompareRounds(Drifting(0.05, kNoise), Drifting(0.1));
  EXPECT_EQ(Classify(r), Versus::kFaster);
  EXPECT_NEAR(r.ratio, 0.5, 0.01);
  EXPECT_LT(r.high, 0.52);
  EXPECT_EQ(Classify(CompareRounds(Drifting(0.1), Drifting(0.05, kNoise))), Versus::kSlower);
}

TEST(PairedComparisonTest, APlacementMeasuredAlikeUpToNoiseIsTied) {
  const PairedRatio r = CompareRounds(Drifting(0.1, kNoise), Drifting(0.1));
  EXPECT_EQ(Classify(r), Versus::kTied);
  EXPECT_LT(r.low, 1);
  EXPECT_GT(r.high, 1);
  // The interval lies within the rounds' ratios (3% either way) and narrows with more rounds.
  EXPECT_GT(r.low, 0.97);
  EXPECT_LT(r.high, 1.03);
}

TEST(PairedComparisonTest, PairingByRoundCancelsTheDriftThatHitsAWholeRound) {
  // 5% faster in every round, while the rounds themselves range over +-20%: the ranges of the
  // step times overlap, their paired ratio does not reach 1.
  const PairedRatio r = CompareRounds(Drifting(0.095), Drifting(0.1));
  EXPECT_EQ(Classify(r), Versus::kFaster);
  EXPECT_NEAR(r.high, 0.95, 1e-9);
}

TEST(PairedComparisonTest, TheSameRoundsGiveTheSameInterval) {
  const PairedRatio a = CompareRounds(Drifting(0.1, kNoise), Drifting(0.1));
  const PairedRatio b = CompareRounds(Drifting(0.1, kNoise), Drifting(0.1));
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
}

Entrant Of(std::vector<double> rounds, Simplicity simplicity = Simplicity::kOther,
           bool may_answer = true) {
  return {std::move(rounds), simplicity, may_answer};
}

TEST(PairedComparisonTest, AmongTiedRowsTheSimplestAnswersAndTheFastestIsNamed) {
  // A model-parallel placement 0.5% faster up to 3% noise, data parallelism, a single device twice
  // as slow.
  const std::vector<Entrant> entrants = {Of(Drifting(0.0995, kNoise)),
                                         Of(Drifting(0.1), Simplicity::kDataParallel),
                                         Of(Drifting(0.2), Simplicity::kSingleDevice)};
  const Standing s = Rank(entrants);
  EXPECT_EQ(s.fastest, 0u);
  EXPECT_THAT(s.tied, ::testing::ElementsAre(true, true, false));
  EXPECT_EQ(s.answer, 1u) << "data parallelism, the simpler of the two tied";
  EXPECT_FALSE(s.settled);
}

TEST(PairedComparisonTest, AReliablyFasterRowAnswersAndSettlesTheRanking) {
  const std::vector<Entrant> entrants = {Of(Drifting(0.1), Simplicity::kDataParallel),
                                         Of(Drifting(0.08, kNoise)),
                                         Of(Drifting(0.2), Simplicity::kSingleDevice)};
  const Standing s = Rank(entrants);
  EXPECT_EQ(s.fastest, 1u);
  EXPECT_EQ(s.answer, 1u);
  EXPECT_THAT(s.tied, ::testing::ElementsAre(false, true, false));
  EXPECT_TRUE(s.settled);
}

TEST(PairedComparisonTest, RowsThatMayNotAnswerAreRankedAgainstTheFastestButNeverAnswer) {
  // Random search (say) measures fastest; it is not one of the answers.
  const std::vector<Entrant> entrants = {Of(Drifting(0.05), Simplicity::kOther, false),
                                         Of(Drifting(0.1), Simplicity::kDataParallel),
                                         Of({kNaN, kNaN}), Of(Drifting(0.2))};
  const Standing s = Rank(entrants);
  EXPECT_EQ(s.fastest, 1u);
  EXPECT_EQ(s.answer, 1u);
  EXPECT_EQ(Classify(s.to_fastest[0]), Versus::kFaster);
  EXPECT_FALSE(s.tied[2]) << "never valid";
  EXPECT_EQ(s.to_fastest[2].rounds, 0);
}

TEST(PairedComparisonTest, EntrantsMeasuredInDifferentRoundsRankByTheirRatioToAReference) {
  // The machine slows down twofold after round 2; the placement 10% faster than data parallelism
  // was measured throughout, the one 5% faster only before: by the geometric means of their own
  // rounds the second would look faster.
  const std::vector<double> drift = {1, 1, 1, 2, 2, 2};
  std::vector<double> dp, ten, five;
  for (size_t r = 0; r < drift.size(); ++r) {
    dp.push_back(0.1 * drift[r]);
    ten.push_back(0.09 * drift[r]);
    five.push_back(r < 3 ? 0.095 * drift[r] : kNaN);
  }
  ASSERT_GT(GeometricMean(ten), GeometricMean(five));
  const Standing s = Rank({Of(dp, Simplicity::kDataParallel), Of(ten), Of(five)});
  EXPECT_EQ(s.fastest, 1u);
  EXPECT_EQ(Classify(s.to_fastest[2]), Versus::kSlower);
}

// A judge of fixed step times, each round's drift and noise applied, that counts what it measures.
struct FakeJudge {
  std::vector<double> seconds;
  std::vector<int> measured;
  MeasureRound Measure() {
    measured.assign(seconds.size(), 0);
    return [this](int round, const std::vector<size_t>& who) {
      std::vector<double> out;
      for (size_t i : who) {
        ++measured[i];
        const auto r = static_cast<size_t>(round) % kNoise.size();
        out.push_back(Drifting(seconds[i], kNoise)[r] * (i % 2 == 0 ? 1 : 1 - kNoise[r] / 2));
      }
      return out;
    };
  }
};

TEST(PairedComparisonTest, RoundsGoOnWhileTheFastestIsTiedUpToTheBudget) {
  // A placement within noise of data parallelism: never settled, so every round of the budget is
  // run, for the two tied rows and the references, not for the clearly slower placement.
  FakeJudge judge{{0.1, 0.1, 0.3, 0.25}};
  std::vector<Entrant> entrants = {Of({}), Of({}, Simplicity::kDataParallel), Of({}),
                                   Of({}, Simplicity::kSingleDevice)};
  int rounds = 0;
  const Standing s =
      JudgeInRounds(entrants, {.min_rounds = 3, .max_rounds = 8}, judge.Measure(), &rounds);
  EXPECT_EQ(rounds, 8);
  EXPECT_THAT(judge.measured, ::testing::ElementsAre(8, 8, 3, 8));
  EXPECT_EQ(entrants[2].rounds.size(), 8u);
  EXPECT_TRUE(std::isnan(entrants[2].rounds[5])) << "not measured in the extra rounds";
  EXPECT_FALSE(s.settled);
  EXPECT_EQ(s.answer, 1u);
}

TEST(PairedComparisonTest, RoundsStopAtTheMinimumOnceTheFastestIsReliablyFaster) {
  FakeJudge judge{{0.1, 0.05, 0.3}};
  std::vector<Entrant> entrants = {Of({}, Simplicity::kDataParallel), Of({}), Of({})};
  int rounds = 0;
  const Standing s =
      JudgeInRounds(entrants, {.min_rounds = 3, .max_rounds = 8}, judge.Measure(), &rounds);
  EXPECT_EQ(rounds, 3);
  EXPECT_THAT(judge.measured, ::testing::ElementsAre(3, 3, 3));
  EXPECT_TRUE(s.settled);
  EXPECT_EQ(s.answer, 1u);
}

}  // namespace
}  // namespace placer::search
