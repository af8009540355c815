#include "runtime/sim/simulator.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <span>
#include <stdexcept>
#include <unordered_map>

#include "graph/pipeline.h"

namespace placer::sim {

using graph::DeviceType;
using graph::kNoOp;
using graph::OpId;
using graph::Phase;
using graph::TensorId;
using graph::TensorOrigin;
using Hold = graph::PipelineOrder::Hold;

// A copy of tensor `tensor` from `from` (a device, or kHost) to `to`.
struct Simulator::CopyTask {
  TensorId tensor = 0;
  int from = kHost;
  int to = 0;
  // The op whose run issued this copy on its own worker (kNoOp for step-start copies and for
  // copies issued onto another device's stream): its time counts as that op's, as in the
  // executor's RunOp.
  OpId job_op = kNoOp;
  bool ends_job = false;  // the job's last copy: the op's inputs are released after it
  double queued = 0;      // when it was enqueued: the time its value came to exist
};

// Everything one simulation changes. Flat vectors sized once per call; no maps, no strings unless
// a trace is recorded.
struct Simulator::Workspace {
  struct Event {
    double time;
    int64_t sequence;  // ties in time resolve in the order the events were created
    int device;
    bool operator>(const Event& other) const {
      return time != other.time ? time > other.time : sequence > other.sequence;
    }
  };
  struct Running {
    bool active = false;
    bool is_copy = false;
    OpId op = kNoOp;
    CopyTask copy;
    double start = 0;
    double duration = 0;   // alone; once finished, as it ran
    int64_t sequence = 0;  // of the event that ends it; others for this device are stale
    // Under contention: the seconds alone left at `since`, and the factor it runs at since then
    // (0: not timed yet).
    double work_left = 0;
    double since = 0;
    double factor = 0;
  };
  // A first-in, first-out queue of copies that reuses its storage once drained.
  struct CopyQueue {
    std::vector<CopyTask> tasks;
    size_t head = 0;
    bool empty() const { return head == tasks.size(); }
    CopyTask Pop() {
      CopyTask task = tasks[head++];
      if (head == tasks.size()) {
        tasks.clear();
        head = 0;
      }
      return task;
    }
  };

  // Back to a fresh workspace's state, keeping the storage of the vectors (the per-op and
  // per-tensor ones are large and would otherwise be allocated, and their pages faulted in, for
  // every placement judged).
  void Clear() {
    Workspace fresh;
    pending.swap(fresh.pending);
    ready_at.swap(fresh.ready_at);
    uses_left.swap(fresh.uses_left);
    fresh.pending.clear();
    fresh.ready_at.clear();
    fresh.uses_left.clear();
    *this = std::move(fresh);
  }

  bool record_trace = false;
  // The placement's half of the plan (graph::PlacedStep), which the simulation only reads.
  std::span<const int> device_of;  // per op
  std::span<const int> home;       // per tensor: device, or kHost
  std::vector<int> pending;        // per op: distinct inputs not yet available on its device
  std::vector<double> ready_at;    // per op: when its last input became available on its device
  std::vector<int> uses_left;      // [tensor * devices + device]: readers there that have not run
  std::vector<std::vector<int>> ready;  // per device: min-heap of keys (the plan's priorities)
  // A pipelined placement orders and holds back ready ops by graph/pipeline.h's rules: each
  // device keeps its schedule state.
  const graph::PipelineOrder* pipeline = nullptr;
  std::vector<graph::PipelineOrder::DeviceState> pipeline_state;  // per device
  const std::vector<int>* key = nullptr;                          // per op
  const std::vector<OpId>* op_of = nullptr;                       // per key
  // Per device: copies it issues itself (served first: the executor does them inline, right after
  // the op or at the step's start) and copies other workers enqueue on its stream.
  std::vector<CopyQueue> own_copies, incoming_copies;
  std::vector<Running> running;
  std::vector<double> job_start;  // per device: when the op whose copies are running started
  std::vector<Event> events;      // min-heap: when each busy device finishes its current task
  int64_t next_sequence = 0;
  std::vector<uint8_t> reads_on;  // per device, scratch for QueueCopiesOf
  // A pipelined placement's ready ops its schedule holds back, per device (PeekReady): until
  // the device's schedule state moves on, and until their own forward op has run.
  std::vector<std::vector<int>> held_back, awaiting_forward;
  std::array<int, 2> busy_of_kind{};  // scratch for Retime: CPU workers, GPUs
  std::vector<int64_t> memory_now;
  std::vector<ChannelStats> channels;
  std::vector<std::vector<graph::TraceEvent>> trace;  // per device, as the executor keeps it
  SimulationResult result;
  int ops_done = 0;
  double last_time = 0;
  double now = 0;  // the time of the events being handled
  bool out_of_memory = false;
};

namespace {

// Checked before the graph, so that no devices is reported whatever the graph.
graph::DeviceSet CheckedDevices(graph::DeviceSet devices) {
  if (devices.empty()) throw std::invalid_argument("the simulator needs at least one device");
  for (size_t i = 0; i < devices.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (devices[j].name == devices[i].name) {
        throw std::invalid_argument(fmt::format("device '{}' is listed twice", devices[i].name));
      }
    }
  }
  return devices;
}

}  // namespace

Simulator::Simulator(const graph::Graph& graph, graph::DeviceSet devices,
                     const CostModel& cost_model)
    : graph_(graph),
      devices_(CheckedDevices(std::move(devices))),
      num_devices_(static_cast<int>(devices_.size())),
      num_channels_((num_devices_ + 1) * num_devices_),
      num_ops_(graph.num_ops()),
      num_tensors_(graph.num_tensors()),
      step_(graph) {  // throws on a cycle, a dangling input, an op or parameter without a place
  for (const graph::Device& device : devices_) {
    device_names_.push_back(device.name);
    is_cuda_.push_back(device.type == DeviceType::kCuda ? 1 : 0);
    capacity_.push_back(device.memory_capacity);
  }
  channel_lanes_.resize(static_cast<size_t>(num_channels_));
  for (int from = kHost; from < num_devices_; ++from) {
    for (int to = 0; to < num_devices_; ++to) {
      channel_lanes_[Channel(from, to)] =
          fmt::format("{}->{}", from == kHost ? kHostName : device_names_[from], device_names_[to]);
    }
  }
  TabulateCosts(cost_model);
}

// What op `op` on `device` pays beyond its profiled time for the inputs that crossed to it from
// another device (LinkSpec::receive_seconds_per_byte); the minibatch is read where it lies.
double Simulator::ReceiveSeconds(const Workspace& w, OpId op, int device) const {
  if (!any_receive_cost_) return 0;
  double seconds = 0;
  for (const TensorId t : step_.inputs(op)) {
    const int from = w.home[t];
    if (from == kHost || from == device) continue;
    seconds += static_cast<double>(stored_bytes_[static_cast<size_t>(t)]) *
               receive_seconds_per_byte_[Channel(from, device)];
  }
  return seconds;
}

void Simulator::Allocate(Workspace& w, int device, int64_t bytes) const {
  int64_t now = w.memory_now[device] += bytes;
  int64_t& peak = w.result.peak_memory_bytes[device];
  peak = std::max(peak, now);
  if (capacity_[device] > 0 && now > capacity_[device] && !w.out_of_memory) {
    w.out_of_memory = true;
    w.result.invalid_reason = fmt::format(
        "out of memory on {}: the step needs at least {} bytes, the capacity is {} bytes",
        device_names_[device], now, capacity_[device]);
  }
}

// `t` becomes available on `device`: count its memory there and wake the readers waiting for it.
void Simulator::Publish(Workspace& w, TensorId t, int device) const {
  const bool resident = step_.origin(t) == TensorOrigin::kParameter && w.home[t] == device;
  if (!resident) Allocate(w, device, stored_bytes_[static_cast<size_t>(t)]);
  int readers = 0;
  for (const OpId consumer : step_.consumers(t)) {
    if (w.device_of[consumer] != device) continue;
    ++readers;
    if (--w.pending[consumer] == 0) {
      // Its time is read when it starts: the table is large and read in no order a cache
      // foresees.
      __builtin_prefetch(&op_seconds_[static_cast<size_t>(consumer) * num_devices_ + device]);
      w.ready_at[consumer] = w.now;
      std::vector<int>& heap = w.ready[device];
      heap.push_back((*w.key)[consumer]);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    }
  }
  w.uses_left[static_cast<size_t>(t) * num_devices_ + device] = readers;
}

// Op `op` has finished on `device`, copies included: its inputs there lose a reader.
void Simulator::FreeInputsOf(Workspace& w, OpId op, int device) const {
  for (const TensorId t : step_.inputs(op)) {
    if (step_.origin(t) == TensorOrigin::kParameter && w.home[t] == device) continue;  // resident
    if (--w.uses_left[static_cast<size_t>(t) * num_devices_ + device] == 0) {
      w.memory_now[device] -= stored_bytes_[static_cast<size_t>(t)];
    }
  }
}

// Queues a copy of `t` from `from` to every other device that reads it, in device order.
void Simulator::QueueCopiesOf(Workspace& w, TensorId t, int from, OpId job_op) const {
  bool remote = false;  // most values are read only where they are made
  for (const OpId consumer : step_.consumers(t)) remote = remote || w.device_of[consumer] != from;
  if (!remote) return;
  for (const OpId consumer : step_.consumers(t)) w.reads_on[w.device_of[consumer]] = 1;
  for (int to = 0; to < num_devices_; ++to) {
    if (!w.reads_on[to]) continue;
    w.reads_on[to] = 0;
    if (to == from) continue;
    const int issuer = Issuer(from, to);
    CopyTask task{.tensor = t, .from = from, .to = to, .queued = w.now};
    if (issuer == from) {
      task.job_op = job_op;
      w.own_copies[issuer].tasks.push_back(task);
    } else {
      w.incoming_copies[issuer].tasks.push_back(task);
    }
  }
}

void Simulator::StartNext(Workspace& w, int device, double now) const {
  Workspace::Running& run = w.running[device];
  if (run.active) return;
  // Incoming copies and ready ops in the order they were enqueued on the stream (ties: the copy).
  bool copy_first = !w.own_copies[device].empty();
  if (!copy_first && !w.incoming_copies[device].empty()) {
    const Workspace::CopyQueue& incoming = w.incoming_copies[device];
    const OpId next = PeekReady(w, device);
    copy_first = next == kNoOp || w.ready_at[next] >= incoming.tasks[incoming.head].queued;
  }
  if (copy_first) {
    run.is_copy = true;
    run.copy = !w.own_copies[device].empty() ? w.own_copies[device].Pop()
                                             : w.incoming_copies[device].Pop();
    run.duration = TransferSeconds(run.copy.tensor, run.copy.from, run.copy.to);
  } else if (const OpId op = PopReady(w, device); op != kNoOp) {
    run.is_copy = false;
    run.op = op;
    if (w.pipeline && w.pipeline->Started(w.pipeline_state[device], op)) {
      Unhold(w, device, w.held_back[device], [](int) { return true; });
    }
    run.duration = OpSeconds(run.op, device) + ReceiveSeconds(w, run.op, device);
  } else {
    return;
  }
  run.active = true;
  run.start = now;
  if (any_contention_) {
    run.work_left = run.duration;
    run.since = now;
    run.factor = 0;  // timed by Retime, once every device has picked its work
  } else {
    ScheduleEnd(w, device, now + run.duration);
  }
}

OpId Simulator::PeekReady(Workspace& w, int device) const {
  std::vector<int>& heap = w.ready[device];
  while (!heap.empty()) {
    const OpId first = (*w.op_of)[heap.front()];
    if (!w.pipeline) return first;
    const Hold hold = w.pipeline->HoldOf(w.pipeline_state[device], device, first);
    if (hold == Hold::kNone) return first;
    // Held back: set aside until what holds it changes (Unhold), so that each later pick need
    // not pass it again. Priorities are distinct: the heap's layout never decides what runs.
    std::pop_heap(heap.begin(), heap.end(), std::greater<>());
    (hold == Hold::kForward ? w.awaiting_forward : w.held_back)[device].push_back(heap.back());
    heap.pop_back();
  }
  return kNoOp;
}

OpId Simulator::PopReady(Workspace& w, int device) const {
  const OpId op = PeekReady(w, device);
  if (op == kNoOp) return kNoOp;
  std::vector<int>& heap = w.ready[device];
  std::pop_heap(heap.begin(), heap.end(), std::greater<>());
  heap.pop_back();
  return op;
}

// Puts back into `device`'s ready ops the held-back keys of `keys` that `release` picks.
template <typename Release>
void Simulator::Unhold(Workspace& w, int device, std::vector<int>& keys, Release release) const {
  std::vector<int>& heap = w.ready[device];
  size_t kept = 0;
  for (const int key : keys) {
    if (release(key)) {
      heap.push_back(key);
      std::push_heap(heap.begin(), heap.end(), std::greater<>());
    } else {
      keys[kept++] = key;
    }
  }
  keys.resize(kept);
}

void Simulator::ScheduleEnd(Workspace& w, int device, double time) const {
  w.running[device].sequence = w.next_sequence;
  w.events.push_back({time, w.next_sequence++, device});
  std::push_heap(w.events.begin(), w.events.end(), std::greater<>());
}

// Under contention: times every running task at the factor of the devices of its kind busy now.
// A task whose factor changed is re-timed from the work it has left; its earlier end is stale.
void Simulator::Retime(Workspace& w, double now) const {
  std::fill(w.busy_of_kind.begin(), w.busy_of_kind.end(), 0);
  for (int d = 0; d < num_devices_; ++d) {
    if (w.running[d].active) ++w.busy_of_kind[kind_of_[d]];
  }
  const size_t stride = static_cast<size_t>(num_devices_) + 1;
  for (int d = 0; d < num_devices_; ++d) {
    Workspace::Running& run = w.running[d];
    if (!run.active) continue;
    const double factor = contention_[d * stride + w.busy_of_kind[kind_of_[d]]];
    if (factor == run.factor) continue;
    if (run.factor > 0)
      run.work_left = std::max(0.0, run.work_left - (now - run.since) / run.factor);
    run.since = now;
    run.factor = factor;
    ScheduleEnd(w, d, now + run.work_left * factor);
  }
}

void Simulator::Finish(Workspace& w, int device, double now) const {
  Workspace::Running& run = w.running[device];
  run.active = false;
  if (any_contention_) run.duration = now - run.start;
  if (!run.is_copy) {
    const OpId op = run.op;
    ++w.ops_done;
    if (w.pipeline) {
      if (w.pipeline->Finished(w.pipeline_state[device], op)) {
        Unhold(w, device, w.held_back[device], [](int) { return true; });
      }
      if (w.pipeline->IsForward(op)) {
        Unhold(w, device, w.awaiting_forward[device],
               [&](int key) { return w.pipeline->forward_op((*w.op_of)[key]) == op; });
      }
    }
    w.result.busy_seconds[device] += run.duration;
    w.job_start[device] = run.start;
    // The executor pushes each output's copies, then publishes it locally; this worker is busy
    // with its own copies either way, so the order only matters across outputs.
    for (const TensorId t : step_.outputs(op)) {
      QueueCopiesOf(w, t, device, op);
      Publish(w, t, device);
    }
    Workspace::CopyQueue& own = w.own_copies[device];
    if (!own.empty()) {
      own.tasks.back().ends_job = true;  // own copies are served first: the queue held none
    } else {
      FreeInputsOf(w, op, device);
      if (w.record_trace) {
        w.trace[device].push_back(
            {device_names_[device], graph_.op(op).name, run.start * 1e6, (now - run.start) * 1e6});
      }
    }
    return;
  }
  const CopyTask& copy = run.copy;
  ChannelStats& channel = w.channels[Channel(copy.from, copy.to)];
  channel.count += 1;
  channel.bytes += stored_bytes_[static_cast<size_t>(copy.tensor)];
  channel.seconds += run.duration;
  if (w.record_trace) {
    w.trace[copy.from >= 0 ? copy.from : copy.to].push_back(
        {channel_lanes_[Channel(copy.from, copy.to)], graph_.tensor(copy.tensor).name,
         run.start * 1e6, run.duration * 1e6});
  }
  Publish(w, copy.tensor, copy.to);
  if (copy.job_op != kNoOp) w.result.busy_seconds[device] += run.duration;
  if (copy.ends_job) {
    FreeInputsOf(w, copy.job_op, device);
    if (w.record_trace) {
      const double start = w.job_start[device];
      w.trace[device].push_back(
          {device_names_[device], graph_.op(copy.job_op).name, start * 1e6, (now - start) * 1e6});
    }
  }
}

SimulationResult Simulator::Simulate(const graph::Placement& placement, bool record_trace) const {
  if (placement.devices != device_names_) {
    throw std::invalid_argument(
        fmt::format("the placement's devices [{}] differ from the simulator's [{}]",
                    fmt::join(placement.devices, ", "), fmt::join(device_names_, ", ")));
  }
  const size_t num_devices = static_cast<size_t>(num_devices_);
  const graph::PlacedStep placed(step_, placement);  // throws for an unplaced op
  // One workspace per thread, reused: Simulate runs on the EvaluateBatch threads at once.
  static thread_local Workspace workspace;
  Workspace& w = workspace;
  w.Clear();
  w.record_trace = record_trace;
  w.device_of = placed.op_devices();
  w.key = &placed.priorities();
  w.op_of = &placed.ops_by_priority();
  w.pipeline = placed.pipeline();
  if (w.pipeline) {
    for (int d = 0; d < num_devices_; ++d) w.pipeline_state.push_back(w.pipeline->Start(d));
    w.held_back.resize(num_devices);
    w.awaiting_forward.resize(num_devices);
  }
  w.home = placed.homes();
  const std::vector<int64_t>& parameter_bytes = placed.parameter_bytes();
  w.pending = step_.num_inputs();
  w.ready_at.assign(static_cast<size_t>(num_ops_), 0.0);
  w.uses_left.assign(static_cast<size_t>(num_tensors_) * num_devices, 0);
  w.ready.resize(num_devices);
  w.own_copies.resize(num_devices);
  w.incoming_copies.resize(num_devices);
  w.running.resize(num_devices);
  w.job_start.assign(num_devices, 0);
  w.events.reserve(num_devices);
  w.reads_on.assign(num_devices, 0);
  w.memory_now = parameter_bytes;
  w.channels.resize(static_cast<size_t>(num_channels_));
  if (record_trace) w.trace.resize(num_devices);
  w.result.busy_seconds.assign(num_devices, 0);
  w.result.peak_memory_bytes = parameter_bytes;

  // Step start, worker by worker: the minibatch each device reads, then the parameters it owns.
  // (No op type reads nothing; should a hand-made one, it is ready from the start.)
  for (OpId id = 0; id < num_ops_; ++id) {
    if (step_.num_inputs()[id] == 0) w.ready[w.device_of[id]].push_back((*w.key)[id]);
  }
  for (auto& heap : w.ready) std::make_heap(heap.begin(), heap.end(), std::greater<>());
  for (int d = 0; d < num_devices_; ++d) {
    for (TensorId t : step_.minibatch()) {
      bool read_here = false;
      for (const OpId consumer : step_.consumers(t)) {
        read_here = read_here || w.device_of[consumer] == d;
      }
      if (!read_here) continue;
      if (is_cuda_[d]) {
        w.own_copies[d].tasks.push_back({.tensor = t, .from = kHost, .to = d});
      } else {
        Publish(w, t, d);
      }
    }
    for (TensorId t : step_.parameters()) {
      if (w.home[t] != d) continue;
      QueueCopiesOf(w, t, d, kNoOp);
      Publish(w, t, d);
    }
  }
  for (int d = 0; d < num_devices_; ++d) StartNext(w, d, 0);
  if (any_contention_) Retime(w, 0);

  while (!w.events.empty() && !w.out_of_memory) {
    const double now = w.events.front().time;
    // Everything that ends at `now` first, then the idle devices pick: an op made ready at `now`
    // competes with the others on its device by rank, whichever event released it.
    bool finished = false;
    while (!w.events.empty() && w.events.front().time == now && !w.out_of_memory) {
      std::pop_heap(w.events.begin(), w.events.end(), std::greater<>());
      const Workspace::Event event = w.events.back();
      w.events.pop_back();
      const Workspace::Running& run = w.running[event.device];
      if (!run.active || run.sequence != event.sequence) continue;  // re-timed since
      w.now = now;
      Finish(w, event.device, now);
      finished = true;
    }
    if (!finished) continue;
    w.last_time = now;
    for (int d = 0; d < num_devices_; ++d) StartNext(w, d, now);
    if (any_contention_) Retime(w, now);
  }

  SimulationResult& result = w.result;
  if (w.out_of_memory) {
    result.valid = false;
    return std::move(result);
  }
  if (w.ops_done != num_ops_) {
    // Unreachable for a graph the constructor accepted: every input is produced, a parameter or
    // the minibatch, and nothing is cyclic.
    for (OpId id : step_.order()) {
      if (w.pending[id] > 0) {
        throw std::logic_error(fmt::format("simulator: op '{}' never became ready on {}",
                                           graph_.op(id).name, device_names_[w.device_of[id]]));
      }
    }
    throw std::logic_error(fmt::format("simulator: {} of {} ops ran", w.ops_done, num_ops_));
  }
  result.valid = true;
  result.step_seconds = w.last_time;
  for (int from = kHost; from < num_devices_; ++from) {
    for (int to = 0; to < num_devices_; ++to) {
      ChannelStats stats = w.channels[Channel(from, to)];
      if (stats.count == 0) continue;
      stats.from = from;
      stats.to = to;
      result.transfers.push_back(stats);
    }
  }
  if (record_trace) {
    for (auto& events : w.trace) {
      result.trace.insert(result.trace.end(), events.begin(), events.end());
    }
  }
  return std::move(result);
}

graph::EvaluationResult Simulator::ToEvaluationResult(SimulationResult result) const {
  graph::EvaluationResult evaluation;
  evaluation.valid = result.valid;
  evaluation.invalid_reason = std::move(result.invalid_reason);
  if (!result.valid) return evaluation;
  evaluation.step_seconds = result.step_seconds;
  evaluation.min_seconds = evaluation.max_seconds = result.step_seconds;
  evaluation.step_samples = {result.step_seconds};
  for (int d = 0; d < num_devices_; ++d) {
    evaluation.devices.push_back(
        {device_names_[d], result.busy_seconds[d], result.peak_memory_bytes[d]});
  }
  for (const ChannelStats& channel : result.transfers) {
    evaluation.transfers.push_back(
        {channel.from == kHost ? std::string(kHostName) : device_names_[channel.from],
         device_names_[channel.to], channel.bytes, channel.count, channel.seconds});
  }
  evaluation.trace = std::move(result.trace);
  return evaluation;
}

LowerBoundResult Simulator::LowerBound() const {
  LowerBoundResult bound;
  std::vector<double> finish(static_cast<size_t>(num_ops_), 0);
  double total = 0;
  for (OpId id : step_.order()) {
    double fastest = OpSeconds(id, 0);
    for (int d = 1; d < num_devices_; ++d) fastest = std::min(fastest, OpSeconds(id, d));
    double start = 0;
    for (const TensorId t : step_.inputs(id)) {
      const OpId producer = graph_.tensor(t).producer;
      if (producer != kNoOp) start = std::max(start, finish[producer]);
    }
    finish[id] = start + fastest;
    bound.critical_path_seconds = std::max(bound.critical_path_seconds, finish[id]);
    bound.longest_op_seconds = std::max(bound.longest_op_seconds, fastest);
    total += fastest;
  }
  bound.work_per_device_seconds = total / num_devices_;
  bound.seconds = std::max(
      {bound.critical_path_seconds, bound.work_per_device_seconds, bound.longest_op_seconds});
  return bound;
}

LowerBoundResult LowerBound(const graph::Graph& graph, const graph::DeviceSet& devices,
                            const CostModel& cost_model) {
  return Simulator(graph, devices, cost_model).LowerBound();
}

}  // namespace placer::sim
