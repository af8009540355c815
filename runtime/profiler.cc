#include "runtime/profiler.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/headeronly/version.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <exception>
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
#include "runtime/statistics.h"

namespace placer::runtime {
namespace {

using Clock = std::chrono::steady_clock;

void Synchronize([[maybe_unused]] const graph::Device& device) {
#ifdef PLACER_WITH_CUDA
  if (device.type == graph::DeviceType::kCuda) c10::cuda::device_synchronize();
#endif
}

std::string HardwareName(const graph::Device& device) {
#ifdef PLACER_WITH_CUDA
  if (device.type == graph::DeviceType::kCuda) {
    cudaDeviceProp properties{};
    if (cudaGetDeviceProperties(&properties, device.index) == cudaSuccess) return properties.name;
  }
#endif
  return fmt::format("cpu, {} thread{}", device.threads, device.threads == 1 ? "" : "s");
}

// Median seconds to make a tensor of `bytes` on `from` (nullptr: host memory) available on `to`,
// the way the executor does it: a clone between CPU workers, a copy otherwise.
double CopySeconds(int64_t bytes, const graph::Device* from, const graph::Device& to) {
  at::Tensor source = at::randn(
      {bytes / 4},
      at::TensorOptions(at::kFloat).device(from ? TorchDevice(*from) : at::Device(at::kCPU)));
  if (from == nullptr && to.type == graph::DeviceType::kCuda) source = source.pin_memory();
  std::vector<double> times;
  // On a thread with the sending worker's thread budget, as the executor's copies run.
  std::thread worker([&] {
    at::init_num_threads();
    at::set_num_threads(from != nullptr && from->type == graph::DeviceType::kCpu ? from->threads
                                                                                 : 1);
    for (int repeat = 0; repeat < 12; ++repeat) {
      auto begin = Clock::now();
      at::Tensor copy = to.type == graph::DeviceType::kCpu &&
                                (from == nullptr || from->type == graph::DeviceType::kCpu)
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

sim::LinkSpec FitLink(const graph::Device* from, const graph::Device& to) {
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
// tensor from the other worker run slower than alone (cold caches, pages faulted in).
struct CrossingStep : CrossingTimes {
  int a = 0, b = 0;
  std::unique_ptr<Executor> executor;
};

CrossingStep MakeCrossingStep(const graph::Graph& graph, const graph::DeviceSet& devices, int a,
                              int b, const TensorMap& parameters) {
  const std::vector<std::string> names = graph::DeviceNames(devices);
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

using Intervals = std::vector<std::pair<double, double>>;  // [begin, end) in microseconds

// How many microseconds of [begin, end) the (disjoint) `intervals` cover.
double Covered(double begin, double end, const Intervals& intervals) {
  double covered = 0;
  for (const auto& [from, to] : intervals) {
    covered += std::max(0.0, std::min(end, to) - std::max(begin, from));
  }
  return covered;
}

// Files one step's trace. A CPU worker's op event spans the op and the clones it then issues
// (the executor's RunOp): the op's own time leaves those out, since the link times them.
void RecordCrossingStep(CrossingStep& crossing, const std::vector<std::string>& names,
                        const std::vector<graph::TraceEvent>& trace) {
  const std::string worker[2] = {names[static_cast<size_t>(crossing.a)],
                                 names[static_cast<size_t>(crossing.b)]};
  const std::string sends[2] = {worker[0] + "->" + worker[1], worker[1] + "->" + worker[0]};
  Intervals busy[2], clones[2];
  for (const graph::TraceEvent& e : trace) {
    for (int w = 0; w < 2; ++w) {
      if (e.lane == worker[w]) busy[w].emplace_back(e.start_us, e.start_us + e.duration_us);
      if (e.lane == sends[w]) clones[w].emplace_back(e.start_us, e.start_us + e.duration_us);
    }
  }
  auto overlap = [](const graph::TraceEvent& e, const Intervals& other) {
    return e.duration_us > 0
               ? Covered(e.start_us, e.start_us + e.duration_us, other) / e.duration_us
               : 0.0;
  };
  for (const graph::TraceEvent& e : trace) {
    for (int w = 0; w < 2; ++w) {
      if (e.lane == sends[w]) {
        // A clone by worker w, while the receiving worker may be busy.
        crossing.copy_times[e.lane][e.name].push_back(
            {e.duration_us * 1e-6, overlap(e, busy[1 - w])});
      } else if (e.lane == worker[w]) {
        const double own_us =
            e.duration_us - Covered(e.start_us, e.start_us + e.duration_us, clones[w]);
        crossing.op_times[e.name].push_back({own_us * 1e-6, overlap(e, busy[1 - w])});
      }
    }
  }
}

// What a timing from the crossing step would have taken alone, when both workers busy run
// `contention` times slower than one (ContentionSpec::Factor(2)): progress was 1 / contention
// for the overlapping fraction.
double AloneEquivalent(const CrossingTimes::Timed& timed, double contention) {
  return timed.seconds * (1 - timed.overlap + timed.overlap / contention);
}

double MedianAlone(const std::vector<CrossingTimes::Timed>& timings, double contention) {
  std::vector<double> seconds;
  for (const CrossingTimes::Timed& timed : timings) {
    seconds.push_back(AloneEquivalent(timed, contention));
  }
  return Median(seconds);
}

}  // namespace

// The link from `from` to `to` fitted from the crossing step: a*bytes + b from the median time of
// each tensor copied that way, and the receive cost per byte: the ops on `to` took this much
// longer than alone (`alone` holds every op's median alone on `to`), over the bytes they read
// from `from`; both as they would have taken with the other worker idle (`contention`: the
// slowdown of two busy CPU workers). nullopt when that direction copied fewer than two tensor
// sizes.
std::optional<sim::LinkSpec> FitCrossingLink(const graph::Graph& graph,
                                             const CrossingTimes& crossing,
                                             const std::vector<std::string>& names, int from,
                                             int to, const std::map<std::string, double>& alone,
                                             double contention) {
  const auto copies = crossing.copy_times.find(names[static_cast<size_t>(from)] + "->" +
                                               names[static_cast<size_t>(to)]);
  if (copies == crossing.copy_times.end()) return std::nullopt;
  std::vector<sim::TransferSample> samples;
  std::set<int64_t> sizes;
  for (const auto& [tensor, timings] : copies->second) {
    const int64_t bytes = graph.tensor(*graph.FindTensor(tensor)).bytes();
    samples.push_back({bytes, MedianAlone(timings, contention)});
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
    slower += MedianAlone(placed->second, contention) - by_itself->second;
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

namespace {

// The devices of each kind that has several: contention is measured among them.
std::vector<std::vector<size_t>> KindsOfSeveral(const graph::DeviceSet& devices) {
  std::vector<std::vector<size_t>> kinds;
  for (graph::DeviceType type : {graph::DeviceType::kCpu, graph::DeviceType::kCuda}) {
    std::vector<size_t> of_type;
    for (size_t d = 0; d < devices.size(); ++d) {
      if (devices[d].type == type) of_type.push_back(d);
    }
    if (of_type.size() >= 2) kinds.push_back(std::move(of_type));
  }
  return kinds;
}

// An untimed round, then `steps` timed ones, in which every device of `kind` runs its whole step
// at once (each on its own thread, starting together): what each op takes while all the others
// of its kind are busy goes to `contended_times`.
void RunConcurrently(std::vector<std::unique_ptr<Executor>>& alone, const std::vector<size_t>& kind,
                     const TensorMap& batch, const graph::DeviceSet& devices, int steps,
                     std::vector<std::map<std::string, std::vector<double>>>& contended_times) {
  for (int round = 0; round <= steps; ++round) {
    std::vector<StepResult> results(kind.size());
    std::vector<std::exception_ptr> errors(kind.size());
    {
      std::vector<std::jthread> threads;
      for (size_t i = 0; i < kind.size(); ++i) {
        threads.emplace_back([&, i] {
          try {
            results[i] = alone[kind[i]]->RunStep(batch);
          } catch (...) {
            errors[i] = std::current_exception();
          }
        });
      }
    }
    for (const std::exception_ptr& error : errors) {
      if (error) std::rethrow_exception(error);
    }
    if (round == 0) continue;
    for (size_t i = 0; i < kind.size(); ++i) {
      for (const graph::TraceEvent& e : results[i].trace) {
        if (e.lane == devices[kind[i]].name) {
          contended_times[kind[i]][e.name].push_back(e.duration_us * 1e-6);
        }
      }
    }
  }
}

// Per op of `graph` under `placement`: whether it reads a tensor that lives on another device.
std::vector<bool> ReadsForeign(const graph::Graph& graph, const graph::Placement& placement) {
  const std::vector<int> device = graph::ExpandPlacement(graph, placement);
  const std::vector<int> home = graph::HomeDevices(graph, device);
  std::vector<bool> foreign(static_cast<size_t>(graph.num_ops()), false);
  for (graph::OpId id = 0; id < graph.num_ops(); ++id) {
    for (graph::TensorId t : graph.op(id).inputs) {
      const int from = home[static_cast<size_t>(t)];
      if (from != graph::kHostDevice && from != device[static_cast<size_t>(id)]) {
        foreign[static_cast<size_t>(id)] = true;
      }
    }
  }
  return foreign;
}

// An untimed step, then `steps` timed ones, of `shares`, the executor of a placement whose
// devices run their shares at once: what each op takes while the others are busy goes to
// `contended_times`, except the ops reading another device's tensor (`reads_foreign`), whose
// extra time is the link's receive cost, not contention.
void RunShares(Executor& shares, const std::vector<bool>& reads_foreign, const graph::Graph& graph,
               const TensorMap& batch, const graph::DeviceSet& devices, int steps,
               std::vector<std::map<std::string, std::vector<double>>>& contended_times) {
  shares.RunStep(batch);
  for (int k = 0; k < steps; ++k) {
    for (const graph::TraceEvent& e : shares.RunStep(batch).trace) {
      const std::optional<graph::OpId> op = graph.FindOp(e.name);
      if (!op || reads_foreign[static_cast<size_t>(*op)]) continue;
      for (size_t d = 0; d < devices.size(); ++d) {
        if (e.lane == devices[d].name) contended_times[d][e.name].push_back(e.duration_us * 1e-6);
      }
    }
  }
}

// The slowdown of the devices of `kind` all busy at once: the sum over their ops of the median
// time contended over the sum of the median time alone (so that the ops that take the time weigh
// the most); never below 1 (noise, not a speed-up).
sim::ContentionSpec FitContention(
    const std::vector<size_t>& kind,
    const std::vector<std::map<std::string, double>>& alone_seconds,
    const std::vector<std::map<std::string, std::vector<double>>>& contended_times) {
  double alone = 0, contended = 0;
  for (size_t d : kind) {
    for (const auto& [op, times] : contended_times[d]) {
      const auto by_itself = alone_seconds[d].find(op);
      if (by_itself == alone_seconds[d].end()) continue;
      alone += by_itself->second;
      contended += Median(times);
    }
  }
  return {.devices = static_cast<int>(kind.size()),
          .slowdown = alone > 0 ? std::max(1.0, contended / alone) : 1.0};
}

}  // namespace

sim::ProfiledCostModel ProfileDevices(const graph::Graph& graph, const graph::DeviceSet& devices,
                                      const ProfileOptions& options) {
  sim::ProfiledCostModel profile;
  profile.metadata().model = options.model_name;
  profile.metadata().libtorch_version = TORCH_VERSION;
  profile.metadata().date = Today();
  for (const graph::Device& device : devices) {
    profile.metadata().devices.push_back({device.name, HardwareName(device)});
  }
  const TensorMap parameters = InitializeParameters(graph, options.seed);
  TensorMap batch = SyntheticBatch(graph, options.seed + 1);
  const std::vector<std::string> names = graph::DeviceNames(devices);
  // Every device alone, with the thread budget it has in a placement, every pair of CPU workers
  // in a crossing step, and the devices of each kind all at once. They take turns in blocks of a
  // few steps, so that a slow phase of a shared machine (another tenant's memory traffic) falls on
  // all of them alike instead of on whichever was being profiled then. Each block starts with an
  // untimed step: the others' steps have evicted this one's data from the caches, while a measured
  // placement runs its steps back to back (timed right after the turn, ops came out about 10%
  // slower than in measured steps).
  constexpr int kTimedStepsPerBlock = 2;
  std::vector<std::unique_ptr<Executor>> alone;
  for (size_t d = 0; d < devices.size(); ++d) {
    alone.push_back(std::make_unique<Executor>(
        graph, devices, graph::Placement::AllOn(graph, names, static_cast<int>(d)), parameters,
        ExecutorOptions{.record_trace = true}));
  }
  std::unique_ptr<Executor> shares;
  std::vector<bool> reads_foreign;
  if (options.concurrent_shares) {
    shares = std::make_unique<Executor>(graph, devices, *options.concurrent_shares, parameters,
                                        ExecutorOptions{.record_trace = true});
    reads_foreign = ReadsForeign(graph, *options.concurrent_shares);
  }
  std::vector<CrossingStep> crossings;
  for (int a = 0; a < static_cast<int>(devices.size()); ++a) {
    for (int b = a + 1; b < static_cast<int>(devices.size()); ++b) {
      if (devices[static_cast<size_t>(a)].type == graph::DeviceType::kCpu &&
          devices[static_cast<size_t>(b)].type == graph::DeviceType::kCpu) {
        crossings.push_back(MakeCrossingStep(graph, devices, a, b, parameters));
      }
    }
  }
  for (int step = 0; step < options.warmup_steps; ++step) {
    for (auto& executor : alone) executor->RunStep(batch);
    for (CrossingStep& crossing : crossings) crossing.executor->RunStep(batch);
    if (shares) shares->RunStep(batch);
  }
  const std::vector<std::vector<size_t>> kinds = KindsOfSeveral(devices);
  std::vector<std::map<std::string, std::vector<double>>> op_times(devices.size());
  std::vector<std::map<std::string, std::vector<double>>> contended_times(devices.size());
  for (int timed = 0; timed < options.timed_steps; timed += kTimedStepsPerBlock) {
    const int steps = std::min(kTimedStepsPerBlock, options.timed_steps - timed);
    for (size_t d = 0; d < devices.size(); ++d) {
      alone[d]->RunStep(batch);
      for (int k = 0; k < steps; ++k) {
        for (const graph::TraceEvent& e : alone[d]->RunStep(batch).trace) {
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
    if (shares) {
      RunShares(*shares, reads_foreign, graph, batch, devices, steps, contended_times);
    } else {
      for (const std::vector<size_t>& kind : kinds) {
        RunConcurrently(alone, kind, batch, devices, steps, contended_times);
      }
    }
  }
  alone.clear();
  shares.reset();
  std::vector<std::map<std::string, double>> alone_seconds(devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    for (const auto& [op, times] : op_times[d]) {
      alone_seconds[d][op] = Median(times);
      profile.SetOpSeconds(op, devices[d].name, alone_seconds[d][op]);
    }
  }
  for (const std::vector<size_t>& kind : kinds) {
    profile.SetContention(devices[kind.front()].type,
                          FitContention(kind, alone_seconds, contended_times));
  }
  std::map<std::pair<int, int>, sim::LinkSpec> from_steps;
  const double cpu_contention =
      profile.FindContention(graph::DeviceType::kCpu).value_or(sim::ContentionSpec{}).Factor(2);
  for (CrossingStep& crossing : crossings) {
    crossing.executor.reset();
    for (auto [from, to] : {std::pair{crossing.a, crossing.b}, std::pair{crossing.b, crossing.a}}) {
      if (auto link = FitCrossingLink(graph, crossing, names, from, to,
                                      alone_seconds[static_cast<size_t>(to)], cpu_contention)) {
        from_steps[{from, to}] = *link;
      }
    }
  }
  for (size_t to = 0; to < devices.size(); ++to) {
    if (devices[to].type == graph::DeviceType::kCuda) {
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
