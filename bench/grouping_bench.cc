// Time to group a large training step: MakeGrouping (coarsening to 256 groups) and
// ComputeGroupFeatures, the two things a search does with the graph before its first policy step.
// Target (issue 7): under 10 s for an unrolled 8-layer NMT of more than 50,000 ops.
//
// Graphs: the attentional LSTM encoder-decoder of graph/zoo.h (BuildNmt, gate-level LSTM cells,
// default sizes), unrolled over growing numbers of steps; the whole training step (forward,
// backward, SGD update). Usage: grouping_bench [ROUNDS]; medians of ROUNDS (default 5) rounds.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "graph/group_features.h"
#include "graph/grouping.h"
#include "graph/models.h"
#include "graph/ops.h"
#include "graph/zoo.h"

namespace {

using namespace placer::graph;
using placer::bench::Clock;
using placer::bench::Median;

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  struct Size {
    int64_t layers, steps;
  };
  fmt::print(
      "grouping_bench: NMT (graph/zoo.h, gate-level cells), coarsen to 256 groups, median "
      "of {} rounds\n\n",
      rounds);
  fmt::print(
      "| NMT layers x steps | ops (forward) | colocate groups | coarsen groups | heaviest group / "
      "mean (its ops) | MakeGrouping (ms) | ComputeGroupFeatures (ms) | total (ms) |\n");
  fmt::print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  // About 1k and 10k ops, the default 8-layer NMT (more than 50,000 ops), and 128 steps.
  for (Size size : {Size{2, 5}, Size{8, 14}, Size{8, NmtOptions{}.source_steps}, Size{8, 128}}) {
    const Graph graph =
        BuildNmt({.layers = size.layers, .source_steps = size.steps, .target_steps = size.steps});
    const GroupingOptions options{GroupingMethod::kCoarsen, 256};
    std::vector<double> grouping_s, features_s;
    Grouping grouping;
    for (int r = 0; r < rounds; ++r) {
      auto start = Clock::now();
      grouping = MakeGrouping(graph, options);
      grouping_s.push_back(placer::bench::SecondsSince(start));
      start = Clock::now();
      const GroupFeatures features = ComputeGroupFeatures(graph, grouping);
      features_s.push_back(placer::bench::SecondsSince(start));
      if (features.values.empty()) return 1;
    }
    CheckGrouping(graph, grouping);
    // How balanced the groups came out: the heaviest group's FLOPs against the mean group's.
    std::vector<double> flops(static_cast<size_t>(grouping.num_groups()), 0);
    double total = 0;
    for (OpId id = 0; id < graph.num_ops(); ++id) {
      const Op& op = graph.op(id);
      const OpId anchor = op.phase == Phase::kForward ? id : op.forward_op;
      const double f = OpFlops(graph, op);
      flops[static_cast<size_t>(grouping.group_of_op[static_cast<size_t>(anchor)])] += f;
      total += f;
    }
    const int colocated = MakeGrouping(graph, {GroupingMethod::kColocate, 256}).num_groups();
    const size_t heaviest =
        static_cast<size_t>(std::max_element(flops.begin(), flops.end()) - flops.begin());
    fmt::print("| {} x {} | {} ({}) | {} | {} | {:.2f} ({}) | {:.1f} | {:.1f} | {:.1f} |\n",
               size.layers, size.steps, graph.num_ops(), graph.OpsInPhase(Phase::kForward).size(),
               colocated, grouping.num_groups(), flops[heaviest] / (total / grouping.num_groups()),
               grouping.members[heaviest].size(), Median(grouping_s) * 1e3,
               Median(features_s) * 1e3, (Median(grouping_s) + Median(features_s)) * 1e3);
  }
  return 0;
}
