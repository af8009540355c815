// From candidates of the action space to placements of real training steps, and their judgement.
//
// The model is built once per replica count R of the action space (R replicas, each on 1/R of
// the minibatch, gradients all-reduced), once per micro-batch count M > 1 (one replica, M
// micro-batches: graph/micro_batches.h; both schedules share the graph) and once per replicated
// pipeline (R x M: graph::BuildReplicatedPipelines); the groups are those of
// the unreplicated model, so a candidate's option for group g places every replica's (or
// micro-batch's) copy of g's ops. Evaluation goes through the Evaluator seam, one evaluator per
// model, a whole batch of candidates per call.
// Torch-free.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/evaluator.h"
#include "graph/grouping.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "placer/action_space.h"

namespace placer::search {

// The training step with `replicas` replicas, and which group of the unreplicated model each of
// its forward ops belongs to.
struct ReplicatedModel {
  // The copies of each group the options place: the replicas, or with tensor_ways T > 1 the
  // replicas' shards (replica r's shard s is copy r T + s; ops "r<r>/tp<s>/<op>").
  int replicas = 1;
  int micro_batches = 1;  // above 1: ops named "m<k>/<op>", or "r<r>/m<k>/<op>" with replicas
                          // (graph/micro_batches.h)
  int tensor_ways = 1;
  graph::Graph graph;
  std::vector<int64_t> shard_sizes;  // rows of the minibatch per replica
  std::vector<int>
      group_of_op;  // per op of `graph`: a group of the base grouping; -1 if not forward
  std::vector<int> replica_of_op;  // per op of `graph`: its replica (copy); -1 if not forward
  std::vector<graph::OpId> forward_ops;
  int num_groups = 0;  // of the base grouping
};

// The unreplicated model itself (R = 1): `graph` is the model the grouping was made for.
ReplicatedModel SingleReplica(graph::Graph graph, const graph::Grouping& grouping);
// A replicated training step built by graph::BuildDataParallel over `replicated.shard_sizes.size()`
// replicas, mapped onto the groups of `base`. Throws GraphError when its ops are not replicas of
// `base`'s.
ReplicatedModel Replicated(graph::DataParallelGraph replicated, const graph::Graph& base,
                           const graph::Grouping& grouping);

// The model at every replica count of `counts` (1 is always first): `base` (built at `batch` rows,
// the model `grouping` was made for) and, for R > 1, graph::BuildDataParallel of `build_forward`
// over R even shards. A replica count that cannot be built (a shard size the model does not
// take, more replicas than rows) is left out, with the reason in `notes`.
std::vector<std::unique_ptr<ReplicatedModel>> BuildReplicatedModels(
    graph::Graph base, const graph::Grouping& grouping, const graph::ForwardBuilder& build_forward,
    int64_t batch, double learning_rate, const std::vector<int>& counts,
    std::vector<std::string>* notes);
// The one-replica step micro-batched `micro_batches` times, mapped onto the groups of `base`.
// Throws GraphError when `micro_batches` does not divide the batch or its ops are not copies of
// `base`'s.
ReplicatedModel MicroBatched(const graph::ForwardBuilder& build_forward, int64_t batch,
                             int micro_batches, double learning_rate, const graph::Graph& base,
                             const graph::Grouping& grouping);
// Appends to `models` (BuildReplicatedModels', [0] the base) the step at every micro-batch count
// M > 1 of `counts`; a count that cannot be built is left out with the reason in `notes`.
void AddMicroBatchedModels(std::vector<std::unique_ptr<ReplicatedModel>>& models,
                           const graph::Grouping& grouping,
                           const graph::ForwardBuilder& build_forward, int64_t batch,
                           double learning_rate, const std::vector<int>& counts,
                           std::vector<std::string>* notes);

// Appends to `models` the step of every replicated pipeline of `pipelines` (R x M,
// graph::BuildReplicatedPipelines) whose R has a model already (M = 1); one that cannot be built
// is left out with the reason in `notes`.
void AddReplicatedPipelineModels(std::vector<std::unique_ptr<ReplicatedModel>>& models,
                                 const graph::Grouping& grouping,
                                 const graph::ForwardBuilder& build_forward, int64_t batch,
                                 double learning_rate,
                                 const std::vector<ReplicatedPipeline>& pipelines,
                                 std::vector<std::string>* notes);

// The action space over `devices` devices of the step shapes `models` holds (BuildReplicatedModels'
// replica counts, AddMicroBatchedModels' micro-batch counts, AddReplicatedPipelineModels'
// replicated pipelines, setup::AddTensorParallelModels' tensor-parallel shapes).
ActionSpace SpaceOf(int devices, const std::vector<std::unique_ptr<ReplicatedModel>>& models);

class CandidateEvaluator {
 public:
  // One model per step shape of the space (the schedules of one micro-batch count share theirs),
  // in any order; evaluators[i] judges models[i]'s placements; both must outlive this
  // object. Throws std::invalid_argument when they do not line up.
  CandidateEvaluator(const ActionSpace& space, std::vector<const ReplicatedModel*> models,
                     std::vector<graph::Evaluator*> evaluators,
                     std::vector<std::string> device_names);

  const ActionSpace& space() const { return space_; }
  const std::vector<std::string>& device_names() const { return device_names_; }
  const ReplicatedModel& model(int replicas, int micro_batches = 1, int tensor_ways = 1) const {
    return *models_[Index(replicas, micro_batches, tensor_ways)];
  }
  const ReplicatedModel& model(const Candidate& c) const {
    return model(c.replicas, c.micro_batches, c.tensor_ways);
  }
  int num_groups() const { return models_.front()->num_groups; }
  graph::Evaluator& evaluator(int replicas, int micro_batches = 1, int tensor_ways = 1) const {
    return *evaluators_[Index(replicas, micro_batches, tensor_ways)];
  }

  // The per-op placement of `candidate` on model(candidate).graph, with its micro-batch count and
  // schedule.
  graph::Placement PlacementOf(const Candidate& candidate) const;

  // Judges every candidate, in order; each replica count's share goes to its evaluator's
  // EvaluateBatch in one call. Never throws for a bad candidate: an evaluator exception or a
  // candidate outside the space makes that result invalid with the reason; only
  // graph::EvaluatorUnavailable (the evaluator itself is gone) passes through.
  std::vector<graph::EvaluationResult> Evaluate(std::span<const Candidate> candidates) const;

  std::string name() const { return evaluators_.front()->name(); }
  bool deterministic() const { return evaluators_.front()->deterministic(); }

 private:
  size_t Index(int replicas, int micro_batches, int tensor_ways) const;

  ActionSpace space_;
  std::vector<const ReplicatedModel*> models_;
  std::vector<graph::Evaluator*> evaluators_;
  std::vector<std::string> device_names_;
};

}  // namespace placer::search
