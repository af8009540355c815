#include "placer/group_schedule.h"

#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <queue>
#include <set>
#include <tuple>
#include <utility>

namespace placer::search {

namespace {

// Of a group's work, the forward's share (its backward computes about twice its FLOPs).
constexpr double kForwardShare = 1.0 / 3.0;
// DDP's bucket (graph::AllReduceOptions).
constexpr double kBucketBytes = 25.0 * (1 << 20);
// A copy runs before every op waiting on its device (a stream takes copies as they come).
constexpr int64_t kCopyPriority = -1;

std::vector<double> Counts(const std::vector<int>& counts, size_t groups) {
  std::vector<double> out(groups, 0);
  for (size_t g = 0; g < groups && g < counts.size(); ++g) out[g] = counts[g];
  return out;
}

}  // namespace

GroupSchedule::GroupSchedule(const ActionSpace& space, const graph::GroupFeatures& features,
                             std::vector<double> work, double seconds_per_byte, ScheduleCosts costs)
    : space_(space),
      work_(std::move(work)),
      param_bytes_(features.param_bytes),
      output_bytes_(features.output_bytes),
      forward_ops_(Counts(features.forward_ops, work_.size())),
      backward_ops_(Counts(features.backward_ops, work_.size())),
      producers_(work_.size()),
      consumers_(work_.size()),
      total_work_(std::accumulate(work_.begin(), work_.end(), 0.0)),
      seconds_per_byte_(seconds_per_byte),
      costs_(std::move(costs)) {
  timed_ = costs_.forward_seconds.size() == work_.size() &&
           costs_.backward_seconds.size() == work_.size();
  param_bytes_.resize(work_.size(), 0);
  output_bytes_.resize(work_.size(), 0);
  for (const graph::GroupEdge& e : features.edges) {
    const Link link{0, static_cast<double>(e.bytes), std::max(1, e.tensors)};
    producers_[static_cast<size_t>(e.to)].push_back({e.from, link.bytes, link.tensors});
    consumers_[static_cast<size_t>(e.from)].push_back({e.to, link.bytes, link.tensors});
  }
}

double GroupSchedule::SecondsPerWork(const Candidate& c, double seconds,
                                     const std::vector<double>& busy) const {
  if (total_work_ <= 0) return 0;
  const double copies = static_cast<double>(c.replicas) * std::max(1, c.micro_batches);
  double launches = 0;
  for (size_t g = 0; g < work_.size(); ++g) {
    launches += (forward_ops_[g] + backward_ops_[g]) * copies * costs_.seconds_per_op;
  }
  const double busy_sum = std::accumulate(busy.begin(), busy.end(), 0.0);
  const double total = busy_sum > 0 ? busy_sum : seconds;
  // At least a tenth of the time is the work's: launches estimated from a typical op's time may
  // exceed what the devices were busy for.
  return std::max(total - launches, 0.1 * total) / total_work_;
}

double GroupSchedule::StepSeconds(const Candidate& c, double seconds_per_work) const {
  const int groups = static_cast<int>(work_.size());
  const int copies = c.replicas, micro = std::max(1, c.micro_batches);
  const int ways = std::max(1, c.tensor_ways);
  const bool one_f_one_b = micro > 1 && c.schedule == graph::PipelineSchedule::kOneFOneB;
  const double share = 1.0 / (static_cast<double>(copies) * micro);  // of the batch, per task
  // Per option, the device of each copy.
  std::vector<std::vector<int>> devices_of(static_cast<size_t>(space_.num_options()));
  auto devices = [&](int option) -> const std::vector<int>& {
    std::vector<int>& d = devices_of[static_cast<size_t>(option)];
    if (d.empty()) d = space_.DevicesOf(option, copies);
    return d;
  };
  // Whether a group on `option` has each of its copies' shards on a device of its own.
  auto sharded = [&](int option) {
    return ways > 1 && space_.options()[static_cast<size_t>(option)].width == copies;
  };
  // Op task t = ((copy * M + micro-batch) * G + group) * 2 + phase (0: forward, 1: backward);
  // copy tasks are numbered after them as they arise.
  const size_t op_tasks = static_cast<size_t>(copies) * micro * groups * 2;
  auto group_of = [&](size_t t) { return (t / 2) % static_cast<size_t>(groups); };
  std::vector<int> pending(op_tasks, 0);
  std::vector<double> duration(op_tasks, 0);
  std::vector<int> device(op_tasks, 0);
  std::vector<int64_t> priority(op_tasks, 0);
  for (int g = 0; g < groups; ++g) {
    const auto gi = static_cast<size_t>(g);
    const int option = c.options[gi];
    // A sharded group's output is summed over its shards once per direction.
    const double tensor_all_reduce =
        sharded(option)
            ? 2.0 * (ways - 1) * costs_.seconds_per_copy +
                  2.0 * (ways - 1) / ways * output_bytes_[gi] * share * ways * seconds_per_byte_
            : 0;
    const double forward_launches = forward_ops_[gi] * costs_.seconds_per_op;
    const double backward_launches = backward_ops_[gi] * costs_.seconds_per_op;
    const double forward_work = timed_
                                    ? std::max(0.0, costs_.forward_seconds[gi] - forward_launches)
                                    : work_[gi] * kForwardShare * seconds_per_work;
    const double backward_work =
        timed_ ? std::max(0.0, costs_.backward_seconds[gi] - backward_launches)
               : work_[gi] * (1 - kForwardShare) * seconds_per_work;
    const double forward = forward_work * share + forward_launches + tensor_all_reduce;
    const double backward = backward_work * share + backward_launches + tensor_all_reduce;
    for (int copy = 0; copy < copies; ++copy) {
      const int on = devices(option)[static_cast<size_t>(copy)];
      for (int m = 0; m < micro; ++m) {
        const size_t f = ((static_cast<size_t>(copy) * micro + m) * groups + gi) * 2, b = f + 1;
        duration[f] = forward;
        duration[b] = backward;
        device[f] = device[b] = on;
        pending[f] = static_cast<int>(producers_[gi].size());
        pending[b] = 1 + static_cast<int>(consumers_[gi].size());
        if (one_f_one_b) {
          priority[f] = 2LL * groups * m + g;
          priority[b] = 2LL * groups * m + 2LL * groups - 1 - g;
        } else {
          priority[f] = static_cast<int64_t>(groups) * m + g;
          priority[b] = static_cast<int64_t>(groups) * (micro + m) + (groups - 1 - g);
        }
      }
    }
  }
  // Buckets of the gradients' ring all-reduces, as DDP packs them: groups in reverse order (the
  // last layers' gradients are ready first), about 25 MiB each, one ring per device set.
  const int replicas = copies / ways;
  struct Bucket {
    std::vector<int> devices;
    double bytes = 0;
    int pending = 0;  // backward tasks of its groups still to end
  };
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of(static_cast<size_t>(groups), -1);
  {
    std::map<std::vector<int>, size_t> open;
    for (int g = groups - 1; g >= 0; --g) {
      const auto gi = static_cast<size_t>(g);
      if (param_bytes_[gi] <= 0) continue;
      const std::vector<int>& on = devices(c.options[gi]);
      std::set<int> spread;
      for (int r = 0; r < replicas; ++r) spread.insert(on[static_cast<size_t>(r * ways)]);
      if (spread.size() < 2) continue;
      const std::vector<int> ring(spread.begin(), spread.end());
      auto it = open.find(ring);
      if (it == open.end() || buckets[it->second].bytes >= kBucketBytes) {
        it = open.insert_or_assign(ring, buckets.size()).first;
        buckets.push_back({ring, 0, 0});
      }
      buckets[it->second].bytes += param_bytes_[gi] / (sharded(c.options[gi]) ? ways : 1);
      buckets[it->second].pending += copies * micro;
      bucket_of[gi] = static_cast<int>(it->second);
    }
  }

  // Tasks that arise as the schedule runs: copies into a device, and each device's part of a
  // bucket's ring (its 2 (k - 1) hops in and their reductions), run when nothing else is ready, as
  // the ring's ops come last in the step's order.
  struct Arising {
    int device = 0;
    double seconds = 0;
    size_t target = 0;  // the op task a copy feeds; kNone for a ring's part
    int64_t priority = kCopyPriority;
  };
  constexpr size_t kNone = static_cast<size_t>(-1);
  std::vector<Arising> arising;

  // Events: (time, sequence, task, ended?); the sequence keeps simultaneous events in order.
  using Event = std::tuple<double, uint64_t, size_t, bool>;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  uint64_t sequence = 0;
  using Ready = std::pair<int64_t, size_t>;
  std::vector<std::priority_queue<Ready, std::vector<Ready>, std::greater<>>> ready(
      static_cast<size_t>(space_.num_devices()));
  std::vector<bool> busy(static_cast<size_t>(space_.num_devices()), false);
  for (size_t t = 0; t < op_tasks; ++t) {
    if (pending[t] == 0) events.emplace(0.0, sequence++, t, false);
  }
  auto device_of = [&](size_t t) {
    return t < op_tasks ? device[t] : arising[t - op_tasks].device;
  };
  auto add = [&](const Arising& task, double now) {
    arising.push_back(task);
    events.emplace(now, sequence++, op_tasks + arising.size() - 1, false);
  };
  double makespan = 0;
  auto release = [&](size_t t, double now) {
    if (--pending[t] == 0) events.emplace(now, sequence++, t, false);
  };
  // The value of op task `from` reaches op task `to`: at once on one device, otherwise by a copy.
  auto send = [&](size_t from, size_t to, const Link& link, double now) {
    if (device[from] == device[to]) return release(to, now);
    add({device[to],
         link.tensors * costs_.seconds_per_copy + link.bytes * share * seconds_per_byte_, to},
        now);
  };
  while (!events.empty()) {
    const double now = std::get<0>(events.top());
    while (!events.empty() && std::get<0>(events.top()) == now) {
      const auto [time, seq, t, ended] = events.top();
      events.pop();
      const auto on = static_cast<size_t>(device_of(t));
      if (!ended) {
        ready[on].emplace(t < op_tasks ? priority[t] : arising[t - op_tasks].priority, t);
        continue;
      }
      busy[on] = false;
      makespan = std::max(makespan, now);
      if (t >= op_tasks) {
        if (arising[t - op_tasks].target != kNone) release(arising[t - op_tasks].target, now);
        continue;
      }
      const size_t g = group_of(t);
      const size_t base = t - (t % (2 * static_cast<size_t>(groups)));  // this copy's micro-batch
      if (t % 2 == 0) {
        for (const Link& to : consumers_[g]) {
          send(t, base + static_cast<size_t>(to.group) * 2, to, now);
        }
        release(t + 1, now);
        continue;
      }
      for (const Link& from : producers_[g]) {
        send(t, base + static_cast<size_t>(from.group) * 2 + 1, from, now);
      }
      if (bucket_of[g] < 0 || --buckets[static_cast<size_t>(bucket_of[g])].pending > 0) continue;
      const Bucket& bucket = buckets[static_cast<size_t>(bucket_of[g])];
      const auto k = static_cast<double>(bucket.devices.size());
      const double part = 2 * (k - 1) * (costs_.seconds_per_copy + costs_.seconds_per_op) +
                          2 * (k - 1) / k * bucket.bytes * seconds_per_byte_;
      for (int d : bucket.devices) add({d, part, kNone, std::numeric_limits<int64_t>::max()}, now);
    }
    for (size_t d = 0; d < busy.size(); ++d) {
      if (busy[d] || ready[d].empty()) continue;
      const size_t t = ready[d].top().second;
      ready[d].pop();
      busy[d] = true;
      const double seconds = t < op_tasks ? duration[t] : arising[t - op_tasks].seconds;
      events.emplace(now + seconds, sequence++, t, true);
    }
  }
  return makespan;
}

}  // namespace placer::search
