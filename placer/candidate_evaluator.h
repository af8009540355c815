// From candidates of the action space to placements of real training steps, and their judgement.
//
// The model is built once per step shape of the action space (setup::StepCache): per replica
// count R (R replicas, each on 1/R of the minibatch, gradients all-reduced), per micro-batch count
// M > 1 (one replica, M micro-batches: graph/micro_batches.h; both schedules share the graph), per
// replicated pipeline (R x M: graph::BuildReplicatedPipelines) and per split shape; the groups are
// those of the unreplicated model, so a candidate's option for group g places every replica's (or
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
#include "graph/micro_batches.h"
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

// The one-replica step micro-batched `micro_batched.micro_batches` times, mapped onto the groups of
// `base`. Throws GraphError when its ops are not copies of `base`'s.
ReplicatedModel MicroBatched(graph::MicroBatchedGraph micro_batched, const graph::Graph& base,
                             const graph::Grouping& grouping);

// The action space over `devices` devices of the step shapes `models` holds (setup::SearchSteps':
// replica counts, micro-batch counts, replicated pipelines and tensor-parallel shapes).
ActionSpace SpaceOf(int devices, const std::vector<const ReplicatedModel*>& models);

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
