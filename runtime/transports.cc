#include <fmt/format.h>

#include "runtime/executor.h"
#include "runtime/processes.h"
#include "runtime/transport.h"

namespace placer::runtime {

Transports::Transports(const graph::DeviceSet& devices, int num_tensors, const CrossProcess* cross)
    : num_devices_(static_cast<int>(devices.size())) {
  // Another process's GPUs are reached through the process group only: the CUDA transport, which
  // takes a stream on each GPU it serves, sees them as absent (a CPU worker it never copies to).
  graph::DeviceSet own = devices;
  for (size_t d = 0; cross != nullptr && d < own.size(); ++d) {
    if (cross->device_process[d] != cross->processes->rank()) own[d].type = graph::DeviceType::kCpu;
  }
  bool any_cuda = false;
  for (const graph::Device& d : own) any_cuda = any_cuda || d.type == graph::DeviceType::kCuda;
  all_.push_back(MakeCpuCopyTransport());
  Transport* cpu = all_.back().get();
  Transport* cuda = nullptr;
  if (any_cuda) {
#ifdef PLACER_WITH_CUDA
    all_.push_back(MakeCudaTransport(own, num_tensors));
    cuda = all_.back().get();
#else
    (void)num_tensors;
    throw StepFailure(
        "this placer was built without CUDA (PLACER_WITH_CUDA=OFF): it cannot run "
        "ops on a GPU");
#endif
  }
  auto is_cuda = [&](int d) {
    return d >= 0 && own[static_cast<size_t>(d)].type == graph::DeviceType::kCuda;
  };
  Transport* between_processes = nullptr;
  if (cross != nullptr) {
    all_.push_back(MakeProcessTransport(*cross, num_devices_));
    between_processes = all_.back().get();
  }
  auto other_process = [&](int from, int to) {
    return cross != nullptr && from >= 0 &&
           cross->device_process[static_cast<size_t>(from)] !=
               cross->device_process[static_cast<size_t>(to)];
  };
  route_.assign(static_cast<size_t>((num_devices_ + 1) * num_devices_), cpu);
  for (int from = graph::kHostDevice; from < num_devices_; ++from) {
    for (int to = 0; to < num_devices_; ++to) {
      Transport*& route = route_[static_cast<size_t>((from + 1) * num_devices_ + to)];
      if (other_process(from, to)) {
        route = between_processes;
      } else if (is_cuda(from) || is_cuda(to)) {
        route = cuda;
      }
    }
  }
}

Transports::~Transports() = default;

}  // namespace placer::runtime
