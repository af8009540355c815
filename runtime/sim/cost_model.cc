#include "runtime/sim/cost_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "graph/autocast.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "runtime/sim/gemms.h"

namespace placer::sim {

using graph::Device;
using graph::DeviceType;

namespace {

// Placeto's simulator defaults (p2.8xlarge): 5.7 us after each op, 25 us per transfer.
constexpr double kPlacetoOpOverheadSeconds = 5.7e-6;
constexpr double kPlacetoTransferLatencySeconds = 25e-6;
// NCCL's ring step latencies (Ring algorithm, Simple protocol: hwLat in src/graph/tuning.cc).
constexpr double kNcclNvlinkStepSeconds = 3.4e-6;
constexpr double kNcclPcieStepSeconds = 5.7e-6;
constexpr double kNcclNetworkStepSeconds = 14e-6;
// grappler's CPU memory bandwidth when the device does not report one.
constexpr double kGrapplerCpuBandwidth = 32e9;

void CheckSpec(const std::string& device_name, const DeviceSpec& spec) {
  if (!(spec.peak_flops > 0) || !(spec.memory_bandwidth > 0) || !(spec.op_overhead_seconds >= 0) ||
      !std::isfinite(spec.peak_flops) || !std::isfinite(spec.memory_bandwidth) ||
      !std::isfinite(spec.op_overhead_seconds)) {
    throw std::invalid_argument(fmt::format(
        "device spec of '{}': peak_flops and memory_bandwidth must be positive and the overhead "
        "non-negative (got {}, {}, {})",
        device_name, spec.peak_flops, spec.memory_bandwidth, spec.op_overhead_seconds));
  }
  if (!(spec.matmul_flops >= 0) || !std::isfinite(spec.matmul_flops) ||
      !(spec.matmul_activation_byte_scale > 0) || !(spec.matmul_activation_byte_scale <= 1)) {
    throw std::invalid_argument(
        fmt::format("device spec of '{}': matmul_flops must be non-negative and finite and "
                    "matmul_activation_byte_scale in (0, 1] (got {}, {})",
                    device_name, spec.matmul_flops, spec.matmul_activation_byte_scale));
  }
  if (const std::optional<AchievedEfficiency>& a = spec.achieved) {
    auto fraction = [](double x) { return x > 0 && x <= 1; };
    auto seconds = [](double x) { return x >= 0 && std::isfinite(x); };
    if (!fraction(a->matmul_fraction) || !fraction(a->bandwidth_fraction) ||
        !seconds(a->matmul_fixed_seconds) || !seconds(a->memory_fixed_seconds) ||
        !seconds(a->issue_seconds) || a->streaming_multiprocessors < 0 ||
        !seconds(a->inner_fill_steps)) {
      throw std::invalid_argument(fmt::format(
          "device spec of '{}': achieved fractions must be in (0, 1] and its seconds "
          "and SMs and inner fill steps non-negative and finite (got fractions {}, {}; seconds "
          "{}, {}, {}; SMs {}, inner fill {})",
          device_name, a->matmul_fraction, a->bandwidth_fraction, a->matmul_fixed_seconds,
          a->memory_fixed_seconds, a->issue_seconds, a->streaming_multiprocessors,
          a->inner_fill_steps));
    }
  }
}

void CheckLink(const std::string& from, const std::string& to, const LinkSpec& link) {
  for (double value : {link.seconds_per_byte, link.latency_seconds, link.receive_seconds_per_byte,
                       link.collective_step_seconds}) {
    if (!(value >= 0) || !std::isfinite(value)) {
      throw std::invalid_argument(fmt::format(
          "link {}->{}: seconds_per_byte, latency_seconds, receive_seconds_per_byte and "
          "collective_step_seconds must be non-negative and finite (got {}, {}, {}, {})",
          from, to, link.seconds_per_byte, link.latency_seconds, link.receive_seconds_per_byte,
          link.collective_step_seconds));
    }
  }
}

bool IsCuda(const Device* device) { return device != nullptr && device->type == DeviceType::kCuda; }

void CheckContention(DeviceType type, const ContentionSpec& spec) {
  if (spec.devices < 2) {
    throw std::invalid_argument(
        fmt::format("contention of {} devices: 'devices' must be at least 2, got {}",
                    graph::DeviceTypeName(type), spec.devices));
  }
  if (!(spec.slowdown >= 1) || !std::isfinite(spec.slowdown)) {
    throw std::invalid_argument(fmt::format(
        "contention of {} devices: 'slowdown' must be finite and at least 1 (busy devices never "
        "run faster than one alone), got {}",
        graph::DeviceTypeName(type), spec.slowdown));
  }
}

}  // namespace

LinkSpec LinkPresets::Nvlink() {
  return {.seconds_per_byte = 1.0 / 450e9,
          .latency_seconds = kPlacetoTransferLatencySeconds,
          .collective_step_seconds = kNcclNvlinkStepSeconds};
}

LinkSpec LinkPresets::Pcie4() {
  return {.seconds_per_byte = 1.0 / 31.5e9,
          .latency_seconds = kPlacetoTransferLatencySeconds,
          .collective_step_seconds = kNcclPcieStepSeconds};
}

LinkSpec LinkPresets::SharedMemoryCpu() {
  return {.seconds_per_byte = 2.0 / kGrapplerCpuBandwidth,
          .latency_seconds = kPlacetoOpOverheadSeconds};
}

LinkSpec LinkPresets::Network(double gigabits_per_second, double latency_seconds) {
  return {.seconds_per_byte = 8.0 / (gigabits_per_second * 1e9),
          .latency_seconds = latency_seconds,
          .collective_step_seconds = kNcclNetworkStepSeconds};
}

DeviceSpec DevicePresets::CpuThread() {
  return {.peak_flops = 2 * 8 * 2 * 3e9,
          .memory_bandwidth = kGrapplerCpuBandwidth,
          .op_overhead_seconds = kPlacetoOpOverheadSeconds};
}

DeviceSpec DevicePresets::H200() {
  return {.peak_flops = 67e12,
          .memory_bandwidth = 4.8e12,
          .op_overhead_seconds = kPlacetoOpOverheadSeconds};
}

// ---- RooflineCostModel ----

RooflineCostModel::RooflineCostModel(RooflineOptions options) : options_(options) {
  CheckSpec("the default CPU thread", options_.cpu_thread);
  CheckSpec("the default GPU", options_.gpu);
  CheckLink("cpu", "cpu", options_.cpu_to_cpu);
  CheckLink("cpu", "gpu", options_.host_or_cpu_to_gpu);
  CheckLink("gpu", "gpu", options_.gpu_to_gpu);
  CheckLink("host", "host", options_.between_hosts);
  if (options_.gpus_per_host < 0) {
    throw std::invalid_argument(
        fmt::format("gpus_per_host must be >= 0, got {}", options_.gpus_per_host));
  }
  for (int host : options_.process_hosts) {
    if (host < 0) throw std::invalid_argument(fmt::format("process_hosts: host {} < 0", host));
  }
}

int RooflineCostModel::HostOf(const Device& device) const {
  if (const int process = graph::DeviceProcess(device.name); process >= 0) {
    if (options_.process_hosts.empty()) return process;
    if (process >= static_cast<int>(options_.process_hosts.size())) {
      throw std::invalid_argument(
          fmt::format("device '{}': simulation.process_hosts names the hosts of processes 0 to "
                      "{} only",
                      device.name, options_.process_hosts.size() - 1));
    }
    return options_.process_hosts[static_cast<size_t>(process)];
  }
  if (options_.gpus_per_host == 0 || device.type != DeviceType::kCuda) return 0;
  return device.index / options_.gpus_per_host;
}

void RooflineCostModel::SetDeviceSpec(const std::string& device_name, const DeviceSpec& spec) {
  CheckSpec(device_name, spec);
  device_specs_[device_name] = spec;
}

void RooflineCostModel::SetLink(const std::string& from, const std::string& to,
                                const LinkSpec& link) {
  CheckLink(from, to, link);
  links_[{from, to}] = link;
}

DeviceSpec RooflineCostModel::SpecOf(const Device& device) const {
  auto it = device_specs_.find(device.name);
  if (it != device_specs_.end()) return it->second;
  if (device.type == DeviceType::kCuda) return options_.gpu;
  DeviceSpec spec = options_.cpu_thread;
  spec.peak_flops *= std::max(1, device.threads);
  return spec;
}

LinkSpec RooflineCostModel::LinkOf(const Device* from, const Device& to) const {
  auto it = links_.find({from != nullptr ? from->name : std::string(kHostName), to.name});
  if (it != links_.end()) return it->second;
  if (from != nullptr && HostOf(*from) != HostOf(to)) return options_.between_hosts;
  if (IsCuda(from) && IsCuda(&to)) return options_.gpu_to_gpu;
  if (IsCuda(from) || IsCuda(&to)) return options_.host_or_cpu_to_gpu;
  return options_.cpu_to_cpu;
}

bool RunsOnTensorCores(const graph::Graph& graph, const graph::Op& op) {
  return graph::RunsInLowPrecision(graph, op);
}

namespace {

// Seconds of a matmul-class op's arithmetic at `flops_per_second` (the fraction applied), its
// FLOPs shared among its GEMMs as their 2 x batch x m x n x k, each at its shape's efficiency.
double ShapedComputeSeconds(const graph::Graph& graph, const graph::Op& op, double flops,
                            double flops_per_second, const AchievedEfficiency& achieved) {
  const std::vector<Gemm> gemms = GemmsOf(graph, op);
  double total = 0;
  for (const Gemm& g : gemms) total += g.batch * g.m * g.n * g.k;
  if (achieved.streaming_multiprocessors <= 0 || gemms.empty() || !(total > 0)) {
    return flops / flops_per_second;
  }
  double seconds = 0;
  for (const Gemm& g : gemms) {
    const double share = g.batch * g.m * g.n * g.k / total;
    if (!(share > 0)) continue;  // an empty GEMM (a zero-sized axis) does no work
    seconds += flops * share /
               (flops_per_second * GemmShapeEfficiency(g, achieved.streaming_multiprocessors,
                                                       achieved.inner_fill_steps));
  }
  return seconds;
}

}  // namespace

double RooflineCostModel::OpSeconds(const graph::Graph& graph, graph::OpId op,
                                    const Device& device) const {
  const graph::Op& node = graph.op(op);
  const DeviceSpec spec = SpecOf(device);
  const bool tensor_cores = spec.matmul_flops > 0 && RunsOnTensorCores(graph, node);
  double bytes = 0;
  if (tensor_cores && spec.matmul_activation_byte_scale != 1) {
    // Autocast: the op reads and writes its activations and gradients in 16 bits; the fp32
    // master weights it reads (and an update's parameter, never such an op) keep their size.
    auto weighed = [&](graph::TensorId id) {
      const graph::Tensor& tensor = graph.tensor(id);
      const bool low_precision =
          tensor.dtype == graph::DType::kFloat32 && tensor.kind != graph::TensorKind::kParameter;
      return static_cast<double>(tensor.bytes()) *
             (low_precision ? spec.matmul_activation_byte_scale : 1.0);
    };
    for (graph::TensorId output : node.outputs) bytes += weighed(output);
    for (graph::TensorId input : node.inputs) bytes += weighed(input);
  } else {
    bytes = static_cast<double>(graph::OpOutputBytes(graph, node));
    for (graph::TensorId input : node.inputs)
      bytes += static_cast<double>(graph.tensor(input).bytes());
  }
  const double flops = graph::OpFlops(graph, node);
  if (spec.achieved) {
    const AchievedEfficiency& achieved = *spec.achieved;
    const double memory = bytes / (spec.memory_bandwidth * achieved.bandwidth_fraction);
    const double kernel =
        tensor_cores
            ? std::max(ShapedComputeSeconds(graph, node, flops,
                                            spec.matmul_flops * achieved.matmul_fraction, achieved),
                       memory) +
                  achieved.matmul_fixed_seconds
            : std::max(flops / spec.peak_flops, memory) + achieved.memory_fixed_seconds;
    return std::max(achieved.issue_seconds, kernel);
  }
  const double compute = flops / (tensor_cores ? spec.matmul_flops : spec.peak_flops);
  const double memory = bytes / spec.memory_bandwidth;
  const double roofline =
      options_.overlap_compute_and_memory ? std::max(compute, memory) : compute + memory;
  return roofline + spec.op_overhead_seconds;
}

double RooflineCostModel::TransferSeconds(int64_t bytes, const Device* from,
                                          const Device& to) const {
  // CPU workers read the minibatch where it lies; only a GPU copies it in.
  if (from == nullptr && to.type == DeviceType::kCpu) return 0;
  return LinkOf(from, to).Seconds(bytes);
}

double RooflineCostModel::ActivationByteScale() const {
  return options_.gpu.matmul_activation_byte_scale;
}

double RooflineCostModel::CollectiveHopSeconds(int64_t bytes, const Device& from,
                                               const Device& to) const {
  return LinkOf(&from, to).CollectiveHopSeconds(bytes);
}

double RooflineCostModel::ReceiveSecondsPerByte(const Device& from, const Device& to) const {
  return LinkOf(&from, to).receive_seconds_per_byte;
}

// ---- link fitting ----

LinkSpec FitLinkSpec(const std::vector<TransferSample>& samples) {
  std::set<int64_t> sizes;
  for (const TransferSample& s : samples) sizes.insert(s.bytes);
  if (sizes.size() < 2) {
    throw std::invalid_argument(fmt::format(
        "fitting a link needs transfers of at least two sizes, got {} sample(s) of {} size(s)",
        samples.size(), sizes.size()));
  }
  const double n = static_cast<double>(samples.size());
  double mean_x = 0, mean_y = 0;
  for (const TransferSample& s : samples) {
    mean_x += static_cast<double>(s.bytes) / n;
    mean_y += s.seconds / n;
  }
  double sxx = 0, sxy = 0, sx2 = 0, sx_y = 0;
  for (const TransferSample& s : samples) {
    const double x = static_cast<double>(s.bytes);
    sxx += (x - mean_x) * (x - mean_x);
    sxy += (x - mean_x) * (s.seconds - mean_y);
    sx2 += x * x;
    sx_y += x * s.seconds;
  }
  LinkSpec link{.seconds_per_byte = sxy / sxx, .latency_seconds = mean_y - sxy / sxx * mean_x};
  if (link.seconds_per_byte < 0) {
    // Time does not grow with size (noise dominates): a constant is the honest fit.
    return {.seconds_per_byte = 0, .latency_seconds = std::max(0.0, mean_y)};
  }
  if (link.latency_seconds < 0) {
    return {.seconds_per_byte = std::max(0.0, sx_y / sx2), .latency_seconds = 0};
  }
  return link;
}

// ---- ProfiledCostModel ----

ProfiledCostModel::ProfiledCostModel(RooflineCostModel fallback) : fallback_(std::move(fallback)) {}

void ProfiledCostModel::SetOpSeconds(const std::string& op_name, const std::string& device_name,
                                     double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    throw std::invalid_argument(
        fmt::format("op '{}' on {}: the time must be non-negative and "
                    "finite, got {}",
                    op_name, device_name, seconds));
  }
  op_seconds_[{op_name, device_name}] = seconds;
}

std::optional<double> ProfiledCostModel::FindOpSeconds(const std::string& op_name,
                                                       const std::string& device_name) const {
  auto it = op_seconds_.find({op_name, device_name});
  if (it == op_seconds_.end()) return std::nullopt;
  return it->second;
}

void ProfiledCostModel::SetLink(const std::string& from, const std::string& to,
                                const LinkSpec& link) {
  CheckLink(from, to, link);
  links_[{from, to}] = link;
}

std::optional<LinkSpec> ProfiledCostModel::FindLink(const std::string& from,
                                                    const std::string& to) const {
  auto it = links_.find({from, to});
  if (it == links_.end()) return std::nullopt;
  return it->second;
}

void ProfiledCostModel::SetContention(DeviceType type, const ContentionSpec& spec) {
  CheckContention(type, spec);
  contention_[type] = spec;
}

std::optional<ContentionSpec> ProfiledCostModel::FindContention(DeviceType type) const {
  auto it = contention_.find(type);
  if (it == contention_.end()) return std::nullopt;
  return it->second;
}

double ProfiledCostModel::ContentionFactor(const Device& device, int busy) const {
  auto it = contention_.find(device.type);
  return it == contention_.end() ? 1 : it->second.Factor(busy);
}

double ProfiledCostModel::OpSeconds(const graph::Graph& graph, graph::OpId op,
                                    const Device& device) const {
  if (auto measured = FindOpSeconds(graph.op(op).name, device.name)) return *measured;
  return fallback_.OpSeconds(graph, op, device);
}

double ProfiledCostModel::TransferSeconds(int64_t bytes, const Device* from,
                                          const Device& to) const {
  if (from == nullptr && to.type == DeviceType::kCpu) return 0;
  if (auto link = FindLink(from != nullptr ? from->name : std::string(kHostName), to.name)) {
    return link->Seconds(bytes);
  }
  return fallback_.TransferSeconds(bytes, from, to);
}

double ProfiledCostModel::CollectiveHopSeconds(int64_t bytes, const Device& from,
                                               const Device& to) const {
  // A profiled link was timed on copies: its hops cost what its copies do.
  if (auto link = FindLink(from.name, to.name)) return link->CollectiveHopSeconds(bytes);
  return fallback_.CollectiveHopSeconds(bytes, from, to);
}

double ProfiledCostModel::ReceiveSecondsPerByte(const Device& from, const Device& to) const {
  if (auto link = FindLink(from.name, to.name)) return link->receive_seconds_per_byte;
  return fallback_.ReceiveSecondsPerByte(from, to);
}

// ---- collectives ----

double RingAllReduceSeconds(int64_t bytes, int devices, const LinkSpec& link) {
  if (devices <= 1) return 0;
  const double n = devices;
  return 2.0 * (n - 1) / n * static_cast<double>(bytes) * link.seconds_per_byte +
         2.0 * (n - 1) * link.latency_seconds;
}

double TypicalSecondsPerByte(const CostModel& costs, const graph::DeviceSet& devices) {
  if (devices.size() < 2) return 0;
  constexpr int64_t kBytes = 64 << 20;
  return costs.TransferSeconds(kBytes, &devices[0], devices[1]) / static_cast<double>(kBytes);
}

double TypicalSecondsPerCopy(const CostModel& costs, const graph::DeviceSet& devices) {
  if (devices.size() < 2) return 0;
  return costs.TransferSeconds(0, &devices[0], devices[1]);
}

GroupPhaseSeconds PhaseSecondsPerGroup(const CostModel& costs, const graph::Graph& graph,
                                       const std::vector<int>& group_of_op, int groups,
                                       const graph::DeviceSet& devices) {
  GroupPhaseSeconds out{std::vector<double>(static_cast<size_t>(groups), 0),
                        std::vector<double>(static_cast<size_t>(groups), 0)};
  if (devices.empty()) return out;
  for (graph::OpId id = 0; id < graph.num_ops(); ++id) {
    const graph::Op& op = graph.op(id);
    const graph::OpId anchor = op.phase == graph::Phase::kForward ? id : op.forward_op;
    if (anchor < 0 || static_cast<size_t>(anchor) >= group_of_op.size()) continue;
    const int g = group_of_op[static_cast<size_t>(anchor)];
    if (g < 0 || g >= groups) continue;
    (op.phase == graph::Phase::kForward ? out.forward : out.backward)[static_cast<size_t>(g)] +=
        costs.OpSeconds(graph, id, devices[0]);
  }
  return out;
}

double TypicalSecondsPerOp(const CostModel& costs, const graph::Graph& graph,
                           const graph::DeviceSet& devices) {
  if (devices.empty()) return 0;
  std::vector<double> seconds;
  for (graph::OpId op = 0; op < graph.num_ops(); ++op) {
    if (graph.op(op).phase == graph::Phase::kForward) {
      seconds.push_back(costs.OpSeconds(graph, op, devices[0]));
    }
  }
  if (seconds.empty()) return 0;
  const auto tenth = seconds.begin() + static_cast<std::ptrdiff_t>(seconds.size() / 10);
  std::nth_element(seconds.begin(), tenth, seconds.end());
  return *tenth;
}

}  // namespace placer::sim
