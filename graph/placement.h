// A placement: which device runs each forward op. Backward and update ops follow their forward op,
// so a placement of the forward ops determines where every op of the training step runs.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

// How the micro-batches of a pipelined step are ordered on each device (graph/pipeline.h):
// GPipe runs every forward, then every backward; 1F1B (PipeDream-flush) admits at most
// (stages - stage) micro-batches before their backward, alternating forward and backward.
enum class PipelineSchedule { kGPipe, kOneFOneB };

struct Placement {
  std::vector<std::string> devices;  // device names, e.g. {"cpu:0", "cpu:1"}
  std::vector<int> device_of_op;     // per op id of the graph; -1 for non-forward ops
  // Micro-batches per step (graph/micro_batches.h builds the graph that runs them): above 1, the
  // graph must be micro-batched with that count and ops run in `schedule`'s order.
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::kGPipe;

  // Every forward op on device `device`.
  static Placement AllOn(const Graph& graph, std::vector<std::string> devices, int device);
  bool operator==(const Placement&) const = default;
};

// Device index of every op of the training step: forward ops as placed, backward and update ops
// with the forward op they belong with. Throws GraphError naming an unplaced forward op or an
// out-of-range device.
std::vector<int> ExpandPlacement(const Graph& graph, const Placement& placement);

// Where each tensor's value starts its life, given every op's device (`op_device`, as
// ExpandPlacement returns): its producer's device, a parameter's owner's (OwnerOf: it lives and is
// updated there), or kHostDevice for the minibatch (and a tensor nothing produces), which is read
// from host memory. The executor moves, and the simulator charges, every transfer from this one
// plan: a consumer on another device than the home receives a copy.
inline constexpr int kHostDevice = -1;
std::vector<int> HomeDevices(const Graph& graph, const std::vector<int>& op_device);

// Placement files are YAML:
//   devices: [cpu:0, cpu:1]     # optional; defaults to the devices given to the reader
//   replicas: 2                 # optional; the model's replica count (ReadPlacementReplicas)
//   micro_batches: 4            # optional; the step's micro-batch count M (ReadPlacementPipeline):
//   schedule: 1f1b              #   above 1, op names are "m<k>/<op>"; schedule gpipe (default)
//   default: cpu:0              # optional; for ops not listed
//   placement: {conv1: cpu:0, conv2: cpu:1, ...}   # forward op name -> device
//   rules:                      # optional; op name glob patterns, in order
//     - {match: "enc/l0/*", device: 0}
// A device may also be given by its position in the device list (0, 1, ...). A forward op goes to
// the device `placement` names for it, else to the first rule whose pattern matches its name
// (fnmatch(3) without flags: '*' also matches '/'), else to `default`. A rule that places no op
// is an error (a typo, or a rule written for another model size).
//
// A file may instead hold variants, the first whose conditions hold being the placement:
//   variants:
//     - when: {devices: 4, layers: 8}
//       default: 0
//       rules: [...]
// `devices` is the number of devices; other conditions are `facts` the caller knows about the
// model (cli: the size keys of the model section, e.g. layers), compared as text. A condition the
// caller does not know is an error, and so is a file where no variant holds.
//
// Reading checks every op name, rule and device and names the file, key and line on error
// (PlacementError). Writing is atomic (temporary file, then rename).
class PlacementError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
Placement ReadPlacementYaml(const std::filesystem::path& file, const Graph& graph,
                            const std::vector<std::string>& devices,
                            const std::map<std::string, std::string>& facts = {});
// The replica count a placement file is for (`replicas: R`, for a model replicated R times whose
// ops are named "r<replica>/<op>"; 1 when absent), so that the caller can build that model before
// reading the placement. Throws PlacementError naming the file and line.
int ReadPlacementReplicas(const std::filesystem::path& file);
// The micro-batch count and schedule a placement file is for (`micro_batches: M`, `schedule:
// gpipe|1f1b`; M = 1 and GPipe when absent), so that the caller can build the micro-batched step
// (graph/micro_batches.h) before reading the placement, whose op names are then "m<k>/<op>".
// Throws PlacementError naming the file, key and line for a count below 1 or an unknown schedule.
struct PipelineSettings {
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::kGPipe;
};
PipelineSettings ReadPlacementPipeline(const std::filesystem::path& file);
// The tensor-parallel shards per replica a placement file is for (`tensor_ways: T`, a step whose
// replicas are split T ways Megatron's way, ops "r<r>/tp<s>/<op>": placer/baselines/megatron.h);
// 1 when absent. Throws PlacementError naming the file and line for a count below 1.
int ReadPlacementTensorWays(const std::filesystem::path& file);
// `replicas` > 1 is written as the file's `replicas` key, `tensor_ways` > 1 as `tensor_ways`; the
// placement's micro_batches > 1 as `micro_batches` and `schedule`.
std::string PlacementToYaml(const Graph& graph, const Placement& placement, int replicas = 1,
                            int tensor_ways = 1);
void WritePlacementYaml(const std::filesystem::path& file, const Graph& graph,
                        const Placement& placement, int replicas = 1);

// Writes `contents` to `file` atomically: a reader sees the old file or the new one, never a part.
void WriteFileAtomically(const std::filesystem::path& file, const std::string& contents);

}  // namespace placer::graph
