#include "placer/refiner.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

namespace placer::search {

Judgement JudgementOf(const graph::EvaluationResult& result) {
  Judgement j{result.valid ? result.step_seconds : std::numeric_limits<double>::infinity(), {}};
  for (const graph::DeviceStats& d : result.devices) j.busy.push_back(d.busy_seconds);
  return j;
}

Refiner::Refiner(const ActionSpace& space, const graph::GroupFeatures& features,
                 RefinerOptions options, uint64_t seed)
    : space_(space),
      options_(options),
      num_groups_(static_cast<int>(features.type_ids.size())),
      neighbours_(static_cast<size_t>(num_groups_)),
      rng_(seed ^ 0x5851f42d4c957f2dull),
      features_(features) {
  for (const graph::GroupEdge& e : features.edges) {
    neighbours_[static_cast<size_t>(e.from)].push_back(e.to);
    neighbours_[static_cast<size_t>(e.to)].push_back(e.from);
  }
}

int Refiner::RandomAllowedOption(int replicas) {
  std::vector<int> allowed;
  for (int o = 0; o < space_.num_options(); ++o) {
    if (space_.Allowed(o, replicas)) allowed.push_back(o);
  }
  return allowed[std::uniform_int_distribution<size_t>(0, allowed.size() - 1)(rng_)];
}

void Refiner::MoveGroup(Candidate& c) {
  const auto g = std::uniform_int_distribution<size_t>(0, c.options.size() - 1)(rng_);
  const std::vector<int>& near = neighbours_[g];
  if (!near.empty() && std::bernoulli_distribution(0.5)(rng_)) {
    c.options[g] = c.options[static_cast<size_t>(
        near[std::uniform_int_distribution<size_t>(0, near.size() - 1)(rng_)])];
  } else {
    c.options[g] = RandomAllowedOption(c.replicas);
  }
}

void Refiner::ShiftBoundary(Candidate& c) {
  std::vector<size_t> boundaries;  // i: options[i] != options[i + 1]
  for (size_t i = 0; i + 1 < c.options.size(); ++i) {
    if (c.options[i] != c.options[i + 1]) boundaries.push_back(i);
  }
  if (boundaries.empty()) return MoveBand(c);
  const size_t i =
      boundaries[std::uniform_int_distribution<size_t>(0, boundaries.size() - 1)(rng_)];
  if (std::bernoulli_distribution(0.5)(rng_)) {
    c.options[i] = c.options[i + 1];  // the later stage starts one group earlier
  } else {
    c.options[i + 1] = c.options[i];  // or one group later
  }
}

void Refiner::MoveBand(Candidate& c) {
  const size_t groups = c.options.size();
  const size_t longest = std::max<size_t>(2, groups / 4);
  const size_t length = std::min(groups, std::uniform_int_distribution<size_t>(2, longest)(rng_));
  const size_t start = std::uniform_int_distribution<size_t>(0, groups - length)(rng_);
  const int option = start > 0 && std::bernoulli_distribution(0.5)(rng_)
                         ? c.options[start - 1]
                         : RandomAllowedOption(c.replicas);
  std::fill(c.options.begin() + static_cast<std::ptrdiff_t>(start),
            c.options.begin() + static_cast<std::ptrdiff_t>(start + length), option);
}

std::vector<size_t> Refiner::Segment(const Candidate& c, size_t start, size_t size) const {
  const int option = c.options[start];
  std::vector<size_t> segment{start};
  std::vector<bool> taken(c.options.size(), false);
  taken[start] = true;
  for (size_t head = 0; head < segment.size() && segment.size() < size; ++head) {
    for (int n : neighbours_[segment[head]]) {
      const auto next = static_cast<size_t>(n);
      if (taken[next] || c.options[next] != option || segment.size() >= size) continue;
      taken[next] = true;
      segment.push_back(next);
    }
  }
  return segment;
}

size_t Refiner::SegmentSize() {
  return std::uniform_int_distribution<size_t>(
      1, std::max<size_t>(2, static_cast<size_t>(num_groups_) / 4))(rng_);
}

void Refiner::MoveSegment(Candidate& c) {
  const auto start = std::uniform_int_distribution<size_t>(0, c.options.size() - 1)(rng_);
  const int from = c.options[start];
  // The option to move to: a neighbour's that differs, or any other.
  std::vector<int> targets;
  for (int n : neighbours_[start]) {
    if (c.options[static_cast<size_t>(n)] != from) {
      targets.push_back(c.options[static_cast<size_t>(n)]);
    }
  }
  const int to = !targets.empty() && std::bernoulli_distribution(0.5)(rng_)
                     ? targets[std::uniform_int_distribution<size_t>(0, targets.size() - 1)(rng_)]
                     : RandomAllowedOption(c.replicas);
  for (size_t g : Segment(c, start, SegmentSize())) c.options[g] = to;
}

void Refiner::SwapSegments(Candidate& c) {
  std::uniform_int_distribution<size_t> pick(0, c.options.size() - 1);
  const size_t a = pick(rng_), b = pick(rng_);
  if (c.options[a] == c.options[b]) return MoveSegment(c);
  const size_t size = SegmentSize();
  const std::vector<size_t> first = Segment(c, a, size), second = Segment(c, b, size);
  const int option_a = c.options[a], option_b = c.options[b];
  for (size_t g : first) c.options[g] = option_b;
  for (size_t g : second) c.options[g] = option_a;
}

void Refiner::Rebalance(Candidate& c, const std::vector<double>& busy) {
  if (busy.size() != static_cast<size_t>(space_.num_devices())) return MoveSegment(c);
  const auto most = static_cast<int>(std::max_element(busy.begin(), busy.end()) - busy.begin());
  const auto least = static_cast<int>(std::min_element(busy.begin(), busy.end()) - busy.begin());
  if (most == least) return MoveSegment(c);
  auto uses = [&](int option, int device) {
    for (int r = 0; r < c.replicas; ++r) {
      if (space_.DeviceOf(option, r, c.replicas) == device) return true;
    }
    return false;
  };
  std::vector<size_t> loaded;
  for (size_t g = 0; g < c.options.size(); ++g) {
    if (uses(c.options[g], most)) loaded.push_back(g);
  }
  if (loaded.empty()) return MoveSegment(c);
  const size_t start = loaded[std::uniform_int_distribution<size_t>(0, loaded.size() - 1)(rng_)];
  // An option as wide as the group's that runs on the least busy device and not the busiest.
  const int width = space_.options()[static_cast<size_t>(c.options[start])].width;
  int to = space_.SingleDeviceOption(least);
  for (int o = 0; o < space_.num_options(); ++o) {
    if (space_.options()[static_cast<size_t>(o)].width == width && space_.Allowed(o, c.replicas) &&
        uses(o, least) && !uses(o, most)) {
      to = o;
      break;
    }
  }
  for (size_t g : Segment(c, start, SegmentSize())) c.options[g] = to;
}

void Refiner::ChangeReplicas(Candidate& c) {
  const std::vector<int>& counts = space_.replica_counts();
  if (counts.size() < 2) return MoveGroup(c);
  int replicas = c.replicas;
  while (replicas == c.replicas) {
    replicas = counts[std::uniform_int_distribution<size_t>(0, counts.size() - 1)(rng_)];
  }
  // Half of the time, more replicas copy the placement onto the idle devices, when it fits there.
  if (std::bernoulli_distribution(0.5)(rng_)) {
    if (std::optional<Candidate> scaled = space_.ScaleOut(c, replicas)) {
      c = std::move(*scaled);
      return;
    }
  }
  const int spread_before = space_.SpreadOption(c.replicas);
  for (int& option : c.options) {
    const ParallelOption& o = space_.options()[static_cast<size_t>(option)];
    if (c.replicas > 1 && option == spread_before) {
      option = space_.SpreadOption(replicas);
    } else if (c.replicas > 1 && o.width == c.replicas) {
      // Spread over every replica from another first device: stay spread, same first device.
      option = o.first_device;
      for (int k = 0; k < space_.num_options(); ++k) {
        const ParallelOption& w = space_.options()[static_cast<size_t>(k)];
        if (w.width == replicas && w.first_device == o.first_device) option = k;
      }
    }
    option = space_.Nearest(option, replicas);
  }
  c.replicas = replicas;
  // Pipelines keep their micro-batches, and shards their ways, where the space has them at the
  // new replica count.
  if (!space_.HasShape({replicas, c.micro_batches, c.schedule, c.tensor_ways})) {
    c.micro_batches = 1;
    c.schedule = graph::PipelineSchedule::kGPipe;
    if (!space_.HasShape({replicas, 1, c.schedule, c.tensor_ways})) c.tensor_ways = 1;
  }
}

void Refiner::ChangeShape(Candidate& c) {
  // Another micro-batch count, schedule or tensor ways at the candidate's replica count; without
  // one (a replica count whose replicas are neither pipelined nor split), one of the one-replica
  // shapes.
  const StepShape now{c.replicas, c.micro_batches, c.schedule, c.tensor_ways};
  std::vector<StepShape> others;
  for (const StepShape& shape : space_.shapes()) {
    if (shape.replicas == c.replicas && shape != now) others.push_back(shape);
  }
  if (others.empty()) {
    for (const StepShape& shape : space_.shapes()) {
      if (shape.replicas == 1) others.push_back(shape);
    }
  }
  if (others.empty()) return ChangeReplicas(c);
  c = space_.WithShape(std::move(c),
                       others[std::uniform_int_distribution<size_t>(0, others.size() - 1)(rng_)]);
}

// The edits, in the order of their draw, and how often each is drawn: with weight w out of the sum
// of the allowed edits' weights. The shape edit only where the space has pipelines or
// tensor-parallel shapes: without, the edits (and a seed's sequence of them) are what they were
// before it existed. A new edit is a
// method, a row here and its EditKind (edit_features.h).
const std::vector<Refiner::EditEntry>& Refiner::EditTable() {
  using Busy = const std::vector<double>&;
  static const std::vector<EditEntry> table = {
      {EditKind::kMoveGroup, 3, false, [](Refiner& r, Candidate& c, Busy) { r.MoveGroup(c); }},
      {EditKind::kSwapSegments, 1, false,
       [](Refiner& r, Candidate& c, Busy) { r.SwapSegments(c); }},
      {EditKind::kShiftBoundary, 2, false,
       [](Refiner& r, Candidate& c, Busy) { r.ShiftBoundary(c); }},
      {EditKind::kMoveBand, 2, false, [](Refiner& r, Candidate& c, Busy) { r.MoveBand(c); }},
      {EditKind::kMoveSegment, 3, false, [](Refiner& r, Candidate& c, Busy) { r.MoveSegment(c); }},
      {EditKind::kRebalance, 2, false,
       [](Refiner& r, Candidate& c, Busy busy) { r.Rebalance(c, busy); }},
      {EditKind::kChangeReplicas, 1, false,
       [](Refiner& r, Candidate& c, Busy) { r.ChangeReplicas(c); }},
      {EditKind::kChangeShape, 2, true, [](Refiner& r, Candidate& c, Busy) { r.ChangeShape(c); }},
  };
  return table;
}

Candidate Refiner::Edit(const Candidate& candidate, const std::vector<double>& busy) {
  const std::vector<EditEntry>& edits = EditTable();
  int total = 0;
  for (const EditEntry& e : edits) {
    if (!e.needs_other_shapes || space_.has_other_shapes()) total += e.weight;
  }
  for (int attempt = 0; attempt < 16; ++attempt) {
    Candidate c = candidate;
    int draw = std::uniform_int_distribution<int>(0, total - 1)(rng_);
    for (const EditEntry& e : edits) {
      if (e.needs_other_shapes && !space_.has_other_shapes()) continue;
      if (draw < e.weight) {
        last_kind_ = e.kind;
        e.apply(*this, c, busy);
        break;
      }
      draw -= e.weight;
    }
    if (c != candidate) return c;
  }
  return candidate;  // nothing else exists (one device, one replica count)
}

Candidate Refiner::Apply(EditKind kind, const Candidate& candidate,
                         const std::vector<double>& busy) {
  Candidate c = candidate;
  for (const EditEntry& e : EditTable()) {
    if (e.kind == kind) e.apply(*this, c, busy);
  }
  last_kind_ = kind;
  return c;
}

RefineOutcome Refiner::Run(const Candidate& start, const Judgement& start_judgement, int rounds,
                           const JudgeBatch& judge, const std::function<bool()>& stop) {
  RefineOutcome outcome{start, start_judgement.seconds, 0};
  Candidate current = start;
  Judgement now = start_judgement;
  int stalled = 0;
  for (; outcome.rounds < rounds && !stop(); ++outcome.rounds) {
    std::vector<EditFeatureRow> rows;
    std::vector<Candidate> neighbours = Neighbours(current, now, rows);
    if (neighbours.empty()) break;
    std::vector<Judgement> judged = judge(neighbours);
    if (!rows.empty()) Learn(rows, now, judged);
    size_t best = 0;
    for (size_t i = 1; i < judged.size(); ++i) {
      if (judged[i].seconds < judged[best].seconds) best = i;
    }
    if (judged[best].seconds < now.seconds) {
      current = neighbours[best];
      now = std::move(judged[best]);
      stalled = 0;
      if (now.seconds < outcome.best_seconds) {
        outcome.best = current;
        outcome.best_seconds = now.seconds;
      }
      continue;
    }
    if (++stalled < options_.patience) continue;
    // Kick: a few random edits of the best, and descend from there whatever its time.
    current = outcome.best;
    for (int k = 0; k < options_.kick_edits; ++k) current = Edit(current);
    now = judge({current}).front();
    if (now.seconds < outcome.best_seconds) {
      outcome.best = current;
      outcome.best_seconds = now.seconds;
    }
    stalled = 0;
  }
  return outcome;
}

void Refiner::SetGuide(EditGuide guide) {
  guide_ = std::move(guide);
  estimator_.reset();
  if (guide_.active()) {
    estimator_ = std::make_unique<EditEstimator>(space_, features_, guide_.seconds_per_byte,
                                                 guide_.schedule_costs);
  }
}

std::vector<Candidate> Refiner::Neighbours(const Candidate& current, const Judgement& now,
                                           std::vector<EditFeatureRow>& rows) {
  const int wanted = options_.neighbours_per_round;
  const int drawn = guide_.scorer != nullptr ? wanted * std::max(1, guide_.screening) : wanted;
  std::vector<Candidate> neighbours;
  std::vector<EditKind> kinds;
  std::set<std::string> seen{KeyOf(current)};
  for (int i = 0; i < drawn * 4 && static_cast<int>(neighbours.size()) < drawn; ++i) {
    Candidate n = Edit(current, now.busy);
    if (seen.insert(KeyOf(n)).second) {
      neighbours.push_back(std::move(n));
      kinds.push_back(last_kind_);
    }
  }
  if (estimator_ == nullptr || neighbours.empty() || !std::isfinite(now.seconds)) {
    // Nothing to rank against (an invalid current candidate): the first `wanted`, as drawn.
    if (static_cast<int>(neighbours.size()) > wanted) {
      neighbours.resize(static_cast<size_t>(wanted));
    }
    return neighbours;
  }
  estimator_->SetCurrent(current, now.seconds, now.busy);
  std::vector<EditFeatureRow> all;
  all.reserve(neighbours.size());
  for (size_t i = 0; i < neighbours.size(); ++i) {
    all.push_back(estimator_->Features(neighbours[i], kinds[i]));
  }
  if (guide_.scorer == nullptr || static_cast<int>(neighbours.size()) <= wanted) {
    rows = std::move(all);
    return neighbours;
  }
  // The best predicted, then a few of the rest uniformly.
  const std::vector<double> predicted = guide_.scorer->Predict(all);
  std::vector<size_t> order(neighbours.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return predicted[a] < predicted[b]; });
  const auto explored = static_cast<size_t>(guide_.explore_share * wanted);
  const size_t best = static_cast<size_t>(wanted) - explored;
  std::shuffle(order.begin() + static_cast<std::ptrdiff_t>(best), order.end(), rng_);
  std::vector<Candidate> chosen;
  for (size_t k = 0; k < static_cast<size_t>(wanted); ++k) {
    chosen.push_back(std::move(neighbours[order[k]]));
    rows.push_back(all[order[k]]);
  }
  return chosen;
}

void Refiner::Learn(const std::vector<EditFeatureRow>& rows, const Judgement& now,
                    const std::vector<Judgement>& judged) {
  std::vector<double> changes;
  changes.reserve(judged.size());
  for (const Judgement& j : judged) {
    changes.push_back(
        std::isfinite(j.seconds) && j.seconds > 0
            ? std::clamp(std::log(j.seconds / now.seconds), -kMaxLogChange, kMaxLogChange)
            : kInvalidLogChange);
  }
  if (guide_.record) guide_.record(rows, changes);
  if (guide_.scorer != nullptr) guide_.scorer->Observe(rows, changes);
}

std::string Refiner::SaveState() const {
  std::ostringstream out;
  out << rng_;
  return out.str();
}

void Refiner::LoadState(const std::string& state) {
  std::istringstream in(state);
  in >> rng_;
  if (!in) throw std::invalid_argument("malformed refiner state");
}

}  // namespace placer::search
