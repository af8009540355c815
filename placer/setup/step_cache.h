// The training step at each step shape, built the one way every command builds it: what the
// search's action space places (search_setup.h, simulated_problem.h), what `evaluate`, `predict`,
// `train`, `profile`, `inspect` and `validate` run for a placement file or the model section, and
// what `placer worker` judges for a task. Each shape's step is built when first asked for and
// kept, so a run builds every shape at most once, from one forward builder (an ONNX export is then
// read once per batch: ForwardBuilderFor).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/grouping.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "placer/action_space.h"
#include "placer/candidate_evaluator.h"
#include "placer/config/config.h"

namespace placer::setup {

// The shape of a training step: R replicas on even shards of the batch, each in M micro-batches,
// or each split T ways Megatron's way (placer/baselines/megatron.h; with M = 1).
struct StepShape {
  int replicas = 1;
  int micro_batches = 1;
  int tensor_ways = 1;
  auto operator<=>(const StepShape&) const = default;
};

// What a model's steps are built from: its forward at any batch, the batch and learning rate of
// its training step, and its one-replica training step (a built-in model and an ONNX export build
// that themselves; null: the forward at the whole batch with graph::AppendBackwardAndUpdate).
struct StepRecipe {
  graph::ForwardBuilder forward;
  int64_t batch = 0;
  double learning_rate = 0;
  std::function<graph::Graph()> base;
};
StepRecipe RecipeFor(const config::Config& config);

class StepCache {
 public:
  explicit StepCache(StepRecipe recipe);
  explicit StepCache(const config::Config& config) : StepCache(RecipeFor(config)) {}

  // Maps the forward ops of every step built from now on (and of the one-replica step, built
  // already or not) onto `grouping`'s groups, made for base(): each op's group and copy, as the
  // search's options place them (search::ReplicatedModel). Throws std::logic_error when a step
  // of another shape was built before: it would lack the mapping.
  void UseGrouping(graph::Grouping grouping);
  bool grouped() const;

  // The step of `shape` (search::ReplicatedModel: for T > 1 `replicas` counts the R T copies),
  // built on the first call and kept until the cache dies; thread-safe. Replica r's ops are named
  // "r<r>/<op>", micro-batch k's "m<k>/<op>" (both: "r<r>/m<k>/<op>"), shard s's
  // "r<r>/tp<s>/<op>". Throws graph::GraphError (graph::BatchError for a batch an ONNX export
  // does not take) for a shape the model cannot be built in, naming why; with a grouping also for
  // a split shape whose replicas do not share the batch evenly.
  const search::ReplicatedModel& Get(StepShape shape);
  const graph::Graph& base() { return Get({}).graph; }
  // Data parallelism over `replicas` devices: Get({replicas}), but a single replica too as one
  // ("r0/<op>"), as `evaluate --data-parallel` and `profile --data-parallel` run it on one device.
  const search::ReplicatedModel& DataParallel(int replicas);
  // The step of `shape` if it was built already (Get), else null: never builds.
  const search::ReplicatedModel* Built(StepShape shape) const;
  // Frees the step of `shape` (the search's split steps over its op bound): references to it die.
  void Forget(StepShape shape);

  // Megatron's column-parallel layers at `ways` ways (graph::MegatronColumnStarts of the forward
  // at the whole batch; they depend on the model and T only), picked once: empty when no linear
  // pair splits so. Throws graph::GraphError, every time, when the pick is refused.
  const std::vector<std::string>& ColumnStarts(int ways);

  const graph::ForwardBuilder& forward() const { return recipe_.forward; }
  int64_t batch() const { return recipe_.batch; }
  double learning_rate() const { return recipe_.learning_rate; }

 private:
  struct Key {
    StepShape shape;
    bool named_replica = false;  // DataParallel(1)'s "r0/" step
    auto operator<=>(const Key&) const = default;
  };
  struct Starts {
    std::vector<std::string> layers;
    std::optional<std::string> refused;
  };
  // With mutex_ held.
  const search::ReplicatedModel& Find(const Key& key);
  search::ReplicatedModel Build(const Key& key);
  search::ReplicatedModel BuildSplit(StepShape shape);
  const std::vector<std::string>& FindStarts(int ways);

  StepRecipe recipe_;
  mutable std::mutex mutex_;
  std::optional<graph::Grouping> grouping_;
  std::map<Key, std::unique_ptr<search::ReplicatedModel>> steps_;
  std::map<int, Starts> starts_;
};

// Data parallelism's placement of a replicated step (StepCache::DataParallel): replica r's forward
// ops on devices[r], as graph::BuildDataParallel places them.
graph::Placement ReplicaPlacement(const search::ReplicatedModel& step,
                                  std::vector<std::string> devices);

// The step shapes of a search's action space, as the config or the caller asks for them.
struct SearchShapes {
  std::vector<int> replica_counts;      // 1 is always built
  std::vector<int> micro_batch_counts;  // of one replica; 1 and below are ignored
  std::vector<search::ReplicatedPipeline> pipelines;
  std::vector<search::TensorParallelShape> tensor_parallel;
  int64_t max_tensor_parallel_ops = 0;  // a split step over it is left out
};

// The steps of every shape of `shapes` that builds, mapped onto `steps`' grouping (UseGrouping
// first): [0] the one-replica step, then per replica count, per micro-batch count (both
// ascending), per replicated pipeline and per split shape (as listed). A shape that cannot be
// built is left out with the reason in `notes`: a count the batch does not take, a pipeline or
// split shape whose replica count was not built, a model no linear pair of which splits T ways
// (one note for all of T's shapes), a split step over the op bound.
std::vector<const search::ReplicatedModel*> SearchSteps(StepCache& steps,
                                                        const SearchShapes& shapes,
                                                        std::vector<std::string>* notes);

}  // namespace placer::setup
