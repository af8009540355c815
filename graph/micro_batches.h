// Micro-batches as a graph, as GPipe and PipeDream run them: the minibatch is cut into M equal
// micro-batches, every forward op (and so its backward op) runs once per micro-batch on its rows,
// all of them reading the same parameters; each parameter's update adds up the gradients of every
// micro-batch and runs once. One step then computes the plain step's update. The executor and the
// simulator run such a graph like any other; the placement's schedule orders its micro-batches
// (graph/pipeline.h).
//
// Replicated pipelines: R data-parallel replicas of such a step, each on 1/R of the minibatch in M
// micro-batches of its own; each replica sums its micro-batches' gradients, then the replicas'
// sums are all-reduced once, after the last micro-batch (graph/data_parallel.h).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "graph/step_names.h"

namespace placer::graph {

struct MicroBatchedGraph {
  Graph graph;  // micro-batch k's ops, inputs and labels are named "m<k>/<name>"; parameters keep
                // their names and are shared by every micro-batch
  int micro_batches = 1;
  int64_t micro_batch_size = 0;
};

// Builds the training step of `batch` rows as `micro_batches` micro-batches of batch / M rows,
// each loss normalised by the whole batch (so that the losses and gradients add up to the plain
// step's). Throws GraphError naming `micro_batches` when it is below 1 or does not divide `batch`.
MicroBatchedGraph BuildMicroBatched(const ForwardBuilder& build_forward, int64_t batch,
                                    int micro_batches, double learning_rate);

// The forward graph of `micro_batches` copies of `build_forward`'s, each on 1/M of the rows asked
// for, all reading the same parameters: micro-batch k's ops, inputs and labels are named
// "m<k>/<name>". Throws GraphError naming `micro_batches` when it is below 1 or does not divide
// the rows.
ForwardBuilder MicroBatchedForward(ForwardBuilder build_forward, int micro_batches);

// R = devices.size() replicas (replica r's placement on devices[r]) of the step micro-batched
// `micro_batches` times, on R equal shards of `batch` rows: replica r's copy of micro-batch k's op
// X is "r<r>/m<k>/X", its parameters "r<r>/<parameter>". Each replica sums its gradient
// micro-batch by micro-batch, as the one-replica step does, and the replicas' sums are all-reduced
// in buckets after the last micro-batch. M = 1 gives BuildDataParallel's step over equal shards.
// `ties_within` ties copies of a parameter within a replica, as BuildDataParallel's does.
// Throws GraphError when the batch does not split into R x M equal micro-batches.
DataParallelGraph BuildReplicatedPipelines(
    const ForwardBuilder& build_forward, int64_t batch, const std::vector<std::string>& devices,
    int micro_batches, double learning_rate, const AllReduceOptions& all_reduce = {},
    const std::function<TiedParameters(const Graph& replica)>& ties_within = nullptr);

// k for a name "m<k>/<rest>" or "r<r>/m<k>/<rest>" (an op or tensor of micro-batch k), else
// nullopt.
std::optional<int> MicroBatchOfName(const std::string& name);

// The micro-batch each op of `graph` belongs to: a forward op named "[r<r>/]m<k>/...", its
// backward op; -1 for what runs once, after the micro-batches: the updates, and in replicated
// pipelines each replica's summed gradient and its all-reduce. Throws GraphError naming an op
// outside any micro-batch.
std::vector<int> MicroBatchOfOps(const Graph& graph);

// The placement of a micro-batched graph that runs every micro-batch's copy of op X on the device
// `base_placement` gives X in `base` (the same model, not micro-batched), with M and `schedule`.
// Throws GraphError naming a forward op with no counterpart in `base`.
Placement PlaceMicroBatches(const MicroBatchedGraph& micro_batched, const Graph& base,
                            const Placement& base_placement, PipelineSchedule schedule);
// The same for the graph of M micro-batches alone.
Placement PlaceMicroBatches(const Graph& micro_batched, int micro_batches, const Graph& base,
                            const Placement& base_placement, PipelineSchedule schedule);

// "gpipe" or "1f1b"; ParsePipelineSchedule throws GraphError listing both for anything else.
const char* ToString(PipelineSchedule schedule);
PipelineSchedule ParsePipelineSchedule(const std::string& name);

}  // namespace placer::graph
