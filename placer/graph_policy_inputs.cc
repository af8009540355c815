#include "placer/graph_policy_inputs.h"

#include <ATen/ATen.h>

#include <numeric>
#include <set>

namespace placer::search {

GraphPolicyInputs::GraphPolicyInputs(const graph::GroupFeatures& f, const ActionSpace& s)
    : space(s), locality(f, s) {
  const int groups = static_cast<int>(f.type_ids.size());
  const auto gs = static_cast<size_t>(groups);
  this->groups = groups;
  this->options = space.num_options();
  this->devices = space.num_devices();
  this->work = GroupWork(f);
  this->out_bytes.assign(gs, 0);
  this->param_bytes.assign(gs, 0);
  this->in_bytes.assign(gs, 0);
  for (size_t g = 0; g < gs; ++g) {
    if (g < f.output_bytes.size()) this->out_bytes[g] = f.output_bytes[g];
    if (g < f.param_bytes.size()) this->param_bytes[g] = f.param_bytes[g];
  }
  this->in_degree.assign(gs, 0);
  this->out_degree.assign(gs, 0);
  std::vector<float> in_adj(gs * gs, 0.0f), out_adj(gs * gs, 0.0f);
  for (int g = 0; g < groups; ++g) {
    for (const auto& [p, w] : this->locality.producers(g)) {
      in_adj[static_cast<size_t>(g) * gs + static_cast<size_t>(p)] += w;
    }
    for (const auto& [c, w] : this->locality.consumers(g)) {
      out_adj[static_cast<size_t>(g) * gs + static_cast<size_t>(c)] += w;
    }
  }
  for (const graph::GroupEdge& e : f.edges) {
    this->in_bytes[static_cast<size_t>(e.to)] += static_cast<double>(e.bytes);
    ++this->in_degree[static_cast<size_t>(e.to)];
    ++this->out_degree[static_cast<size_t>(e.from)];
  }
  // Levels: groups are numbered topologically and the edges sorted by (from, to).
  this->top.assign(gs, 0);
  this->bottom = this->work;
  for (const graph::GroupEdge& e : f.edges) {
    const auto from = static_cast<size_t>(e.from), to = static_cast<size_t>(e.to);
    this->top[to] = std::max(this->top[to], this->top[from] + this->work[from]);
  }
  for (auto it = f.edges.rbegin(); it != f.edges.rend(); ++it) {
    const auto from = static_cast<size_t>(it->from), to = static_cast<size_t>(it->to);
    this->bottom[from] = std::max(this->bottom[from], this->work[from] + this->bottom[to]);
  }
  this->critical = 1;
  for (size_t g = 0; g < gs; ++g)
    this->critical = std::max(this->critical, this->top[g] + this->bottom[g]);
  const auto g64 = static_cast<int64_t>(groups);
  this->in_adjacency = at::tensor(in_adj, at::kFloat).reshape({g64, g64});
  this->out_adjacency = at::tensor(out_adj, at::kFloat).reshape({g64, g64});
  const double total = std::accumulate(this->work.begin(), this->work.end(), 0.0);
  this->total_work = total;
  this->producer_bytes.resize(gs);
  for (const graph::GroupEdge& e : f.edges) {
    this->producer_bytes[static_cast<size_t>(e.to)].emplace_back(e.from,
                                                                 static_cast<double>(e.bytes));
  }
  std::vector<float> units(gs);
  for (size_t g = 0; g < gs; ++g) {
    units[g] = static_cast<float>(this->work[g] / (total / this->devices));
  }
  this->work_units = at::tensor(units, at::kFloat);

  const size_t counts = space.replica_counts().size();
  const auto o = static_cast<size_t>(this->options), d = static_cast<size_t>(this->devices);
  std::vector<float> share_flat(counts * o * d, 0.0f), spread_flat(counts * o, 0.0f),
      width_flat(counts * o * 2, 0.0f);
  for (size_t r = 0; r < counts; ++r) {
    const int replicas = space.replica_counts()[r];
    for (size_t option = 0; option < o; ++option) {
      std::set<int> on;
      for (int replica = 0; replica < replicas; ++replica) {
        const int device = space.DeviceOf(static_cast<int>(option), replica, replicas);
        on.insert(device);
        share_flat[(r * o + option) * d + static_cast<size_t>(device)] +=
            1.0f / static_cast<float>(replicas);
      }
      const auto k = static_cast<float>(on.size());
      spread_flat[r * o + option] = (k - 1) / k;
      const auto w = static_cast<float>(space.options()[option].width);
      width_flat[(r * o + option) * 2] = w / static_cast<float>(this->devices);
      width_flat[(r * o + option) * 2 + 1] = w / static_cast<float>(replicas);
    }
  }
  const auto c64 = static_cast<int64_t>(counts), o64 = static_cast<int64_t>(o),
             d64 = static_cast<int64_t>(d);
  this->share = at::tensor(share_flat, at::kFloat).reshape({c64, o64, d64});
  this->share_values = share_flat;
  std::vector<int64_t> first(o);
  for (size_t option = 0; option < o; ++option)
    first[option] = space.options()[option].first_device;
  this->first_device = at::tensor(first, at::kLong);
  this->spread = at::tensor(spread_flat, at::kFloat).reshape({c64, o64});
  this->width = at::tensor(width_flat, at::kFloat).reshape({c64, o64, 2});
  for (const StepShape& shape : space.shapes()) {
    this->shape_replica_index.push_back(this->locality.ReplicaIndex(shape.replicas));
  }
}

}  // namespace placer::search
