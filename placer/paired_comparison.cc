#include "placer/paired_comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <random>

namespace placer::search {
namespace {

bool Measured(double seconds) { return std::isfinite(seconds) && seconds > 0; }

double Mean(const std::vector<double>& values) {
  double sum = 0;
  for (double v : values) sum += v;
  return sum / static_cast<double>(values.size());
}

// The q-quantile of sorted values, interpolated between the nearest two.
double Quantile(const std::vector<double>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(at));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

// log(candidate / reference) of every round that measured both.
std::vector<double> LogRatios(std::span<const double> candidate,
                              std::span<const double> reference) {
  std::vector<double> logs;
  for (size_t r = 0; r < std::min(candidate.size(), reference.size()); ++r) {
    if (Measured(candidate[r]) && Measured(reference[r])) {
      logs.push_back(std::log(candidate[r] / reference[r]));
    }
  }
  return logs;
}

// What the entrants are ranked by. The extra rounds measure the contenders only, and one that
// was not tied for a round or two missed those: the geometric means of their own rounds would
// then compare rounds of different drift. Each entrant's step time over an anchor measured in
// every round (a reference: data parallelism, else a single device), paired by round, cancels
// it; without a reference, the geometric mean of its own rounds. NaN: never valid.
std::vector<double> Estimates(const std::vector<Entrant>& entrants) {
  std::optional<size_t> anchor;
  auto valid_rounds = [&](size_t i) {
    return std::count_if(entrants[i].rounds.begin(), entrants[i].rounds.end(), Measured);
  };
  for (size_t i = 0; i < entrants.size(); ++i) {
    if (entrants[i].simplicity == Simplicity::kOther || valid_rounds(i) == 0) continue;
    if (!anchor || valid_rounds(i) > valid_rounds(*anchor) ||
        (valid_rounds(i) == valid_rounds(*anchor) &&
         entrants[i].simplicity > entrants[*anchor].simplicity)) {
      anchor = i;
    }
  }
  std::vector<double> estimates;
  for (const Entrant& e : entrants) {
    if (!anchor) {
      estimates.push_back(GeometricMean(e.rounds));
      continue;
    }
    const std::vector<double> logs = LogRatios(e.rounds, entrants[*anchor].rounds);
    estimates.push_back(logs.empty() ? std::numeric_limits<double>::quiet_NaN()
                                     : std::exp(Mean(logs)));
  }
  return estimates;
}

}  // namespace

PairedRatio CompareRounds(std::span<const double> candidate, std::span<const double> reference,
                          const BootstrapOptions& options) {
  // The mean of log ratios, not their median: with the few rounds a measurement affords (three
  // by default) a median takes one of the measured values only, and so does its bootstrap.
  const std::vector<double> logs = LogRatios(candidate, reference);
  PairedRatio out;
  out.rounds = static_cast<int>(logs.size());
  if (logs.empty()) return out;
  out.ratio = out.low = out.high = std::exp(Mean(logs));
  if (!out.has_interval()) return out;
  std::mt19937_64 rng(options.seed);
  std::vector<double> means;
  std::vector<double> sample(logs.size());
  for (int b = 0; b < options.resamples; ++b) {
    // A plain modulo, not a distribution object: std::uniform_int_distribution differs between
    // standard libraries, and the intervals should not. Its bias over a few rounds is ~1e-18.
    for (double& s : sample) s = logs[rng() % logs.size()];
    means.push_back(Mean(sample));
  }
  std::sort(means.begin(), means.end());
  const double tail = (1 - options.confidence) / 2;
  out.low = std::exp(Quantile(means, tail));
  out.high = std::exp(Quantile(means, 1 - tail));
  return out;
}

Versus Classify(const PairedRatio& r) {
  if (r.has_interval()) {
    if (r.high < 1) return Versus::kFaster;
    if (r.low > 1) return Versus::kSlower;
    return Versus::kTied;
  }
  return r.ratio < 1 ? Versus::kFaster : r.ratio > 1 ? Versus::kSlower : Versus::kTied;
}

std::string ToString(Versus versus) {
  switch (versus) {
    case Versus::kFaster:
      return "faster";
    case Versus::kTied:
      return "tied";
    case Versus::kSlower:
      return "slower";
  }
  return "?";
}

std::string FormatRatio(const PairedRatio& r) {
  if (r.rounds == 0) return "-";
  if (!r.has_interval()) return fmt::format("{:.3f}", r.ratio);
  return fmt::format("{:.3f} [{:.3f}, {:.3f}]", r.ratio, r.low, r.high);
}

double GeometricMean(std::span<const double> rounds) {
  double sum = 0;
  int count = 0;
  for (double s : rounds) {
    if (!Measured(s)) continue;
    sum += std::log(s);
    ++count;
  }
  return count > 0 ? std::exp(sum / count) : std::numeric_limits<double>::quiet_NaN();
}

Standing Rank(const std::vector<Entrant>& entrants, const BootstrapOptions& options) {
  Standing s;
  s.to_fastest.resize(entrants.size());
  s.tied.assign(entrants.size(), false);
  const std::vector<double> estimate = Estimates(entrants);
  for (size_t i = 0; i < entrants.size(); ++i) {
    if (!entrants[i].may_answer || std::isnan(estimate[i])) continue;
    if (!s.fastest || estimate[i] < estimate[*s.fastest]) s.fastest = i;
  }
  if (!s.fastest) return s;
  for (size_t i = 0; i < entrants.size(); ++i) {
    if (std::isnan(estimate[i])) continue;
    s.to_fastest[i] = CompareRounds(entrants[i].rounds, entrants[*s.fastest].rounds, options);
    // Tied: not reliably slower. (Reliably faster than the fastest can only be a row paired with
    // it in fewer rounds; it is a contender too.)
    s.tied[i] = s.to_fastest[i].rounds > 0 && Classify(s.to_fastest[i]) != Versus::kSlower;
  }
  s.tied[*s.fastest] = true;
  for (size_t i = 0; i < entrants.size(); ++i) {
    if (!s.tied[i] || !entrants[i].may_answer) continue;
    if (i != *s.fastest) s.settled = false;
    if (!s.answer) {
      s.answer = i;
      continue;
    }
    const Entrant& a = entrants[*s.answer];
    if (entrants[i].simplicity < a.simplicity ||
        (entrants[i].simplicity == a.simplicity && estimate[i] < estimate[*s.answer])) {
      s.answer = i;
    }
  }
  return s;
}

Standing JudgeInRounds(std::vector<Entrant>& entrants, const RoundOptions& options,
                       const MeasureRound& measure, int* rounds_run) {
  const double kUnmeasured = std::numeric_limits<double>::quiet_NaN();
  auto run = [&](int round, const std::vector<size_t>& who) {
    const std::vector<double> seconds = measure(round, who);
    for (Entrant& e : entrants) e.rounds.resize(static_cast<size_t>(round) + 1, kUnmeasured);
    for (size_t k = 0; k < who.size(); ++k) {
      entrants[who[k]].rounds[static_cast<size_t>(round)] = seconds[k];
    }
  };
  for (Entrant& e : entrants) e.rounds.clear();
  std::vector<size_t> everyone;
  for (size_t i = 0; i < entrants.size(); ++i) everyone.push_back(i);
  int round = 0;
  for (; round < std::max(1, options.min_rounds); ++round) run(round, everyone);
  Standing standing = Rank(entrants, options.bootstrap);
  for (; !standing.settled && round < options.max_rounds; ++round) {
    std::vector<size_t> who;
    for (size_t i = 0; i < entrants.size(); ++i) {
      const bool contender = standing.tied[i] && entrants[i].may_answer;
      if (contender || entrants[i].simplicity != Simplicity::kOther) who.push_back(i);
    }
    run(round, who);
    standing = Rank(entrants, options.bootstrap);
  }
  if (rounds_run != nullptr) *rounds_run = round;
  return standing;
}

}  // namespace placer::search
