// The search's action space: data, model and hybrid parallelism as one kind of decision.
//
// A candidate splits the minibatch into R replicas (R from a short list: 1, 2, 4, ... up to the
// device count) and gives every group of the model one *option*: the set of devices its R replicas
// run on. An option has a width w (a divisor of R, itself one of the replica counts) and is the
// strided device set {first, first + stride, ..., first + (w - 1) stride}, stride = floor(D / w);
// replica r of the group runs on the device of block floor(r w / R), so replicas 0 .. R/w - 1 share
// the first device, and so on. Every familiar placement is a point of this space:
//   - one device:               R = 1, every group on the option {d};
//   - model parallelism:         R = 1, groups on single-device options;
//   - data parallelism:          R = D, every group on the option of width D;
//   - hybrids:                   R = 4, convolutions on the width-4 option, the classifier on {0}
//                                ("data-parallel convolutions, model-parallel classifier");
//                                R = 2 with stages on width-2 options {0, 4} and {1, 5} (two
//                                pipelines of two stages each), ...
// The batch is split evenly over the R replicas (graph::BuildDataParallel), the gradients of a
// parameter's replicas are all-reduced (a bucketed ring, as DDP), so every candidate is a real
// placement of the R-replica training step that the executor runs and the simulator predicts.
//
// Pipelines: a one-replica candidate may also cut the minibatch into M micro-batches (M from a
// short list, ActionSpace::DefaultMicroBatchCounts) run under GPipe or 1F1B (graph/pipeline.h):
// the groups' options are then the stages, contiguous or not (any group on any device).
// Replicated pipelines: R > 1 replicas, each cut into M micro-batches of its own shard
// (graph::BuildReplicatedPipelines), the all-reduce after the last micro-batch; with stages on
// width-R options ({0, 4} then {1, 5}, ...) that is R pipelines side by side, data parallel
// between them (PipeDream's replicated stages, Megatron's DP x PP). The first decision is the
// step's *shape*: a replica count, with a micro-batch count and a schedule where the space has
// pipelines of that many replicas.
// Tensor parallelism: a shape may also split every replica T ways (graph/tensor_parallel.h,
// Megatron's pairs: column-parallel query, key, value and first MLP layers, row-parallel output
// layers). Its R copies of each group are then R / T replicas of T shards each, copy r T + s
// being shard s of replica r, and the options place the copies as they place replicas: a group
// on an option as wide as R has each shard on its own device (T-way tensor parallelism inside
// each replica, Megatron's TP x DP when every group takes it); on a narrower one, shards share
// devices (on an option of width R / T, every shard of a replica on one device: that group is
// not split in effect). So the sharding degree of each group is a choice of its option, and the
// ops no split reaches (embeddings, the loss) run with shard 0. With R < D copies the widest
// option lays them D / R apart, so a replica's shards are too (on a machine of several hosts a
// narrow shape's shards can straddle them). One replica's pipeline is not split in this space
// (the Megatron-style baseline's grid has TP x PP).
// Torch-free.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/placement.h"

namespace placer::search {

struct ParallelOption {
  int width = 1;         // devices the group's replicas are spread over
  int first_device = 0;  // the option's devices: first_device + k * stride, k < width
  int stride = 1;
  bool operator==(const ParallelOption&) const = default;
};

// A point of the action space.
struct Candidate {
  // R, one of ActionSpace::replica_counts(): the copies of each group its options place (with
  // tensor_ways T > 1, R / T replicas of T shards each).
  int replicas = 1;
  std::vector<int> options;  // per group: an index into ActionSpace::options()
  // M, one of ActionSpace::micro_batch_counts() (one replica) or of a replicated pipeline of
  // the space (ActionSpace::replicated_pipelines()). The schedule is GPipe when M = 1.
  int micro_batches = 1;
  graph::PipelineSchedule schedule = graph::PipelineSchedule::kGPipe;
  int tensor_ways = 1;  // T: the shards of each replica, one of a tensor-parallel shape's
  bool operator==(const Candidate&) const = default;
};

// The first decision of a candidate: its replica count, micro-batch count, schedule and tensor
// ways.
struct StepShape {
  int replicas = 1;
  int micro_batches = 1;
  graph::PipelineSchedule schedule = graph::PipelineSchedule::kGPipe;
  int tensor_ways = 1;
  bool operator==(const StepShape&) const = default;
};

// A tensor-parallel shape of the space: `replicas` copies of each group (one of the replica
// counts), `replicas` / `tensor_ways` replicas of `tensor_ways` >= 2 shards each, one micro-batch.
struct TensorParallelShape {
  int replicas = 2;
  int tensor_ways = 2;
  bool operator==(const TensorParallelShape&) const = default;
  auto operator<=>(const TensorParallelShape&) const = default;
};

// A replicated-pipeline shape of the space: R > 1 replicas of M > 1 micro-batches each (under
// either schedule).
struct ReplicatedPipeline {
  int replicas = 2;
  int micro_batches = 2;
  bool operator==(const ReplicatedPipeline&) const = default;
  auto operator<=>(const ReplicatedPipeline&) const = default;
};

struct NamedCandidate {
  std::string name;  // "data parallel", "m-ETF", ...
  Candidate candidate;
};

// A judged candidate: its step time, and what found it.
struct RankedCandidate {
  Candidate candidate;
  double seconds = 0;
  std::string origin;  // "policy", "refinement", or a warm start's name
};

class ActionSpace {
 public:
  // `replica_counts`: the replica counts to search over (each >= 1 and <= num_devices; sorted and
  // made unique here; 1 is always included). `micro_batch_counts` likewise (each >= 1; 1 always
  // included): every M > 1 gives two one-replica shapes, GPipe and 1F1B. Every replicated
  // pipeline (R one of the replica counts, R > 1, M > 1) gives two more, and every tensor-parallel
  // shape one. Throws std::invalid_argument when one is out of range.
  ActionSpace(int num_devices, std::vector<int> replica_counts,
              std::vector<int> micro_batch_counts = {1},
              std::vector<ReplicatedPipeline> replicated_pipelines = {},
              std::vector<TensorParallelShape> tensor_parallel = {});

  // 1, 2, 4, ... up to `num_devices`, and `num_devices` itself (data parallelism over every
  // device), each no larger than `max_replicas` (the batch: every replica needs a row).
  static std::vector<int> DefaultReplicaCounts(int num_devices, int64_t max_replicas);
  // 1, 2, 4, ... up to `max_count` that divide `batch` and whose M copies of a training step of
  // `step_ops` ops stay within kMaxPipelineOps: each M is a step built and simulated in the
  // search's planning time (NMT with 8 layers, 52k ops, gets M <= 2: with M = 4 as well, its
  // 209k-op step overran the 60-s budget, bench/RESULTS.md). The search's max_count is
  // DefaultMaxMicroBatches.
  static constexpr int64_t kMaxPipelineOps = 120'000;
  static std::vector<int> DefaultMicroBatchCounts(int64_t batch, int64_t step_ops,
                                                  int max_count = 8);
  // 8, or the device count where it is larger: a pipeline over D stages idles (D - 1) / (M + D - 1)
  // of its step under GPipe, so a deep one wants M of about D (BERT-large on 2 x 8 GPUs: 16 stages
  // at M = 16 were 11% faster than the best 8-micro-batch answer, bench/RESULTS.md).
  static int DefaultMaxMicroBatches(int num_devices) { return std::max(8, num_devices); }
  // Every R of `pipeline_replica_counts` above 1 with every M > 1 of `micro_batch_counts` whose
  // R x M equal micro-batches split `batch`, whose R x M copies of the step stay within
  // kMaxPipelineOps and, given `num_devices`, with M at most DefaultMaxMicroBatches(num_devices /
  // R): each pipeline spans D / R devices and wants no more micro-batches than a one-replica
  // pipeline over that many (on 32 devices, R = 4 keeps M <= 8).
  static std::vector<ReplicatedPipeline> DefaultReplicatedPipelines(
      const std::vector<int>& pipeline_replica_counts, const std::vector<int>& micro_batch_counts,
      int64_t batch, int64_t step_ops, int num_devices = 0);
  // The replica counts whose replicas may be pipelines by default: those of `replica_counts`
  // from 2 up to half the devices (every pipeline has at least two stages).
  static std::vector<int> DefaultPipelineReplicaCounts(int num_devices,
                                                       const std::vector<int>& replica_counts);

  int num_devices() const { return num_devices_; }
  const std::vector<int>& replica_counts() const { return replica_counts_; }
  // The micro-batch counts of one replica.
  const std::vector<int>& micro_batch_counts() const { return micro_batch_counts_; }
  const std::vector<ReplicatedPipeline>& replicated_pipelines() const {
    return replicated_pipelines_;
  }
  const std::vector<TensorParallelShape>& tensor_parallel() const { return tensor_parallel_; }
  // Every replica count with M = 1, in order, then one replica with each M > 1 under GPipe and
  // under 1F1B, then each replicated pipeline under both, then each tensor-parallel shape.
  const std::vector<StepShape>& shapes() const { return shapes_; }
  bool has_pipelines() const {
    return micro_batch_counts_.size() > 1 || !replicated_pipelines_.empty();
  }
  // Whether the space has shapes beside its replica counts (pipelines or tensor-parallel ones).
  bool has_other_shapes() const { return shapes_.size() > replica_counts_.size(); }
  bool HasShape(const StepShape& shape) const;
  // The index into shapes() of a candidate's shape; throws std::invalid_argument naming it when
  // the space has no such shape.
  int ShapeIndex(const Candidate& candidate) const;
  // `candidate` with shape `shape`: a new replica count maps every option to its nearest allowed
  // one (Nearest).
  Candidate WithShape(Candidate candidate, const StepShape& shape) const;
  const std::vector<ParallelOption>& options() const { return options_; }
  int num_options() const { return static_cast<int>(options_.size()); }

  // Whether option `option` may be used with `replicas` replicas (its width divides R).
  bool Allowed(int option, int replicas) const {
    return replicas % options_[static_cast<size_t>(option)].width == 0;
  }
  // The device replica `replica` (0 <= replica < replicas) of a group with option `option` runs on.
  int DeviceOf(int option, int replica, int replicas) const;
  // DeviceOf for each of the `replicas` replicas, in order.
  std::vector<int> DevicesOf(int option, int replicas) const;

  // The option {device}.
  int SingleDeviceOption(int device) const;
  // The one-replica candidate that puts group g on device group_devices[g] (a baseline's answer).
  Candidate FromGroupDevices(const std::vector<int>& group_devices) const;
  // The widest option allowed with `replicas` replicas starting at device 0: data parallelism when
  // every group takes it.
  int SpreadOption(int replicas) const;
  // The allowed option for `replicas` closest to `option`: itself when allowed, otherwise the
  // widest allowed width not above its own, from the same first device.
  int Nearest(int option, int replicas) const;
  // `candidate` copied onto the idle devices: R' = `replicas` (a multiple of R) replicas, each
  // option widened by R'/R over the same first device, so that a model-parallel placement over
  // devices 0..k-1 becomes R'/R copies side by side, data parallel between them. None when an
  // option has no widened counterpart (it uses devices beyond the first D R / R'). A pipelined
  // candidate keeps its micro-batches and schedule: none when the space lacks that shape.
  std::optional<Candidate> ScaleOut(const Candidate& candidate, int replicas) const;
  // The allowed option for `replicas` that puts the most of the R replicas on the devices
  // `replica_devices` gives them (ties: the narrower option, then the lower index).
  int BestMatch(const std::vector<int>& replica_devices) const;

  // Checks that `candidate` fits this space and `groups` groups; throws std::invalid_argument
  // saying what does not.
  void Check(const Candidate& candidate, int groups) const;

  // "{cuda:0}", "{cuda:0,cuda:2,cuda:4,cuda:6}" with the given device names.
  std::string Describe(int option, const std::vector<std::string>& device_names) const;

 private:
  int num_devices_;
  std::vector<int> replica_counts_;
  std::vector<int> micro_batch_counts_;
  std::vector<ReplicatedPipeline> replicated_pipelines_;
  std::vector<TensorParallelShape> tensor_parallel_;
  std::vector<StepShape> shapes_;
  std::vector<ParallelOption> options_;
};

// "4 replicas (hybrid): 40 groups on {cuda:0,cuda:1,cuda:2,cuda:3}, 4 on {cuda:0}", the options
// by how many groups use them.
std::string Summarise(const ActionSpace& space, const Candidate& candidate,
                      const std::vector<std::string>& device_names);
// Data and model parallelism at once: several replicas, and groups that do not all share one
// option (plain data parallelism, over some of the devices, is not a hybrid).
bool IsHybrid(const Candidate& candidate);
// "2 replicas of 4 tensor-parallel shards": `copies` copies of each group split `ways` ways.
std::string DescribeTensorParallel(int copies, int ways);

// A short text key of a candidate ("R|" then one byte per group; "R/M/schedule|" with
// micro-batches, "R/M/schedule/tT|" with tensor ways), for caches and logs.
std::string KeyOf(const Candidate& candidate);
// A printable form of the key, for the search log: "2:0,0,5,5", "1/4/1f1b:0,0,5,5" with
// micro-batches, "4/1/gpipe/t2:0,8,8,8" with tensor ways; ParseCandidate reads them back (the
// first is what logs held before pipelines; throws std::invalid_argument naming the text when it
// is malformed).
std::string FormatCandidate(const Candidate& candidate);
Candidate ParseCandidate(const std::string& text);

}  // namespace placer::search
