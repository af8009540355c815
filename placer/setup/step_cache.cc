#include "placer/setup/step_cache.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <utility>

#include "graph/micro_batches.h"
#include "graph/step_names.h"
#include "graph/tensor_parallel.h"
#include "graph/training_step.h"
#include "placer/setup/model_factory.h"
#include "placer/setup/tensor_parallel_models.h"

namespace placer::setup {
namespace {

// A step without the groups mapped: its copies and shards, and each forward op's copy where the
// builder says it (replicated steps; what ReplicaPlacement reads).
search::ReplicatedModel Unmapped(graph::Graph graph, StepShape shape, int copies,
                                 std::vector<int64_t> shard_sizes,
                                 std::vector<int> copy_of_op = {}) {
  search::ReplicatedModel model;
  model.replicas = copies;
  model.micro_batches = shape.micro_batches;
  model.tensor_ways = shape.tensor_ways;
  model.graph = std::move(graph);
  model.shard_sizes = std::move(shard_sizes);
  model.replica_of_op = std::move(copy_of_op);
  model.forward_ops = model.graph.OpsInPhase(graph::Phase::kForward);
  return model;
}

}  // namespace

StepRecipe RecipeFor(const config::Config& config) {
  return {.forward = ForwardBuilderFor(config),
          .batch = config.model.batch_size,
          .learning_rate = config.model.learning_rate,
          .base = [config] { return BuildSingleModel(config); }};
}

StepCache::StepCache(StepRecipe recipe) : recipe_(std::move(recipe)) {
  if (!recipe_.base) {
    recipe_.base = [forward = recipe_.forward, batch = recipe_.batch,
                    learning_rate = recipe_.learning_rate] {
      graph::Graph base = forward(batch, 0);
      graph::AppendBackwardAndUpdate(base, learning_rate);
      base.Validate();
      return base;
    };
  }
}

void StepCache::UseGrouping(graph::Grouping grouping) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Key base_key{};
  if (std::any_of(steps_.begin(), steps_.end(),
                  [&](const auto& entry) { return entry.first != base_key; })) {
    throw std::logic_error("StepCache::UseGrouping after steps of other shapes were built");
  }
  grouping_ = std::move(grouping);
  if (auto it = steps_.find(base_key); it != steps_.end()) {
    // The graph stays where it was: references to it stay good.
    search::ReplicatedModel& base = *it->second;
    base = search::SingleReplica(std::move(base.graph), *grouping_);
  }
}

bool StepCache::grouped() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return grouping_.has_value();
}

const search::ReplicatedModel& StepCache::Get(StepShape shape) {
  std::lock_guard<std::mutex> lock(mutex_);
  return Find({shape, false});
}

const search::ReplicatedModel& StepCache::DataParallel(int replicas) {
  std::lock_guard<std::mutex> lock(mutex_);
  return Find({{.replicas = replicas}, replicas == 1});
}

const search::ReplicatedModel* StepCache::Built(StepShape shape) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = steps_.find({shape, false});
  return it == steps_.end() ? nullptr : it->second.get();
}

void StepCache::Forget(StepShape shape) {
  std::lock_guard<std::mutex> lock(mutex_);
  steps_.erase({shape, false});
}

const std::vector<std::string>& StepCache::ColumnStarts(int ways) {
  std::lock_guard<std::mutex> lock(mutex_);
  return FindStarts(ways);
}

const search::ReplicatedModel& StepCache::Find(const Key& key) {
  auto it = steps_.find(key);
  if (it == steps_.end()) {
    // Built before it is inserted: a shape that throws leaves nothing behind.
    auto step = std::make_unique<search::ReplicatedModel>(Build(key));
    it = steps_.emplace(key, std::move(step)).first;
  }
  return *it->second;
}

const std::vector<std::string>& StepCache::FindStarts(int ways) {
  auto it = starts_.find(ways);
  if (it == starts_.end()) {
    Starts starts;
    const graph::Graph forward = recipe_.forward(recipe_.batch, 0);  // throws as the model does
    try {
      starts.layers = graph::MegatronColumnStarts(forward, ways);
    } catch (const graph::GraphError& error) {
      // A refused pick is refused again at once, not tried again (it may take long to refuse).
      starts.refused = error.what();
    }
    it = starts_.emplace(ways, std::move(starts)).first;
  }
  if (it->second.refused) throw graph::GraphError(*it->second.refused);
  return it->second.layers;
}

search::ReplicatedModel StepCache::Build(const Key& key) {
  const StepShape shape = key.shape;
  const int64_t batch = recipe_.batch;
  const double learning_rate = recipe_.learning_rate;
  if (shape.tensor_ways > 1) return BuildSplit(shape);
  if (shape.micro_batches > 1) {
    if (shape.replicas > 1) {
      graph::DataParallelGraph pipelines = graph::BuildReplicatedPipelines(
          recipe_.forward, batch, graph::ReplicaLabels(shape.replicas), shape.micro_batches,
          learning_rate);
      if (!grouping_) {
        return Unmapped(std::move(pipelines.graph), shape, shape.replicas,
                        std::move(pipelines.shard_sizes),
                        std::move(pipelines.placement.device_of_op));
      }
      search::ReplicatedModel model =
          search::Replicated(std::move(pipelines), Find({}).graph, *grouping_);
      model.micro_batches = shape.micro_batches;
      return model;
    }
    graph::MicroBatchedGraph micro_batched =
        graph::BuildMicroBatched(recipe_.forward, batch, shape.micro_batches, learning_rate);
    if (!grouping_) return Unmapped(std::move(micro_batched.graph), shape, 1, {batch});
    return search::MicroBatched(std::move(micro_batched), Find({}).graph, *grouping_);
  }
  if (shape.replicas > 1 || key.named_replica) {
    graph::DataParallelGraph replicated = graph::BuildDataParallel(
        recipe_.forward, batch, graph::ReplicaLabels(shape.replicas),
        std::vector<double>(static_cast<size_t>(shape.replicas), 1.0), learning_rate);
    if (!grouping_ || key.named_replica) {
      return Unmapped(std::move(replicated.graph), shape, shape.replicas,
                      std::move(replicated.shard_sizes),
                      std::move(replicated.placement.device_of_op));
    }
    return search::Replicated(std::move(replicated), Find({}).graph, *grouping_);
  }
  graph::Graph base = recipe_.base();
  if (!grouping_) {
    const std::vector<graph::OpId> forward = base.OpsInPhase(graph::Phase::kForward);
    std::vector<int> replica_of_op(static_cast<size_t>(base.num_ops()), -1);
    for (graph::OpId id : forward) replica_of_op[static_cast<size_t>(id)] = 0;
    return Unmapped(std::move(base), shape, 1, {}, std::move(replica_of_op));
  }
  return search::SingleReplica(std::move(base), *grouping_);
}

search::ReplicatedModel StepCache::BuildSplit(StepShape shape) {
  if (shape.micro_batches > 1) {
    throw graph::GraphError(
        fmt::format("{} micro-batches of tensor-parallel replicas: not a step the search gives",
                    shape.micro_batches));
  }
  const std::vector<std::string>& starts = FindStarts(shape.tensor_ways);
  if (starts.empty()) {
    throw graph::GraphError(
        fmt::format("no linear layer pair of the model splits {} ways", shape.tensor_ways));
  }
  const search::TensorParallelShape split{.replicas = shape.replicas * shape.tensor_ways,
                                          .tensor_ways = shape.tensor_ways};
  if (grouping_) {
    return TensorParallelModel(Find({}).graph, *grouping_, recipe_.forward, recipe_.batch,
                               recipe_.learning_rate, split, starts);
  }
  baselines::MegatronStep step =
      BuildTensorParallelStep(recipe_.forward, recipe_.batch, recipe_.learning_rate, split, starts);
  return Unmapped(std::move(step.graph), shape, split.replicas,
                  graph::SplitBatch(recipe_.batch,
                                    std::vector<double>(static_cast<size_t>(shape.replicas), 1.0)),
                  std::move(step.placement.device_of_op));
}

graph::Placement ReplicaPlacement(const search::ReplicatedModel& step,
                                  std::vector<std::string> devices) {
  return {.devices = std::move(devices), .device_of_op = step.replica_of_op};
}

std::vector<const search::ReplicatedModel*> SearchSteps(StepCache& steps,
                                                        const SearchShapes& shapes,
                                                        std::vector<std::string>* notes) {
  if (!steps.grouped()) {
    throw std::logic_error("SearchSteps: the steps' groups are not mapped (UseGrouping)");
  }
  auto note = [&](std::string text) {
    if (notes != nullptr) notes->push_back(std::move(text));
  };
  std::vector<const search::ReplicatedModel*> models{&steps.Get({})};
  // Builds the step of `shape`, or notes why it was left out (`what`: the shape in words).
  auto add = [&](StepShape shape, const std::string& what) {
    try {
      models.push_back(&steps.Get(shape));
    } catch (const graph::GraphError& error) {
      note(fmt::format("{} left out: {}", what, error.what()));
    }
  };
  const std::set<int> replica_counts(shapes.replica_counts.begin(), shapes.replica_counts.end());
  for (int r : replica_counts) {
    if (r > 1) add({.replicas = r}, fmt::format("{} replicas", r));
  }
  const std::set<int> micro_batch_counts(shapes.micro_batch_counts.begin(),
                                         shapes.micro_batch_counts.end());
  for (int m : micro_batch_counts) {
    if (m > 1) add({.micro_batches = m}, fmt::format("{} micro-batches", m));
  }
  // A replicated step's options place a pipeline's or a split step's copies too: those need it.
  auto replicated = [&](int replicas) {
    return std::any_of(models.begin(), models.end(), [&](const search::ReplicatedModel* m) {
      return m->replicas == replicas && m->micro_batches == 1 && m->tensor_ways == 1;
    });
  };
  for (const search::ReplicatedPipeline& p : shapes.pipelines) {
    const std::string what =
        fmt::format("{} replicas of {} micro-batches", p.replicas, p.micro_batches);
    if (replicated(p.replicas)) {
      add({.replicas = p.replicas, .micro_batches = p.micro_batches}, what);
    } else {
      note(fmt::format("{} left out: no step of {} replicas", what, p.replicas));
    }
  }
  // Megatron's layers at each T, picked once (the pick dominates the build of a large model's
  // split steps). Ways whose pick is refused or finds no pair give no shape at all: one note per
  // reason, not one per shape (a convolutional network has no pair at any T).
  std::set<int> splits;                                   // ways with layers to split
  std::map<std::string, std::vector<int>> ways_left_out;  // by reason
  std::set<int> picked;
  for (const search::TensorParallelShape& shape : shapes.tensor_parallel) {
    const int ways = shape.tensor_ways;
    if (!picked.insert(ways).second) continue;
    try {
      if (steps.ColumnStarts(ways).empty()) {
        ways_left_out["no linear layer pair of the model splits so"].push_back(ways);
      } else {
        splits.insert(ways);
      }
    } catch (const graph::GraphError& error) {
      ways_left_out[error.what()].push_back(ways);
    }
  }
  for (const auto& [reason, ways] : ways_left_out) {
    note(fmt::format("no tensor-parallel shapes of {} ways: {}", fmt::join(ways, "/"), reason));
  }
  for (const search::TensorParallelShape& shape : shapes.tensor_parallel) {
    if (!splits.contains(shape.tensor_ways)) continue;
    const StepShape step{.replicas = shape.replicas / shape.tensor_ways,
                         .tensor_ways = shape.tensor_ways};
    try {
      if (!replicated(shape.replicas)) {
        throw graph::GraphError(
            fmt::format("the step of {} replicas, whose options place its copies, was not built",
                        shape.replicas));
      }
      const search::ReplicatedModel& model = steps.Get(step);
      if (model.graph.num_ops() > shapes.max_tensor_parallel_ops) {
        const int64_t ops = model.graph.num_ops();
        steps.Forget(step);
        throw graph::GraphError(
            fmt::format("its {} ops are over {}", ops, shapes.max_tensor_parallel_ops));
      }
      models.push_back(&model);
    } catch (const graph::GraphError& error) {
      note(fmt::format("{} left out: {}",
                       search::DescribeTensorParallel(shape.replicas, shape.tensor_ways),
                       error.what()));
    }
  }
  return models;
}

}  // namespace placer::setup
