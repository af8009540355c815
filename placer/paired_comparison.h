// Measured answers with their uncertainty. Candidates judged side by side are measured in the
// same interleaved rounds, so the drift of a shared machine (steal time, frequency changes) hits
// all of them alike within a round: their per-round ratios cancel it, which the spread of their
// step times does not. A candidate's ratio to a reference is the geometric mean of those per-round
// ratios, with a percentile bootstrap interval (a fixed seed: the same rounds give the same
// interval). Rows whose ratio to the fastest does not exclude 1 are tied with it, and among tied
// rows the answer is the simplest (a single device, then data parallelism, then anything else):
// a placement that is not reliably faster is not worth its complexity. Rounds go on, for the
// contenders and the references only, while the fastest is tied, up to a budget. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace placer::search {

// In the order of preference among tied rows.
enum class Simplicity { kSingleDevice = 0, kDataParallel = 1, kOther = 2 };

struct BootstrapOptions {
  double confidence = 0.95;  // of the interval
  int resamples = 2000;      // of the rounds, with replacement
  uint64_t seed = 1;         // the same for every comparison: deterministic intervals
};

// A candidate's step time over a reference's, from the rounds that measured both.
struct PairedRatio {
  double ratio = 0;  // geometric mean of the per-round ratios; 0 when no round measured both
  double low = 0;    // the bootstrap interval (low == high == ratio with one round)
  double high = 0;
  int rounds = 0;  // rounds that measured both
  // One round (a deterministic judge, or nothing more to pair) gives no interval.
  bool has_interval() const { return rounds >= 2; }
};

// `candidate[r]` and `reference[r]`: step seconds in round r, NaN where that round did not measure
// the placement or found it invalid. Rounds pair by index; the shorter vector's missing rounds
// are unmeasured.
PairedRatio CompareRounds(std::span<const double> candidate, std::span<const double> reference,
                          const BootstrapOptions& options = {});

// Faster: the whole interval below 1; slower: above 1; tied otherwise. Without an interval (one
// round), only an exact 1 ties.
enum class Versus { kFaster, kTied, kSlower };
Versus Classify(const PairedRatio& ratio);
std::string ToString(Versus versus);  // "faster", "tied", "slower"
// "0.981 [0.952, 1.012]", or "0.981" without an interval.
std::string FormatRatio(const PairedRatio& ratio);

// The geometric mean of the valid rounds; NaN when none is valid.
double GeometricMean(std::span<const double> rounds);

// One placement judged side by side.
struct Entrant {
  std::vector<double> rounds;  // step seconds per round, NaN where unmeasured or invalid
  Simplicity simplicity = Simplicity::kOther;
  bool may_answer = true;  // a row the answer may be (compare's ablations and random search not)
};

struct Standing {
  // Among those that may answer, the lowest step time over a reference's (data parallelism's,
  // else a single device's) paired by round; without a reference, the lowest geometric mean.
  std::optional<size_t> fastest;
  std::optional<size_t> answer;  // the simplest tied with it (the fastest on equal simplicity)
  std::vector<PairedRatio> to_fastest;  // per entrant (ratio 0 when it has no valid round)
  std::vector<bool> tied;  // per entrant: not reliably slower than the fastest (the fastest too)
  // No other entrant that may answer is tied with the fastest: more rounds would change nothing.
  bool settled = true;
};
Standing Rank(const std::vector<Entrant>& entrants, const BootstrapOptions& options = {});

struct RoundOptions {
  int min_rounds = 3;   // rounds of every entrant
  int max_rounds = 10;  // the budget: rounds of the contenders while the fastest is tied
  BootstrapOptions bootstrap;
};

// Measures the entrants `who` (indices into the entrants) in round `round`: their step seconds in
// that order, NaN for an invalid one.
using MeasureRound = std::function<std::vector<double>(int round, const std::vector<size_t>& who)>;

// Rounds 0 .. min_rounds - 1 of every entrant; then, while the ranking is not settled and fewer
// than max_rounds ran, one more round of the entrants tied with the fastest and of the references
// (single devices and data parallelism, so that every ratio to them stays paired). Fills each
// entrant's `rounds`; returns the final standing and sets `rounds_run`.
Standing JudgeInRounds(std::vector<Entrant>& entrants, const RoundOptions& options,
                       const MeasureRound& measure, int* rounds_run = nullptr);

}  // namespace placer::search
