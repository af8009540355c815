// Cost models for the simulator: how long an op takes on a device, and how long a tensor takes to
// cross from one device (or host memory) to another. Torch-free: the analytic model needs only
// the graph's FLOP and byte counts, and the profiled model only numbers someone measured.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "graph/device.h"
#include "graph/ir.h"

namespace placer::sim {

// The name that stands for host memory (where the minibatch lives) as the source of a transfer,
// as in the executor's "host->cuda:0" trace lane.
inline constexpr char kHostName[] = "host";

class CostModel {
 public:
  virtual ~CostModel() = default;

  // Seconds one execution of op `op` of `graph` takes on `device`.
  virtual double OpSeconds(const graph::Graph& graph, graph::OpId op,
                           const graph::Device& device) const = 0;

  // Seconds to make `bytes` read on `from` available on `to`. `from` is nullptr for host memory,
  // the minibatch's home: a CPU worker reads it in place (0 seconds), a GPU copies it in.
  virtual double TransferSeconds(int64_t bytes, const graph::Device* from,
                                 const graph::Device& to) const = 0;

  // Seconds one hop of a ring collective moves `bytes` from `from` to `to` in: a collective
  // library's step inside one running kernel, not a copy the host issues and an event waits on
  // (graph::kCollectiveHop marks the ops whose inputs from other devices are such hops). The
  // copy's time where a model knows no better.
  virtual double CollectiveHopSeconds(int64_t bytes, const graph::Device& from,
                                      const graph::Device& to) const {
    return TransferSeconds(bytes, &from, to);
  }

  // The size, relative to fp32, of the values automatic mixed precision keeps in 16 bits
  // (graph::AutocastHalfWidth): 0.5 under bf16 and fp16, 1 otherwise. The simulator stores and
  // moves those values at this size.
  virtual double ActivationByteScale() const { return 1; }

  // Seconds an op on `to` takes beyond its own time per byte of an input that crossed from `from`
  // (a device; never host memory): see LinkSpec::receive_seconds_per_byte.
  virtual double ReceiveSecondsPerByte(const graph::Device& /*from*/,
                                       const graph::Device& /*to*/) const {
    return 0;
  }

  // How many times longer anything `device` does (an op, a copy it issues) takes while `busy`
  // devices of its kind on the host, itself included, are working at once, than alone (see
  // ContentionSpec); 1 for busy <= 1. The profiled op and copy times are times alone.
  virtual double ContentionFactor(const graph::Device& /*device*/, int /*busy*/) const { return 1; }
};

// A typical link's seconds per byte: a 64 MiB copy between the first two devices (0 with one
// device). What the search's edit features price traffic at (placer/edit_features.h).
double TypicalSecondsPerByte(const CostModel& costs, const graph::DeviceSet& devices);
// A typical copy's fixed cost: an empty copy between the first two devices (0 with one device).
double TypicalSecondsPerCopy(const CostModel& costs, const graph::DeviceSet& devices);
// A typical op launch's fixed cost on the first device: the tenth percentile of `graph`'s
// forward ops' times there (the small ops, whose time is their overhead; not the minimum, which
// a view that costs nothing would give).
double TypicalSecondsPerOp(const CostModel& costs, const graph::Graph& graph,
                           const graph::DeviceSet& devices);
// Per group (`group_of_op` of `graph`'s forward ops, `groups` of them), the seconds its forward
// ops and, apart, its backward and update ops (those of its forward ops) take on the first device.
struct GroupPhaseSeconds {
  std::vector<double> forward, backward;
};
GroupPhaseSeconds PhaseSecondsPerGroup(const CostModel& costs, const graph::Graph& graph,
                                       const std::vector<int>& group_of_op, int groups,
                                       const graph::DeviceSet& devices);

// Devices of one kind on one host share what lies beyond their own cores or SMs: CPU workers
// share caches, memory bandwidth and possibly physical cores (two vCPUs may be hyper-threads of
// one), GPUs share PCIe root complexes and host memory. So an op runs slower while other devices
// of its kind are busy than alone, which is how the profiler times it. `slowdown` is measured
// with `devices` devices of the kind all busy: time then over time alone. In between, the
// slowdown grows linearly with the busy devices (1 alone); beyond, it stays at the measured one.
struct ContentionSpec {
  int devices = 2;      // how many devices of the kind were busy at once (>= 2)
  double slowdown = 1;  // >= 1

  double Factor(int busy) const {
    if (busy <= 1) return 1;
    if (busy >= devices) return slowdown;
    return 1 + (slowdown - 1) * static_cast<double>(busy - 1) / static_cast<double>(devices - 1);
  }
  bool operator==(const ContentionSpec&) const = default;
};

// What a GPU's kernels reach of its data-sheet peaks (simulation.gpu_efficiency: achieved),
// fitted to kernels measured on the GPU (runtime/sim/gpu_kinds.cc says where and how). An op of
// the matmul class (RunsOnTensorCores) takes max(FLOP / (its peak x matmul_fraction), bytes /
// (bandwidth x bandwidth_fraction)) + matmul_fixed_seconds; any other op max(FLOP / peak_flops,
// bytes / (bandwidth x bandwidth_fraction)) + memory_fixed_seconds; and no op less than
// issue_seconds, the host's time to issue one (below it the GPU waits for the host).
//
// With streaming_multiprocessors > 0 a matmul-class op's FLOP rate also takes what its GEMMs lose
// to their shape (GemmShapeEfficiency, gemms.h): 128 x 128 output tiles over that many SMs in whole
// waves, and an inner dimension k worth k / (k + inner_fill_steps).
struct AchievedEfficiency {
  double matmul_fraction = 1;
  double matmul_fixed_seconds = 0;  // a matmul-class kernel's launch, fill and drain
  int streaming_multiprocessors = 0;
  double inner_fill_steps = 0;
  double bandwidth_fraction = 1;
  double memory_fixed_seconds = 0;
  double issue_seconds = 0;
  bool operator==(const AchievedEfficiency&) const = default;
};

// Throughput of one device for the roofline estimate.
struct DeviceSpec {
  double peak_flops = 0;           // FLOP/s
  double memory_bandwidth = 0;     // bytes/s between the compute units and their memory
  double op_overhead_seconds = 0;  // per op: dispatch, kernel launch, the worker's queue hand-off
  // FLOP/s of the matmul- and convolution-class ops (RunsOnTensorCores): a GPU's tensor-core peak
  // at the training precision; 0: peak_flops, as every op of a CPU or an fp32 GPU.
  double matmul_flops = 0;
  // What those ops' activations and gradients (every float tensor they read or write but the
  // parameters) weigh per fp32 byte: 0.5 under bf16 or fp16 autocast, 1 otherwise.
  double matmul_activation_byte_scale = 1;
  // Set: the op's time is what the kernels reach (AchievedEfficiency), op_overhead_seconds unused;
  // unset: every op at the peaks, plus op_overhead_seconds.
  std::optional<AchievedEfficiency> achieved;
};

// Whether `op` is of the matmul or convolution class that tensor cores run (Conv2d,
// ConvTranspose2d, Linear, MatMul, Einsum, the recurrent cells), or the backward op of one.
bool RunsOnTensorCores(const graph::Graph& graph, const graph::Op& op);

// A link costs latency_seconds + bytes * seconds_per_byte (Baechi's a*bytes + b). One link per
// ordered device pair: the two directions are separate channels.
struct LinkSpec {
  double seconds_per_byte = 0;
  double latency_seconds = 0;
  // What the copy's time leaves out: an op reading a tensor that crossed this link runs slower,
  // per byte of it, than the same op reading its own device's output (measured between CPU
  // workers: the data sits in the other core's caches, its pages were allocated by another
  // thread). Charged to every op that reads such an input; 0 where nobody profiled it.
  double receive_seconds_per_byte = 0;
  // The latency of one step of a ring collective over this link (0: latency_seconds): NCCL's
  // own model of a ring step, hwLat of the Ring algorithm under the Simple protocol in NCCL's
  // src/graph/tuning.cc (NVLink 3.4 us, PCIe 5.7 us, network 14 us); its once-per-collective
  // baseLat (8.4 us) is left out.
  double collective_step_seconds = 0;

  double Seconds(int64_t bytes) const {
    return latency_seconds + static_cast<double>(bytes) * seconds_per_byte;
  }
  double CollectiveHopSeconds(int64_t bytes) const {
    return (collective_step_seconds > 0 ? collective_step_seconds : latency_seconds) +
           static_cast<double>(bytes) * seconds_per_byte;
  }
  bool operator==(const LinkSpec&) const = default;
};

// Link numbers from data sheets. Bandwidths are peaks per direction; latencies are software costs
// (issuing the copy, the event the consumer waits on), which do not depend on the wire.
struct LinkPresets {
  // NVLink 4 between H100/H200 GPUs: 900 GB/s bidirectional, 450 GB/s per direction (NVIDIA H100
  // and H200 data sheets). Latency: Placeto's profiled 25 us per transfer (its simulator's
  // defaults, TensorFlow on p2.8xlarge), kept until a profile replaces it.
  static LinkSpec Nvlink();
  // PCIe 4.0 x16: 16 GT/s x 16 lanes x 128/130 encoding = 31.5 GB/s per direction; the same 25 us.
  static LinkSpec Pcie4();
  // A clone between two CPU workers of one process: the copy reads and writes every byte, so it
  // moves at half of the 32 GB/s memory bandwidth grappler assumes for a CPU; its latency is one
  // ATen op's dispatch, Placeto's 5.7 us per op.
  static LinkSpec SharedMemoryCpu();
  // A network between hosts (InfiniBand or RoCE NICs, GPUDirect RDMA) of `gigabits_per_second`
  // per direction, with `latency_seconds` per transfer (the intra-host 25 us of software plus the
  // wire and switch).
  static LinkSpec Network(double gigabits_per_second, double latency_seconds);
};

// Device defaults, for devices without a spec of their own.
struct DevicePresets {
  // One CPU thread: an AVX2 core with two FMA units at 3 GHz peaks at 2 x 8 lanes x 2 FLOP x 3e9
  // = 96 GFLOP/s. Memory bandwidth: grappler's CPU default, 32 GB/s; it is a socket-wide
  // resource, so a worker's share does not grow with its threads. Overhead: Placeto's 5.7 us per
  // op.
  static DeviceSpec CpuThread();
  // An NVIDIA H200 SXM (the GPUs this project targets): 67 TFLOP/s FP32 without tensor cores,
  // 4.8 TB/s HBM3e (NVIDIA H200 data sheet); overhead: Placeto's 5.7 us per op.
  static DeviceSpec H200();
};

struct RooflineOptions {
  // false: compute time + memory time (grappler's default, compute_memory_overlap_ = false);
  // true: the larger of the two, for kernels that overlap them perfectly.
  bool overlap_compute_and_memory = false;
  // A CPU worker with n intra-op threads gets n times this peak_flops.
  DeviceSpec cpu_thread = DevicePresets::CpuThread();
  DeviceSpec gpu = DevicePresets::H200();
  // Default links by the kinds of their ends; SetLink overrides one ordered pair.
  LinkSpec cpu_to_cpu = LinkPresets::SharedMemoryCpu();
  LinkSpec host_or_cpu_to_gpu = LinkPresets::Pcie4();  // and GPU to a CPU worker
  LinkSpec gpu_to_gpu = LinkPresets::Pcie4();          // Nvlink() where the GPUs have it
  // Hosts: GPU cuda:i lives on host i / gpus_per_host, every CPU worker on host 0; 0 puts every
  // device on one host. A copy between devices of two hosts takes `between_hosts`, one link per
  // ordered device pair as within a host (a NIC per GPU, as in 8-GPU H100/H200 servers; a NIC
  // shared by several GPUs is not modelled). The minibatch is read on each GPU's own host.
  int gpus_per_host = 0;
  LinkSpec between_hosts = LinkPresets::Network(400, 30e-6);
  // The devices of a placement across processes ("w<k>/cpu:0", "w<k>/cuda:1") are on the host of
  // process k: process_hosts[k], or host k when the list is empty (one process per host, as
  // torchrun starts them); gpus_per_host does not apply to them.
  std::vector<int> process_hosts;
};

// The analytic model: op time = FLOPs / peak_flops (+ or max) bytes read and written /
// memory_bandwidth, plus the per-op overhead, or, for a device with DeviceSpec::achieved, what its
// kernels reach; transfers by the link of the ordered pair.
class RooflineCostModel : public CostModel {
 public:
  explicit RooflineCostModel(RooflineOptions options = {});

  // Overrides the spec of the device named `device_name` (taken as it is: no thread scaling).
  void SetDeviceSpec(const std::string& device_name, const DeviceSpec& spec);
  // Overrides the link from `from` (a device name or kHostName) to `to`.
  void SetLink(const std::string& from, const std::string& to, const LinkSpec& link);

  DeviceSpec SpecOf(const graph::Device& device) const;
  // The host of a device (see RooflineOptions::gpus_per_host and process_hosts). Throws
  // std::invalid_argument for a process that process_hosts does not list.
  int HostOf(const graph::Device& device) const;
  LinkSpec LinkOf(const graph::Device* from, const graph::Device& to) const;
  const RooflineOptions& options() const { return options_; }

  double OpSeconds(const graph::Graph& graph, graph::OpId op,
                   const graph::Device& device) const override;
  double TransferSeconds(int64_t bytes, const graph::Device* from,
                         const graph::Device& to) const override;
  double CollectiveHopSeconds(int64_t bytes, const graph::Device& from,
                              const graph::Device& to) const override;
  // The GPUs' (one precision per simulation): options().gpu's matmul_activation_byte_scale.
  double ActivationByteScale() const override;
  double ReceiveSecondsPerByte(const graph::Device& from, const graph::Device& to) const override;

 private:
  RooflineOptions options_;
  std::map<std::string, DeviceSpec> device_specs_;
  std::map<std::pair<std::string, std::string>, LinkSpec> links_;
};

// One measured transfer, for fitting a link.
struct TransferSample {
  int64_t bytes = 0;
  double seconds = 0;
};

// Least-squares fit of seconds = latency + bytes * seconds_per_byte. A negative intercept is
// refitted through the origin and a negative slope replaced by a constant (the mean), so the
// result is never negative. Throws std::invalid_argument unless the samples hold at least two
// distinct sizes.
LinkSpec FitLinkSpec(const std::vector<TransferSample>& samples);

// Raised for an unreadable or malformed profile; the message starts with the file's name.
class ProfileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Where the numbers of a profile come from.
struct ProfileMetadata {
  struct ProfiledDevice {
    std::string name;  // "cpu:0", "cuda:0"
    std::string type;  // the hardware, e.g. "NVIDIA H200" or "cpu, 1 thread"
    bool operator==(const ProfiledDevice&) const = default;
  };
  std::string model;             // the profiled network, e.g. "lenet"
  std::string libtorch_version;  // e.g. "2.11.0"
  std::string date;              // when it was measured, ISO 8601
  std::vector<ProfiledDevice> devices;
  bool operator==(const ProfileMetadata&) const = default;
};

// Measured per-op seconds keyed by (op name, device name), fitted links keyed by (from, to) and
// the contention of each device kind; anything missing falls back to a roofline model (which has
// no contention). The profiler fills it; the JSON file is
//   {"version": 1, "model": ..., "libtorch_version": ..., "date": ...,
//    "devices": [{"name": "cuda:0", "type": "NVIDIA H200"}, ...],
//    "ops": [{"op": "conv1", "device": "cuda:0", "seconds": 1.2e-5}, ...],
//    "links": [{"from": "host", "to": "cuda:0", "seconds_per_byte": ..., "latency_seconds": ...,
//               "receive_seconds_per_byte": ...}],  (the last one optional, 0 when absent)
//    "contention": [{"device_type": "cpu", "devices": 2, "slowdown": 1.3}]}  (optional)
class ProfiledCostModel : public CostModel {
 public:
  static constexpr int kFormatVersion = 1;

  explicit ProfiledCostModel(RooflineCostModel fallback = RooflineCostModel());

  ProfileMetadata& metadata() { return metadata_; }
  const ProfileMetadata& metadata() const { return metadata_; }

  // Records the measured time of op `op_name` on `device_name`; replaces an earlier entry.
  // Throws std::invalid_argument for a negative or non-finite time.
  void SetOpSeconds(const std::string& op_name, const std::string& device_name, double seconds);
  std::optional<double> FindOpSeconds(const std::string& op_name,
                                      const std::string& device_name) const;
  size_t num_op_entries() const { return op_seconds_.size(); }
  // Records the fitted link from `from` (a device name or kHostName) to `to`.
  void SetLink(const std::string& from, const std::string& to, const LinkSpec& link);
  std::optional<LinkSpec> FindLink(const std::string& from, const std::string& to) const;
  // Records the contention among devices of `type`. Throws std::invalid_argument unless
  // spec.devices >= 2 and spec.slowdown is finite and >= 1.
  void SetContention(graph::DeviceType type, const ContentionSpec& spec);
  std::optional<ContentionSpec> FindContention(graph::DeviceType type) const;
  void ClearContention() { contention_.clear(); }
  const RooflineCostModel& fallback() const { return fallback_; }

  double OpSeconds(const graph::Graph& graph, graph::OpId op,
                   const graph::Device& device) const override;
  double TransferSeconds(int64_t bytes, const graph::Device* from,
                         const graph::Device& to) const override;
  double CollectiveHopSeconds(int64_t bytes, const graph::Device& from,
                              const graph::Device& to) const override;
  double ActivationByteScale() const override { return fallback_.ActivationByteScale(); }
  double ReceiveSecondsPerByte(const graph::Device& from, const graph::Device& to) const override;
  double ContentionFactor(const graph::Device& device, int busy) const override;

  // JSON text of the profile; `source` names the text in errors (a file name).
  std::string ToJson() const;
  static ProfiledCostModel FromJson(const std::string& text, const std::string& source,
                                    RooflineCostModel fallback = RooflineCostModel());
  // Writes atomically. Throws ProfileError naming the file when it cannot.
  void Save(const std::filesystem::path& file) const;
  // Throws ProfileError naming the file: unreadable, malformed JSON, a missing or mistyped field.
  static ProfiledCostModel Load(const std::filesystem::path& file,
                                RooflineCostModel fallback = RooflineCostModel());

 private:
  RooflineCostModel fallback_;
  ProfileMetadata metadata_;
  std::map<std::pair<std::string, std::string>, double> op_seconds_;
  std::map<std::pair<std::string, std::string>, LinkSpec> links_;
  std::map<graph::DeviceType, ContentionSpec> contention_;
};

// Seconds of a ring all-reduce of `bytes` over `devices` devices whose every hop is `link`:
// 2(n-1)/n * bytes * seconds_per_byte + 2(n-1) * latency (reduce-scatter, then all-gather, each
// n-1 steps of bytes/n per device). 0 for one device.
double RingAllReduceSeconds(int64_t bytes, int devices, const LinkSpec& link);

}  // namespace placer::sim
