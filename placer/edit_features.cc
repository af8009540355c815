#include "placer/edit_features.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <utility>

namespace placer::search {

namespace {

// A group's work in FLOP-equivalents: its FLOPs and the bytes its forward writes, read and
// written again by the backward (about 10 FLOPs per byte: where today's GPUs and CPUs balance).
constexpr double kFlopsPerByte = 10;

float Ratio(double numerator, double denominator) {
  return denominator > 0 ? static_cast<float>(numerator / denominator) : 0.0f;
}

// Per group: its FLOPs and the bytes its forward writes, read and written again by the backward.
std::vector<double> WorkOf(const graph::GroupFeatures& features) {
  std::vector<double> work(features.type_ids.size(), 1.0);
  for (size_t g = 0; g < work.size(); ++g) {
    const double flops = g < features.flops.size() ? features.flops[g] : 0;
    const double bytes = g < features.output_bytes.size() ? features.output_bytes[g] : 0;
    work[g] = std::max(1.0, flops + 3 * kFlopsPerByte * bytes);
  }
  return work;
}

}  // namespace

EditEstimator::EditEstimator(const ActionSpace& space, const graph::GroupFeatures& features,
                             double seconds_per_byte, ScheduleCosts schedule_costs)
    : space_(space),
      edges_(features.edges),
      param_bytes_(features.param_bytes),
      seconds_per_byte_(seconds_per_byte),
      work_(WorkOf(features)),
      schedule_(space, features, work_, seconds_per_byte, std::move(schedule_costs)) {
  const size_t groups = features.type_ids.size();
  total_work_ = std::accumulate(work_.begin(), work_.end(), 0.0);
  for (const graph::GroupEdge& e : features.edges)
    total_traffic_ += 2.0 * static_cast<double>(e.bytes);
  // Top and bottom levels over the group DAG. Groups are numbered topologically (from < to) and
  // the edges sorted by (from, to): forwards, every producer's top level is final before it is
  // read; backwards, so is every consumer's bottom level.
  std::vector<double> top(groups, 0), bottom(work_);
  for (const graph::GroupEdge& e : features.edges) {
    const auto from = static_cast<size_t>(e.from), to = static_cast<size_t>(e.to);
    top[to] = std::max(top[to], top[from] + work_[from]);
  }
  for (auto it = features.edges.rbegin(); it != features.edges.rend(); ++it) {
    const auto from = static_cast<size_t>(it->from), to = static_cast<size_t>(it->to);
    bottom[from] = std::max(bottom[from], work_[from] + bottom[to]);
  }
  double critical = 0;
  for (size_t g = 0; g < groups; ++g) critical = std::max(critical, top[g] + bottom[g]);
  criticality_.assign(groups, 1.0);
  for (size_t g = 0; g < groups; ++g) {
    criticality_[g] = critical > 0 ? (top[g] + bottom[g]) / critical : 1.0;
  }
}

EditEstimator::Estimate EditEstimator::EstimateOf(const Candidate& c) const {
  Estimate e;
  e.loads.assign(static_cast<size_t>(space_.num_devices()), 0.0);
  const int replicas = c.replicas;
  // Per option, the device of each replica and how many distinct devices they are (options
  // repeat across groups, so each is worked out once per candidate).
  std::vector<std::vector<int>> devices(static_cast<size_t>(space_.num_options()));
  std::vector<double> spans(static_cast<size_t>(space_.num_options()), 0);
  auto devices_of = [&](int option) -> const std::vector<int>& {
    std::vector<int>& d = devices[static_cast<size_t>(option)];
    if (d.empty()) {
      d = space_.DevicesOf(option, replicas);
      spans[static_cast<size_t>(option)] =
          static_cast<double>(std::set<int>(d.begin(), d.end()).size());
    }
    return d;
  };
  for (size_t g = 0; g < c.options.size(); ++g) {
    const std::vector<int>& on = devices_of(c.options[g]);
    for (int d : on) e.loads[static_cast<size_t>(d)] += work_[g] / replicas;
    const double k = spans[static_cast<size_t>(c.options[g])];
    const double params = g < param_bytes_.size() ? param_bytes_[g] : 0;
    e.all_reduce_bytes += params * 2 * (k - 1) / k;
  }
  for (const graph::GroupEdge& edge : edges_) {
    const std::vector<int>& from = devices_of(c.options[static_cast<size_t>(edge.from)]);
    const std::vector<int>& to = devices_of(c.options[static_cast<size_t>(edge.to)]);
    for (int r = 0; r < replicas; ++r) {
      if (from[static_cast<size_t>(r)] != to[static_cast<size_t>(r)]) {
        e.cut_bytes += 2.0 * static_cast<double>(edge.bytes) / replicas;
      }
    }
  }
  return e;
}

void EditEstimator::SetCurrent(const Candidate& current, double seconds,
                               const std::vector<double>& busy) {
  current_ = current;
  seconds_ = seconds > 0 && std::isfinite(seconds) ? seconds : 1;
  now_ = EstimateOf(current);
  const double load_sum = std::accumulate(now_.loads.begin(), now_.loads.end(), 0.0);
  const double load_max = *std::max_element(now_.loads.begin(), now_.loads.end());
  const bool judged = busy.size() == now_.loads.size();
  const double busy_sum = judged ? std::accumulate(busy.begin(), busy.end(), 0.0) : 0;
  seconds_per_work_ = busy_sum > 0 && load_sum > 0 ? busy_sum / load_sum
                      : load_max > 0               ? seconds_ / load_max
                                                   : 0;
  const std::vector<double>& measure = judged && busy_sum > 0 ? busy : now_.loads;
  busiest_ = static_cast<int>(std::max_element(measure.begin(), measure.end()) - measure.begin());
  least_busy_ =
      static_cast<int>(std::min_element(measure.begin(), measure.end()) - measure.begin());
  compute_bound_ = judged && busy_sum > 0 ? *std::max_element(busy.begin(), busy.end()) / seconds_
                                          : load_max * seconds_per_work_ / seconds_;
  const double devices = std::max(1, space_.num_devices());
  communication_share_ =
      (now_.cut_bytes / devices + now_.all_reduce_bytes) * seconds_per_byte_ / seconds_;
  schedule_seconds_per_work_ = schedule_.SecondsPerWork(current, seconds_, busy);
  scheduled_seconds_ = schedule_.StepSeconds(current, schedule_seconds_per_work_);
}

EditFeatureRow EditEstimator::Features(const Candidate& n, EditKind kind) const {
  EditFeatureRow row{};
  const bool shape_changed = n.replicas != current_.replicas ||
                             n.micro_batches != current_.micro_batches ||
                             n.schedule != current_.schedule;
  row[kShapeChanged] = shape_changed ? 1.0f : 0.0f;
  row[kReplicaChange] =
      static_cast<float>(std::log2(static_cast<double>(n.replicas) / current_.replicas));
  row[kMicroBatchChange] =
      static_cast<float>(std::log2(static_cast<double>(n.micro_batches) / current_.micro_batches));
  const Estimate after = EstimateOf(n);
  double moved_work = 0, leaving = 0, landing = 0, criticality_sum = 0, criticality_max = 0;
  int moved = 0;
  for (size_t g = 0; g < n.options.size(); ++g) {
    if (!shape_changed && n.options[g] == current_.options[g]) continue;
    ++moved;
    moved_work += work_[g];
    criticality_sum += criticality_[g];
    criticality_max = std::max(criticality_max, criticality_[g]);
    const std::vector<int> before = space_.DevicesOf(current_.options[g], current_.replicas);
    const std::vector<int> now = space_.DevicesOf(n.options[g], n.replicas);
    const double share_before = work_[g] / current_.replicas, share_now = work_[g] / n.replicas;
    for (int d : before) {
      if (d == busiest_) leaving += share_before;
    }
    for (int d : now) {
      if (d == busiest_) leaving -= share_now;
      if (d == least_busy_) landing += share_now;
    }
  }
  const auto groups = static_cast<double>(std::max<size_t>(1, n.options.size()));
  row[kMovedGroups] = static_cast<float>(moved / groups);
  row[kMovedWork] = Ratio(moved_work, total_work_);
  auto max_of = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  auto mean_of = [](const std::vector<double>& v) {
    return std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  };
  const double scale = seconds_per_work_ / seconds_;
  row[kMaxLoadChange] = static_cast<float>((max_of(after.loads) - max_of(now_.loads)) * scale);
  row[kMeanLoadChange] = static_cast<float>((mean_of(after.loads) - mean_of(now_.loads)) * scale);
  row[kImbalanceChange] = static_cast<float>(
      ((max_of(after.loads) - mean_of(after.loads)) - (max_of(now_.loads) - mean_of(now_.loads))) *
      scale);
  const double devices = std::max(1, space_.num_devices());
  row[kCutSecondsChange] = static_cast<float>((after.cut_bytes - now_.cut_bytes) / devices *
                                              seconds_per_byte_ / seconds_);
  row[kAllReduceSecondsChange] = static_cast<float>(
      (after.all_reduce_bytes - now_.all_reduce_bytes) * seconds_per_byte_ / seconds_);
  row[kCutBytesChange] = Ratio(after.cut_bytes - now_.cut_bytes, total_traffic_);
  row[kLeavesBusiest] = Ratio(leaving, moved_work);
  row[kLandsOnLeastBusy] = Ratio(landing, moved_work);
  row[kMeanCriticality] = moved > 0 ? static_cast<float>(criticality_sum / moved) : 0.0f;
  row[kMaxCriticality] = static_cast<float>(criticality_max);
  row[kComputeBound] = static_cast<float>(compute_bound_);
  row[kCommunicationShare] = static_cast<float>(communication_share_);
  const double scheduled = schedule_.StepSeconds(n, schedule_seconds_per_work_);
  row[kScheduleLogChange] = scheduled > 0 && scheduled_seconds_ > 0
                                ? static_cast<float>(std::log(scheduled / scheduled_seconds_))
                                : 0.0f;
  row[static_cast<size_t>(kFirstKind + static_cast<int>(kind))] = 1.0f;
  // Features of an absurd scale (a near-zero T, a huge graph) would swamp a model: clamp.
  for (float& v : row) v = std::clamp(v, -8.0f, 8.0f);
  return row;
}

double EditEstimator::EstimatedLogChange(const EditFeatureRow& row) {
  const double change = row[kMaxLoadChange] + row[kCutSecondsChange] + row[kAllReduceSecondsChange];
  return std::log(std::max(0.05, 1.0 + change));
}

}  // namespace placer::search
