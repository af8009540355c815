#include "runtime/profiler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#ifdef PLACER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <cuda_runtime_api.h>
#endif

#include "graph/placement.h"
#include "graph/training_step.h"
#include "runtime/executor.h"

namespace placer::runtime {
namespace {

using Clock = std::chrono::steady_clock;

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void Synchronize([[maybe_unused]] const Device& device) {
#ifdef PLACER_WITH_CUDA
  if (device.type == DeviceType::kCuda) c10::cuda::device_synchronize();
#endif
}

std::string HardwareName(const Device& device) {
#ifdef PLACER_WITH_CUDA
  if (device.type == DeviceType::kCuda) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device.index) == cudaSuccess) return properties.name;
  }
#endif
  return fmt::format("cpu, {} thread{}", device.threads, device.threads == 1 ? "" : "s");
}

// Median seconds to make a tensor of `bytes` on `from` (nullptr: host memory) available on `to`,
// the way the executor does it: a clone between CPU workers, a copy otherwise.
double CopySeconds(int64_t bytes, const Device* from, const Device& to) {
  at::Tensor source = at::randn(
      {bytes / 4},
      at::TensorOptions(at::kFloat).device(from ? TorchDevice(*from) : at::Device(at::kCPU)));
  if (from == nullptr && to.type == DeviceType::kCuda) source = source.pin_memory();
  std::vector<double> times;
  // On a thread with the sending worker's thread budget, as the executor's copies run.
  std::thread worker([&] {
    at::init_num_threads();
    at::set_num_threads(from != nullptr && from->type == DeviceType::kCpu ? from->threads : 1);
    for (int repeat = 0; repeat < 12; ++repeat) {
      auto begin = Clock::now();
      at::Tensor copy =
          to.type == DeviceType::kCpu && (from == nullptr || from->type == DeviceType::kCpu)
              ? source.clone()
              : source.to(TorchDevice(to), /*non_blocking=*/false, /*copy=*/true);
      Synchronize(to);
      if (from) Synchronize(*from);
      if (repeat >= 3) times.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
    }
  });
  worker.join();
  return Median(times);
}

sim::LinkSpec FitLink(const Device* from, const Device& to) {
  std::vector<sim::TransferSample> samples;
  for (int64_t bytes = 4 << 10; bytes <= (16 << 20); bytes *= 4) {
    samples.push_back({bytes, CopySeconds(bytes, from, to)});
  }
  return sim::FitLinkSpec(samples);
}

std::string Today() {
  std::time_t now = std::time(nullptr);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return buffer;
}

// A step whose forward ops alternate between CPU workers `a` and `b` (in topological order), so
// that most tensors cross, timed in the same rotation as the devices alone. Two things are
// measured from it. Copies as the executor makes them: fresh destination memory, the allocator's
// behaviour when another thread frees it and caches the producer left warm are all in its traced
// copies, while a clone repeated in a loop sees none of them and costs a third of what the same
// bytes cost in a step (bench/RESULTS.md). And what the copy leaves out: the ops that read a
// tensor from the other worker run slower than alone (cold caches, pages faulted in), about as
// much again as the copies themselves for LeNet.
struct CrossingStep : CrossingTimes {
  int a = 0, b = 0;
  std::unique_ptr<Executor> executor;
};

CrossingStep MakeCrossingStep(const graph::Graph& graph, const DeviceSet& devices, int a, int b,
                              const TensorMap& parameters) {
  const std::vector<std::string> names = DeviceNames(devices);
  graph::Placement alternating = graph::Placement::AllOn(graph, names, a);
  int k = 0;
  for (graph::OpId id : graph.TopologicalOrder()) {
    if (graph.op(id).phase != graph::Phase::kForward) continue;
    alternating.device_of_op[static_cast<size_t>(id)] = k++ % 2 == 0 ? a : b;
  }
  CrossingStep crossing;
  crossing.a = a;
  crossing.b = b;
  crossing.device_of_op = graph::ExpandPlacement(graph, alternating);
  crossing.executor = std::make_unique<Executor>(graph, devices, alternating, parameters,
                                                 ExecutorOptions{.record_trace = true});
  return crossing;
}

void RecordCrossingStep(CrossingStep& crossing, const std::vector<std::string>& names,
                        const std::vector<TraceEvent>& trace) {
  for (const TraceEvent& e : trace) {
    if (e.lane.find("->") != std::string::npos) {
      crossing.copy_times[e.lane][e.name].push_back(e.duration_us * 1e-6);
    } else if (e.lane == names[static_cast<size_t>(crossing.a)] ||
               e.lane == names[static_cast<size_t>(crossing.b)]) {
      crossing.op_times[e.name].push_back(e.duration_us * 1e-6);
    }
  }
}

}  // namespace

std::optional<sim::LinkSpec> FitCrossingLink(const graph::Graph& graph,
                                             const CrossingTimes& crossing,
                                             const std::vector<std::string>& names, int from,
                                             int to, const std::map<std::string, double>& alone) {
  const auto copies = crossing.copy_times.find(names[static_cast<size_t>(from)] + "->" +
                                               names[static_cast<size_t>(to)]);
  if (copies == crossing.copy_times.end()) return std::nullopt;
  std::vector<sim::TransferSample> samples;
  std::set<int64_t> sizes;
  for (const auto& [tensor, seconds] : copies->second) {
    const int64_t bytes = graph.tensor(*graph.FindTensor(tensor)).bytes();
    samples.push_back({bytes, Median(seconds)});
    sizes.insert(bytes);
  }
  if (sizes.size() < 2) return std::nullopt;
  sim::LinkSpec link = sim::FitLinkSpec(samples);
  double slower = 0;
  int64_t received = 0;
  for (graph::OpId id = 0; id < static_cast<graph::OpId>(graph.num_ops()); ++id) {
    if (crossing.device_of_op[static_cast<size_t>(id)] != to) continue;
    const graph::Op& op = graph.op(id);
    const auto placed = crossing.op_times.find(op.name);
    const auto by_itself = alone.find(op.name);
    if (placed == crossing.op_times.end() || by_itself == alone.end()) continue;
    slower += Median(placed->second) - by_itself->second;
    std::set<graph::TensorId> inputs(op.inputs.begin(), op.inputs.end());
    for (graph::TensorId t : inputs) {
      const graph::Tensor& tensor = graph.tensor(t);
      const graph::OpId source = tensor.producer != graph::kNoOp ? tensor.producer
                                 : tensor.kind == graph::TensorKind::kParameter
                                     ? graph::OwnerOf(graph, t)
                                     : graph::kNoOp;
      if (source != graph::kNoOp && crossing.device_of_op[static_cast<size_t>(source)] == from) {
        received += tensor.bytes();
      }
    }
  }
  if (received > 0) {
    link.receive_seconds_per_byte = std::max(0.0, slower / static_cast<double>(received));
  }
  return link;
}

sim::ProfiledCostModel ProfileDevices(const graph::Graph& graph, const DeviceSet& devices,
                                      const ProfileOptions& options) {
  sim::ProfiledCostModel profile;
  profile.metadata().model = options.model_name;
  profile.metadata().libtorch_version = TORCH_VERSION;
  profile.metadata().date = Today();
  for (const Device& device : devices) {
    profile.metadata().devices.push_back({device.name, HardwareName(device)});
  }
  const TensorMap parameters = InitializeParameters(graph, options.seed);
  TensorMap batch = SyntheticBatch(graph, options.seed + 1);
  const std::vector<std::string> names = DeviceNames(devices);
  // Every device alone, with the thread budget it has in a placement, and every pair of CPU
  // workers in a crossing step. They take turns in blocks of a few steps, so that a slow phase of
  // a shared machine (another tenant's memory traffic) falls on all of them alike instead of on
  // whichever was being profiled then. Each block starts with an untimed step: the others' steps
  // have evicted this one's data from the caches, while a measured placement runs its steps back
  // to back (timed right after the turn, ops came out about 10% slower than in measured steps).
  constexpr int kTimedStepsPerBlock = 2;
  std::vector<std::unique_ptr<Executor>> alone;
  for (size_t d = 0; d < devices.size(); ++d) {
    alone.push_back(std::make_unique<Executor>(
        graph, devices, graph::Placement::AllOn(graph, names, static_cast<int>(d)), parameters,
        ExecutorOptions{.record_trace = true}));
  }
  std::vector<CrossingStep> crossings;
  for (int a = 0; a < static_cast<int>(devices.size()); ++a) {
    for (int b = a + 1; b < static_cast<int>(devices.size()); ++b) {
      if (devices[static_cast<size_t>(a)].type == DeviceType::kCpu &&
          devices[static_cast<size_t>(b)].type == DeviceType::kCpu) {
        crossings.push_back(MakeCrossingStep(graph, devices, a, b, parameters));
      }
    }
  }
  for (int step = 0; step < options.warmup_steps; ++step) {
    for (auto& executor : alone) executor->RunStep(batch);
    for (CrossingStep& crossing : crossings) crossing.executor->RunStep(batch);
  }
  std::vector<std::map<std::string, std::vector<double>>> op_times(devices.size());
  for (int timed = 0; timed < options.timed_steps; timed += kTimedStepsPerBlock) {
    const int steps = std::min(kTimedStepsPerBlock, options.timed_steps - timed);
    for (size_t d = 0; d < devices.size(); ++d) {
      alone[d]->RunStep(batch);
      for (int k = 0; k < steps; ++k) {
        for (const TraceEvent& e : alone[d]->RunStep(batch).trace) {
          if (e.lane == devices[d].name) op_times[d][e.name].push_back(e.duration_us * 1e-6);
        }
      }
    }
    for (CrossingStep& crossing : crossings) {
      crossing.executor->RunStep(batch);
      for (int k = 0; k < steps; ++k) {
        RecordCrossingStep(crossing, names, crossing.executor->RunStep(batch).trace);
      }
    }
  }
  alone.clear();
  std::vector<std::map<std::string, double>> alone_seconds(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    for (const auto& [op, times] : op_times[d]) {
      alone_seconds[d][op] = Median(times);
      profile.SetOpSeconds(op, devices[d].name, alone_seconds[d][op]);
    }
  }
  std::map<std::pair<int, int>, sim::LinkSpec> from_steps;
  for (CrossingStep& crossing : crossings) {
    crossing.executor.reset();
    for (auto [from, to] : {std::pair{crossing.a, crossing.b}, std::pair{crossing.b, crossing.a}}) {
      if (auto link = FitCrossingLink(graph, crossing, names, from, to,
                                      alone_seconds[static_cast<size_t>(to)])) {
        from_steps[{from, to}] = *link;
      }
    }
  }
  for (size_t to = 0; to < devices.size(); ++to) {
    if (devices[to].type == DeviceType::kCuda) {
      profile.SetLink(sim::kHostName, devices[to].name, FitLink(nullptr, devices[to]));
    }
    for (size_t from = 0; from < devices.size(); ++from) {
      if (from == to) continue;
      // Between CPU workers, from the executor's own copies where the graph made enough of them;
      // otherwise (and wherever a GPU takes part, whose copies the executor's trace times only
      // as issued) copies of 4 KiB to 16 MiB, synchronised.
      auto fitted = from_steps.find({static_cast<int>(from), static_cast<int>(to)});
      profile.SetLink(
          devices[from].name, devices[to].name,
          fitted != from_steps.end() ? fitted->second : FitLink(&devices[from], devices[to]));
    }
  }
  return profile;
}

}  // namespace placer::runtime
