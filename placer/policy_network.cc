#include "placer/policy_network.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>

namespace placer::search {

namespace {
constexpr float kMasked = -1e9f;
// A GPU's usual FLOPs per byte of memory traffic: what an output's bytes cost as work.
constexpr double kFlopsPerByte = 10;
}  // namespace

at::Tensor MixExploration(const at::Tensor& log_p, const at::Tensor& allowed, double exploration) {
  if (exploration <= 0) return log_p;
  const at::Tensor uniform = allowed / allowed.sum(-1, /*keepdim=*/true);
  return at::log((1 - exploration) * log_p.exp() + exploration * uniform);
}

at::Tensor ChooseFrom(const at::Tensor& log_p, bool greedy, at::Generator& generator) {
  return greedy ? log_p.argmax(-1) : at::multinomial(log_p.exp(), 1, false, generator).squeeze(-1);
}

std::vector<double> GroupWork(const graph::GroupFeatures& features) {
  const size_t groups = features.type_ids.size();
  std::vector<double> work(groups, 1.0);
  for (size_t g = 0; g < groups; ++g) {
    const double flops = g < features.flops.size() ? features.flops[g] : 0;
    const double bytes = g < features.output_bytes.size() ? features.output_bytes[g] : 0;
    work[g] = std::max(1.0, flops + 3 * kFlopsPerByte * bytes);
  }
  return work;
}

double SecondsPerWork(const graph::GroupFeatures& features, const std::vector<double>& busy) {
  const std::vector<double> work = GroupWork(features);
  const double total = std::accumulate(work.begin(), work.end(), 0.0);
  const double seconds = std::accumulate(busy.begin(), busy.end(), 0.0);
  return total > 0 ? seconds / total : 0;
}

LocalityTable::LocalityTable(const graph::GroupFeatures& f, const ActionSpace& space)
    : space_(space),
      num_groups_(static_cast<int>(f.type_ids.size())),
      num_options_(space.num_options()) {
  const auto groups = static_cast<size_t>(num_groups_);
  std::vector<double> in(groups, 0), out(groups, 0);
  for (const graph::GroupEdge& e : f.edges) {
    in[static_cast<size_t>(e.to)] += static_cast<double>(e.bytes);
    out[static_cast<size_t>(e.from)] += static_cast<double>(e.bytes);
  }
  producers_.resize(groups);
  consumers_.resize(groups);
  feeds_.resize(groups);
  for (const graph::GroupEdge& e : f.edges) {
    const auto bytes = static_cast<double>(e.bytes);
    const auto from = static_cast<size_t>(e.from), to = static_cast<size_t>(e.to);
    const float in_share = in[to] > 0 ? static_cast<float>(bytes / in[to]) : 0.0f;
    producers_[to].emplace_back(e.from, in_share);
    feeds_[from].emplace_back(e.to, in_share);
    consumers_[from].emplace_back(e.to, out[from] > 0 ? static_cast<float>(bytes / out[from]) : 0);
  }
  const size_t counts = space.replica_counts().size();
  const auto o_count = static_cast<size_t>(num_options_);
  local_.assign(counts * o_count * o_count, 0.0f);
  std::vector<float> masks(counts * o_count, 0.0f);
  for (size_t r = 0; r < counts; ++r) {
    const int replicas = space.replica_counts()[r];
    for (int a = 0; a < num_options_; ++a) {
      masks[r * o_count + static_cast<size_t>(a)] = space.Allowed(a, replicas) ? 0.0f : kMasked;
      for (int b = 0; b < num_options_; ++b) {
        int same = 0;
        for (int replica = 0; replica < replicas; ++replica) {
          same += space.DeviceOf(a, replica, replicas) == space.DeviceOf(b, replica, replicas);
        }
        local_[(r * o_count + static_cast<size_t>(a)) * o_count + static_cast<size_t>(b)] =
            static_cast<float>(same) / static_cast<float>(replicas);
      }
    }
  }
  option_masks_ =
      at::tensor(masks, at::kFloat).reshape({static_cast<int64_t>(counts), num_options_});
}

int LocalityTable::ReplicaIndex(int replicas) const {
  const std::vector<int>& counts = space_.replica_counts();
  for (size_t i = 0; i < counts.size(); ++i) {
    if (counts[i] == replicas) return static_cast<int>(i);
  }
  throw std::invalid_argument("the policy has no replica count " + std::to_string(replicas));
}

at::Tensor LocalityTable::ConsumerShares(const std::optional<Candidate>& incumbent) const {
  const auto groups = static_cast<size_t>(num_groups_);
  const auto o_count = static_cast<size_t>(num_options_);
  const size_t counts = space_.replica_counts().size();
  std::vector<float> share(counts * groups * o_count, 0.0f);
  if (incumbent) {
    for (size_t r = 0; r < counts; ++r) {
      const int replicas = space_.replica_counts()[r];
      for (size_t g = 0; g < groups; ++g) {
        for (const auto& [c, weight] : consumers_[g]) {
          AddLocalShare(&share[(r * groups + g) * o_count], static_cast<int>(r),
                        space_.Nearest(incumbent->options[static_cast<size_t>(c)], replicas),
                        weight);
        }
      }
    }
  }
  return at::tensor(share, at::kFloat)
      .reshape({static_cast<int64_t>(counts), num_groups_, num_options_});
}

}  // namespace placer::search
