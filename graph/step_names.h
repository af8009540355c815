// The names of the copies a replicated or micro-batched training step makes of the model's ops and
// tensors: replica r's copy of X is "r<r>/X" (graph/data_parallel.h), micro-batch k's "m<k>/X"
// (graph/micro_batches.h), and micro-batch k of replica r in a step of replicated pipelines
// "r<r>/m<k>/X". One parser for all three, so that every reader agrees on what a name says.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace placer::graph {

std::string ReplicaName(int replica, const std::string& name);
// "r0", ..., "r<R-1>": the replicas' labels, as the step builders take them for devices
// (BuildDataParallel, BuildReplicatedPipelines), so that every builder of a shape names it alike.
std::vector<std::string> ReplicaLabels(int replicas);
std::string MicroBatchName(int micro_batch, const std::string& name);
// Micro-batch k's copy of a name that may carry a replica: "r<r>/X" becomes "r<r>/m<k>/X", and a
// name without one "m<k>/X".
std::string InMicroBatch(int micro_batch, const std::string& name);

struct StepName {
  std::optional<int> replica;      // "r<r>/" at the front
  std::optional<int> micro_batch;  // "m<k>/" at the front or right after the replica
  std::string base;                // what follows them: the model's own name
};
StepName ParseStepName(const std::string& name);

// The tensor-parallel shard of an op or tensor named "tp<s>/X", possibly after "r<r>/" and "m<k>/"
// (graph/tensor_parallel.h); nullopt for a name of no shard.
std::optional<int> ShardOfName(const std::string& name);

}  // namespace placer::graph
