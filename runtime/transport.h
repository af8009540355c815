// How a tensor moves between two devices of a step. The executor schedules; a transport moves
// and synchronises: in-process CPU copies (cpu_transport.cc), CUDA copies on each GPU's stream
// (cuda_transport.cc). The executor does not know which one moved a tensor.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/device.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "runtime/trace.h"

namespace placer::runtime {

// Times a device's ops where the host's clock cannot: a GPU's ops return once launched, so the
// host times the launches only. Made by the transport that put the worker on its stream.
class OpTimer {
 public:
  static constexpr size_t kUntraced = static_cast<size_t>(-1);
  virtual ~OpTimer() = default;
  virtual void Begin() = 0;                  // before an op
  virtual void End(size_t trace_index) = 0;  // after it: its event in the trace, or kUntraced
  // After the device's work is synchronised: the ops' busy seconds; corrects the start and
  // duration of the traced ones in `trace`.
  virtual double Finish(std::vector<graph::TraceEvent>& trace) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Issued by the worker of `from` (by `to`'s when `from` is graph::kHostDevice, host memory):
  // tensor `t`'s `value` as a tensor that `to` owns. The copy may still be in flight; `to`'s
  // worker calls WaitFor before it reads the value.
  virtual at::Tensor Copy(const at::Tensor& value, int from, int to, graph::TensorId t) = 0;
  // Called by `device`'s worker before it reads `t` there.
  virtual void WaitFor(graph::TensorId /*t*/, int /*device*/) {}
  // `t`'s value on `device` has been freed: forget what synchronised it.
  virtual void Forget(graph::TensorId /*t*/, int /*device*/) {}
  // Held by `device`'s worker while it runs a step's ops, so that they are ordered with the
  // copies (CUDA: the worker issues its ops on the device's stream). Null when nothing is needed.
  virtual std::shared_ptr<void> EnterStep(int /*device*/) { return nullptr; }
  // A timer for `device`'s ops during one step, or null where the host's clock is right.
  // `reference_us`: the step's time now, where the timer starts.
  virtual std::unique_ptr<OpTimer> TimeOps(int /*device*/, double /*reference_us*/) {
    return nullptr;
  }
  // Makes a tensor that arrived from another process available on a device of this one.
  using Deliver = std::function<void(graph::TensorId t, int device, at::Tensor value)>;
  // Fails the step with a message (a receive that failed).
  using Fail = std::function<void(const std::string& message)>;
  // Before a step's ops start: receive the step's tensors from other processes, calling `deliver`
  // (from the transport's own threads) as each arrives, or `fail`.
  virtual void BeginStep(const Deliver& /*deliver*/, const Fail& /*fail*/) {}
  // After the step: true once every receive of BeginStep has delivered (always, after a step whose
  // ops all ran); false when receives are still waiting (a failed step).
  virtual bool EndStep() { return true; }
  // Blocks until `device`'s issued work (ops and copies) is done.
  virtual void Synchronize(int /*device*/) {}
  // After a failed step: drops the synchronisation state and waits for copies in flight.
  virtual void Reset() {}
};

struct Processes;

// A tensor that another process sends to a device of this one in every step.
struct Incoming {
  graph::TensorId t;
  int to;  // device
  int from_process;
  std::vector<int64_t> shape;
  graph::DType dtype;
  int cuda_index = -1;  // `to`'s GPU, where the tensor goes after arriving in host memory; -1: CPU
};

// A placement across processes, as its transport sees it.
struct CrossProcess {
  std::shared_ptr<const Processes> processes;
  std::vector<int> device_process;  // per device: its process's rank
  std::vector<Incoming> incoming;
};

// The transports of an executor's devices, and which one serves each ordered pair.
class Transports {
 public:
  // Throws StepFailure when a device needs a transport this build lacks (a GPU without CUDA).
  // `cross`: the placement spans processes (its devices that are not this process's are reached
  // through the process group).
  Transports(const graph::DeviceSet& devices, int num_tensors, const CrossProcess* cross = nullptr);
  ~Transports();
  Transports(const Transports&) = delete;
  Transports& operator=(const Transports&) = delete;

  // From `from` (or graph::kHostDevice) to `to`.
  Transport& Between(int from, int to) const {
    return *route_[static_cast<size_t>((from + 1) * num_devices_ + to)];
  }
  const std::vector<std::unique_ptr<Transport>>& all() const { return all_; }

 private:
  int num_devices_;
  std::vector<std::unique_ptr<Transport>> all_;
  std::vector<Transport*> route_;  // [(from + 1) * num_devices + to]
};

// The implementations (one file each).
std::unique_ptr<Transport> MakeCpuCopyTransport();
// Built only with PLACER_WITH_CUDA.
std::unique_ptr<Transport> MakeCudaTransport(const graph::DeviceSet& devices, int num_tensors);
// c10d send/recv between processes (Gloo; a GPU's tensors go through host memory).
std::unique_ptr<Transport> MakeProcessTransport(const CrossProcess& cross, int num_devices);

}  // namespace placer::runtime
