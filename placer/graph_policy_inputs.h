// What the graph policy (placer/graph_policy.h) knows of the graph and the action space it is
// bound to (its weights know neither), and the list-scheduling estimate its decoding keeps.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>
#include <vector>

#include "graph/group_features.h"
#include "placer/action_space.h"
#include "placer/policy_network.h"

namespace placer::search {

// Built once per Bind: group features, levels, adjacency, and per replica count the options' device
// shares, spreads and widths.
struct GraphPolicyInputs {
  GraphPolicyInputs(const graph::GroupFeatures& features, const ActionSpace& space);
  ActionSpace space;
  LocalityTable locality;
  int groups = 0, options = 0, devices = 0;
  std::vector<double> work, out_bytes, param_bytes, in_bytes;
  std::vector<double> top, bottom;  // levels over the group DAG, in work
  double critical = 1;
  std::vector<int> in_degree, out_degree;
  at::Tensor in_adjacency, out_adjacency;  // [G, G]: rows of producers' / consumers' shares
  at::Tensor work_units;                   // [G]: work / (total work / D)
  at::Tensor share;                        // [R counts, O, D]
  at::Tensor spread;                       // [R counts, O]
  at::Tensor width;                        // [R counts, O, 2]
  at::Tensor first_device;                 // [O] int64: each option's first device
  std::vector<int> shape_replica_index;    // per shape
  double total_work = 0;
  std::vector<float> share_values;                                  // share, flat
  std::vector<std::vector<std::pair<int, double>>> producer_bytes;  // per group
};

// A list-scheduling estimate of the placement being decoded, as m-ETF's: each device runs its
// groups in decoding order; a group starts when its device is free and its inputs have arrived
// (a producer elsewhere sends its bytes over a typical link). Times are in units of the mean
// device load (total work / D), the unit of the load features.
class FinishEstimate {
 public:
  FinishEstimate(const GraphPolicyInputs& b, int r_index, double units_per_byte)
      : b_(b),
        r_(r_index),
        units_per_byte_(units_per_byte),
        available_(static_cast<size_t>(b.devices), 0.0),
        finish_(static_cast<size_t>(b.groups), 0.0) {}

  // Group t's estimated finish under each option (`out`: O values), its producers placed as
  // `options` says.
  void Finishes(int t, const std::vector<int>& options, std::vector<double>& out) const {
    out.resize(static_cast<size_t>(b_.options));
    for (int o = 0; o < b_.options; ++o) out[static_cast<size_t>(o)] = Finish(t, options, o);
  }
  // Places group t on `option`.
  void Commit(int t, const std::vector<int>& options, int option) {
    const double ready = Ready(t, options, option);
    const double work = b_.work_units.data_ptr<float>()[t];
    for (int d = 0; d < b_.devices; ++d) {
      const float share = Share(option, d);
      if (share <= 0) continue;
      double& free = available_[static_cast<size_t>(d)];
      free = std::max(free, ready) + work * share;
    }
    finish_[static_cast<size_t>(t)] = Finish(t, options, option, /*committed=*/true);
  }
  double makespan() const { return *std::max_element(available_.begin(), available_.end()); }

 private:
  float Share(int option, int device) const {
    return b_.share_values[(static_cast<size_t>(r_) * static_cast<size_t>(b_.options) +
                            static_cast<size_t>(option)) *
                               static_cast<size_t>(b_.devices) +
                           static_cast<size_t>(device)];
  }
  double Ready(int t, const std::vector<int>& options, int option) const {
    double ready = 0;
    for (const auto& [p, bytes] : b_.producer_bytes[static_cast<size_t>(t)]) {
      const double remote = 1.0 - b_.locality.Local(r_, options[static_cast<size_t>(p)], option);
      ready = std::max(ready, finish_[static_cast<size_t>(p)] + bytes * units_per_byte_ * remote);
    }
    return ready;
  }
  double Finish(int t, const std::vector<int>& options, int option, bool committed = false) const {
    const double ready = Ready(t, options, option);
    const double work = b_.work_units.data_ptr<float>()[t];
    double finish = ready;
    for (int d = 0; d < b_.devices; ++d) {
      const float share = Share(option, d);
      if (share <= 0) continue;
      // Once committed, the device's availability already includes the group.
      const double free = available_[static_cast<size_t>(d)];
      finish = std::max(finish, committed ? free : std::max(free, ready) + work * share);
    }
    return finish;
  }

  const GraphPolicyInputs& b_;
  int r_;
  double units_per_byte_;
  std::vector<double> available_, finish_;
};

}  // namespace placer::search
