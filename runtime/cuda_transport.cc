// To, from and between GPUs: each GPU's worker issues its ops on a stream of its own; a copy is
// issued on the destination's stream (the source's, device to host) after the producer's work,
// and the consumer waits on an event rather than blocking the sender. Built with
// PLACER_WITH_CUDA only; compiles without a GPU.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>

#include <optional>

#include "runtime/executor.h"
#include "runtime/transport.h"

namespace placer::runtime {
namespace {

// Events around each op on the stream, read after the step's synchronisation; `reference_`
// marks the stream's start, for the trace's start times.
class StreamOpTimer final : public OpTimer {
 public:
  StreamOpTimer(c10::cuda::CUDAStream stream, double reference_us)
      : stream_(stream), reference_us_(reference_us) {
    reference_.record(stream_);
  }
  void Begin() override {
    start_ = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    start_->record(stream_);
  }
  void End(size_t trace_index) override {
    auto end = std::make_unique<at::cuda::CUDAEvent>(cudaEventDefault);
    end->record(stream_);
    timed_.push_back({trace_index, std::move(start_), std::move(end)});
  }
  double Finish(std::vector<graph::TraceEvent>& trace) override {
    double busy_seconds = 0;
    for (const Timed& timed : timed_) {
      const double ms = timed.start->elapsed_time(*timed.end);
      busy_seconds += ms * 1e-3;
      if (timed.trace_index == kUntraced) continue;
      graph::TraceEvent& event = trace[timed.trace_index];
      event.start_us = reference_us_ + reference_.elapsed_time(*timed.start) * 1e3;
      event.duration_us = ms * 1e3;
    }
    return busy_seconds;
  }

 private:
  struct Timed {
    size_t trace_index;
    std::unique_ptr<at::cuda::CUDAEvent> start, end;
  };
  c10::cuda::CUDAStream stream_;
  double reference_us_;
  at::cuda::CUDAEvent reference_{cudaEventDefault};
  std::unique_ptr<at::cuda::CUDAEvent> start_;
  std::vector<Timed> timed_;
};

class CudaTransport final : public Transport {
 public:
  CudaTransport(const graph::DeviceSet& devices, int num_tensors) : devices_(devices) {
    streams_.assign(devices.size(), std::nullopt);
    for (size_t d = 0; d < devices.size(); ++d) {
      if (IsCuda(static_cast<int>(d))) {
        streams_[d] =
            c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(devices[d].index));
      }
    }
    ready_events_.assign(static_cast<size_t>(num_tensors),
                         std::vector<std::shared_ptr<at::cuda::CUDAEvent>>(devices.size()));
  }

  at::Tensor Copy(const at::Tensor& value, int from, int to, graph::TensorId t) override {
    const graph::Device& dst = devices_[static_cast<size_t>(to)];
    const int stream_device = IsCuda(to) ? to : from;
    c10::cuda::CUDAStream& stream = *streams_[static_cast<size_t>(stream_device)];
    c10::cuda::CUDAStreamGuard guard(stream);
    if (IsCuda(from)) {
      at::cuda::CUDAEvent producer_done;
      producer_done.record(*streams_[static_cast<size_t>(from)]);
      producer_done.block(stream);
    }
    at::Tensor copy;
    try {
      if (IsCuda(to)) {
        copy = value.to(TorchDevice(dst), /*non_blocking=*/true, /*copy=*/true);
      } else {
        copy = at::empty(value.sizes(), value.options().device(at::kCPU).pinned_memory(true));
        copy.copy_(value, /*non_blocking=*/true);
      }
    } catch (const c10::OutOfMemoryError& e) {
      // The sender's worker issues the copy, but the memory that ran out is the destination's.
      throw StepFailure(
          fmt::format("out of memory on {}: {}", dst.name, e.what_without_backtrace()));
    }
    if (IsCuda(from)) {
      c10::cuda::CUDACachingAllocator::recordStream(value.storage().data_ptr(), stream);
    }
    auto done = std::make_shared<at::cuda::CUDAEvent>();
    done->record(stream);
    ready_events_[static_cast<size_t>(t)][static_cast<size_t>(to)] = std::move(done);
    return copy;
  }

  void WaitFor(graph::TensorId t, int device) override {
    auto& event = ready_events_[static_cast<size_t>(t)][static_cast<size_t>(device)];
    if (!event) return;
    if (IsCuda(device)) {
      event->block(*streams_[static_cast<size_t>(device)]);
    } else {
      event->synchronize();
    }
  }

  void Forget(graph::TensorId t, int device) override {
    ready_events_[static_cast<size_t>(t)][static_cast<size_t>(device)].reset();
  }

  std::shared_ptr<void> EnterStep(int device) override {
    if (!IsCuda(device)) return nullptr;
    return std::make_shared<c10::cuda::CUDAStreamGuard>(*streams_[static_cast<size_t>(device)]);
  }

  std::unique_ptr<OpTimer> TimeOps(int device, double reference_us) override {
    if (!IsCuda(device)) return nullptr;
    return std::make_unique<StreamOpTimer>(*streams_[static_cast<size_t>(device)], reference_us);
  }

  void Synchronize(int device) override {
    if (IsCuda(device)) streams_[static_cast<size_t>(device)]->synchronize();
  }

  void Reset() override {
    for (auto& per_device : ready_events_) {
      for (auto& event : per_device) event.reset();
    }
    for (size_t d = 0; d < devices_.size(); ++d) Synchronize(static_cast<int>(d));
    c10::cuda::CUDACachingAllocator::emptyCache();
  }

 private:
  bool IsCuda(int device) const {
    return device >= 0 && devices_[static_cast<size_t>(device)].type == graph::DeviceType::kCuda;
  }

  const graph::DeviceSet devices_;
  std::vector<std::optional<c10::cuda::CUDAStream>> streams_;
  // [tensor][device]: the copy that made the value available, for consumers to wait on.
  std::vector<std::vector<std::shared_ptr<at::cuda::CUDAEvent>>> ready_events_;
};

}  // namespace

std::unique_ptr<Transport> MakeCudaTransport(const graph::DeviceSet& devices, int num_tensors) {
  return std::make_unique<CudaTransport>(devices, num_tensors);
}

}  // namespace placer::runtime
