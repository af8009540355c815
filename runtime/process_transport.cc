// Between processes: the c10d group's send/recv (ProcessGroupGloo, host memory: a GPU's tensors
// are copied to the host to be sent and onto the GPU once received). The sending
// device's worker sends and waits until the tensor is out; the receiving process posts a receive
// for every tensor it expects at the start of each step, each on a thread of its own, which
// delivers the tensor as it arrives (arrival order depends on the sender's schedule, so no one
// receive may hold up another). A (tensor, destination device) pair is the message's tag, the
// same every step: steps do not overlap, since a step ends only after all its sends are out.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <atomic>
#include <thread>

#include "runtime/executor.h"
#include "runtime/processes.h"
#include "runtime/transport.h"

#ifdef PLACER_WITH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#endif

namespace placer::runtime {
namespace {

// A received tensor onto GPU `index`, complete before the GPU's worker reads it on its own stream.
at::Tensor ToGpu(const at::Tensor& host, int index) {
#ifdef PLACER_WITH_CUDA
  c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(index));
  at::Tensor value = host.to(at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(index)));
  c10::cuda::device_synchronize();
  return value;
#else
  (void)host;
  throw StepFailure(fmt::format("a tensor for cuda:{}: this placer was built without CUDA", index));
#endif
}

class ProcessTransport final : public Transport {
 public:
  ProcessTransport(const CrossProcess& cross, int num_devices)
      : cross_(cross), num_devices_(num_devices) {}

  ~ProcessTransport() override { Join(); }

  at::Tensor Copy(const at::Tensor& value, int, int to, graph::TensorId t) override {
    // Gloo sends host memory: a GPU's tensor is copied out first (synchronously).
    std::vector<at::Tensor> message = {value.to(at::kCPU).contiguous()};
    cross_.processes->group
        ->send(message, cross_.device_process[static_cast<size_t>(to)], Tag(t, to))
        ->wait();
    return {};  // the value lives in the other process
  }

  void BeginStep(const Deliver& deliver, const Fail& fail) override {
    Join();
    arrived_ = 0;
    for (const Incoming& in : cross_.incoming) {
      receivers_.emplace_back([this, &in, deliver, fail] {
        std::vector<at::Tensor> message = {at::empty(
            in.shape,
            at::TensorOptions().dtype(in.dtype == graph::DType::kInt64 ? at::kLong : at::kFloat))};
        try {
          cross_.processes->group->recv(message, in.from_process, Tag(in.t, in.to))->wait();
        } catch (const std::exception& e) {
          ++arrived_;
          fail(fmt::format("receiving from process {}: {}", in.from_process, e.what()));
          return;
        }
        ++arrived_;
        try {
          if (in.cuda_index >= 0) {
            message[0] = ToGpu(message[0], in.cuda_index);
          }
          deliver(in.t, in.to, std::move(message[0]));
        } catch (const std::exception& e) {
          fail(e.what());
        }
      });
    }
  }

  bool EndStep() override {
    if (arrived_ != static_cast<int>(receivers_.size())) return false;
    Join();
    return true;
  }

 private:
  int Tag(graph::TensorId t, int to) const { return t * num_devices_ + to; }

  void Join() {
    for (std::thread& receiver : receivers_) receiver.join();
    receivers_.clear();
  }

  const CrossProcess cross_;
  const int num_devices_;
  std::vector<std::thread> receivers_;
  std::atomic<int> arrived_{0};
};

}  // namespace

std::unique_ptr<Transport> MakeProcessTransport(const CrossProcess& cross, int num_devices) {
  return std::make_unique<ProcessTransport>(cross, num_devices);
}

}  // namespace placer::runtime
