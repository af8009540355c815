// The Megatron-style baseline: what a practitioner configures by hand for a transformer on a
// multi-GPU machine, Megatron-LM's tensor-model-parallel size T times data-parallel size R. Every
// attention and MLP block is split T ways by Megatron's pairs (graph::MegatronColumnStarts:
// column-parallel query, key, value and first MLP layers, row-parallel output layers, one sum
// each); shard s of data-parallel replica r runs on device r T + s, and the ops no split reaches
// (embeddings, normalisation, residuals, the loss) on the replica's first device, where Megatron
// repeats them on every shard; the replicas' gradients are all-reduced as data parallelism's
// (graph::BuildDataParallel). T runs over 1, 2, 4, 8, ... within a host (T = 1 is plain data
// parallelism), and with T > 1 P = 1, 2, 4, ... pipeline stages, as Megatron-LM's
// pipeline-model-parallel size: the replica's ops cut into P contiguous stages of about equal
// work, stage p's shards on devices r P T + p T + s, its pipeline run in M = P, 2P, 4P
// micro-batches under 1F1B; R = D / (T P). Each shape is simulated and the fastest valid one
// wins. Torch-free.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/placement.h"
#include "graph/tensor_parallel.h"
#include "runtime/sim/cost_model.h"

namespace placer::baselines {

// One shape of the grid.
struct MegatronShape {
  int tensor_ways = 1;      // T
  int pipeline_stages = 1;  // P
  int micro_batches = 1;    // M, each replica's pipeline's (1F1B)
};

struct MegatronTrial {
  int tensor_ways = 1;      // T
  int pipeline_stages = 1;  // P
  int micro_batches = 1;    // M
  int replicas = 1;         // R = D / (T P)
  int partial_sums = 0;     // per replica: the row-parallel layers' sums (Megatron's all-reduces)
  graph::EvaluationResult result;  // simulated; invalid when a device runs out of memory
};

struct MegatronBaselineResult {
  std::vector<MegatronTrial> trials;
  int best = -1;  // index into trials of the fastest valid one; -1 if none
};

// The work of one op of a replica's forward, to cut it into pipeline stages of equal work.
using OpWork = std::function<double(const graph::Graph& forward, graph::OpId op)>;

// The step of one shape of the grid and its placement over `device_names` (D of them, T P dividing
// D and R = D / (T P) times M dividing `batch`). Stages are cut by `op_work` (each op 1 when
// absent). Throws graph::GraphError when the model has no linear pair that splits T ways.
struct MegatronStep {
  graph::Graph graph;  // replica r's ops and tensors "r<r>/...", its shard s's "r<r>/tp<s>/...",
                       // micro-batch k's "r<r>/m<k>/..."
  graph::Placement placement;
  int partial_sums = 0;
  // One replica's split forward (at its share of the batch; the same parameters in every
  // replica), to slice the model's parameters for it (runtime/tensor_parallel.h); none at T = 1.
  std::optional<graph::TensorParallelGraph> split;
};
// `column_starts`: graph::MegatronColumnStarts of the model at `shape.tensor_ways`, where the
// caller has them (they depend on the model and T only, and picking them dominates the build of
// a large model's step); none: picked here.
MegatronStep BuildMegatronStep(const graph::ForwardBuilder& build_forward, int64_t batch,
                               double learning_rate, const std::vector<std::string>& device_names,
                               const MegatronShape& shape, const OpWork& op_work = nullptr,
                               std::optional<std::vector<std::string>> column_starts = {});

// Every T = 1, 2, 4, ... that divides `devices_per_host` (0: all of `devices` are one host) and
// the device count, with T > 1 every P = 1, 2, 4, ... and M = P, 2P, 4P (M = 1 when P = 1) whose
// R = D / (T P) replicas of M micro-batches split `batch`, simulated on `devices` with `costs`
// (which also cut the stages). A shape that cannot be built (no pair splits T ways, a step over
// `max_ops` ops) is left out and said so in `log`, which also gets one line per trial. `base` is
// the training step at `batch` rows (as `build_forward` builds it): every replica of a shape holds
// at least its ops, so a shape whose R replicas of it are over `max_ops` is left out unbuilt.
MegatronBaselineResult MegatronBaseline(const graph::Graph& base,
                                        const graph::ForwardBuilder& build_forward, int64_t batch,
                                        double learning_rate, const graph::DeviceSet& devices,
                                        const sim::CostModel& costs, int devices_per_host,
                                        int64_t max_ops, std::vector<std::string>* log);

}  // namespace placer::baselines
