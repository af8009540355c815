// The search section's keys: the search's own options' (search::SearchOptions::Fields) and the
// config's own (evaluator, the replica and micro-batch counts searched, the closing side-by-side,
// the grouping), each declared once here with its bound and meaning.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string_view>

#include "placer/config/config.h"

namespace placer::config {
namespace {

// graph/grouping.h names its methods; a config may choose these, in enum order.
const std::array<std::string_view, 3> kGroupingNames = {
    graph::ToString(graph::GroupingMethod::kOpPerGroup),
    graph::ToString(graph::GroupingMethod::kColocate),
    graph::ToString(graph::GroupingMethod::kCoarsen)};

constexpr int kMostVerifyRounds = 1000;

}  // namespace

void SearchConfig::Fields(search::OptionVisitor& v) {
  v.OneOf("evaluator", evaluator, graph::kEvaluatorKindNames,
          "how the answer is judged: by running the training step (the search itself learns on "
          "a profiled simulator), or by the simulator's cost model throughout");
  options.Fields(v);
  v.Counts("replicas", replicas, "replica counts, e.g. [1, 2, 4]",
           "1, 2, 4, ... up to the device count, and the device count",
           "replica counts searched: the minibatch is split evenly over R replicas whose "
           "gradients are all-reduced (as DDP)");
  v.Constraint("replicas", "at most the device count and the batch");
  v.Counts(
      "micro_batches", micro_batches, "micro-batch counts, e.g. [1, 2, 4, 8]",
      "1, 2, 4, 8 (up to the device count, where more than 8) that divide the batch, within 120k "
      "ops of M copies of the step",
      "micro-batch counts searched with one replica: the minibatch cut into M micro-batches "
      "run as a pipeline under GPipe or 1F1B (the groups' devices are the stages)");
  v.Constraint("micro_batches", "dividing the batch");
  v.Counts("pipeline_replicas", pipeline_replicas, "replica counts, e.g. [2, 4]",
           "the replica counts of `replicas` from 2 up to half the devices, each with every "
           "micro-batch count above 1 for which R x M divides the batch and R x M copies of the "
           "step stay within 120k ops (with the default micro-batch counts, M at most 8 or D / R)",
           "replica counts whose replicas may also be pipelines: R replicas, each on 1/R of the "
           "minibatch in M micro-batches of its own, under GPipe or 1F1B, the all-reduce after "
           "the last micro-batch (stages on width-R options give R pipelines side by side, data "
           "parallel between them); named here, every M above 1 of `micro_batches` is searched "
           "with them; `[1]`: none");
  v.Constraint("pipeline_replicas", "among `replicas` (1 adds nothing)");
  v.Counts("tensor_ways", tensor_ways, "tensor-parallel ways, e.g. [2, 4]",
           "2, 4, ... dividing the devices of a host (`simulation.gpus_per_host`; all devices "
           "when 0), each over all devices only (D / T replicas of T shards), with a simulated "
           "evaluator and no cluster; none with a measured one (named, they are measured too); "
           "never with a cluster",
           "tensor-parallel ways T searched: each replica's attention and MLP blocks split T ways "
           "by Megatron's pairs (column-parallel query, key, value and first MLP layers, "
           "row-parallel output layers, one all-reduce each), every replica count of `replicas` "
           "that T divides giving R / T replicas of T shards; a group on an option as wide as "
           "R has its shards on their own devices, on a narrower one they share them; a model "
           "without such pairs gets none (said before the search); `[1]`: none");
  v.Constraint("tensor_ways", "each 1 or dividing the device count");
  v.Int("verify_candidates", verify_candidates, 1,
        "with the measured evaluator: how many of the search's best candidates are measured "
        "against the baselines");
  // Two rounds at least: one gives no interval to tell a tie from a win.
  v.Int("verify_rounds", verify_rounds, 2,
        "with the measured evaluator: interleaved rounds of every placement in the closing "
        "side-by-side");
  // Not given, it is raised to verify_rounds; given, it may not be fewer.
  verify_max_rounds = std::max(verify_max_rounds, verify_rounds);
  v.Int("verify_max_rounds", verify_max_rounds, verify_rounds,
        "with the measured evaluator: the most rounds of the rows tied with the fastest (and of "
        "the single devices and data parallelism) while the tie stands");
  v.Constraint("verify_max_rounds",
               fmt::format("at least `verify_rounds` (raised to it when not given), <= {}",
                           kMostVerifyRounds));
  v.OneOf("grouping", grouping, kGroupingNames,
          "what the policy places: `op` gives every forward op its own group; `colocate` merges "
          "single-consumer chains and weight-only ops into their consumer (the co-location rules "
          "of the 2017 paper; the group count is not bounded); `coarsen` leaves a graph of at "
          "most `max_groups` forward ops as it is and otherwise co-locates, then merges groups by "
          "cost (heavy edges first, balanced) down to `max_groups`. Groups always form an "
          "acyclic graph; backward and update ops follow their forward op, and exported "
          "placements are per op. `placer inspect` prints the groups a config gives. A "
          "checkpoint remembers its groups: `--resume` under a grouping that gives other groups "
          "is refused");
  v.Int("max_groups", max_groups, 1,
        "most groups `coarsen` leaves (the 2018 hierarchical planner used 256); ignored by `op` "
        "and `colocate`");
}

std::optional<graph::FieldError> SearchConfig::Check() const {
  if (std::optional<graph::FieldError> error = options.Check()) return error;
  if (verify_max_rounds > kMostVerifyRounds) {
    return graph::FieldError{{"verify_max_rounds"},
                             fmt::format("must be at most {}", kMostVerifyRounds)};
  }
  return std::nullopt;
}

}  // namespace placer::config
