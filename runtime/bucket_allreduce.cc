#include "runtime/bucket_allreduce.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>

#include "runtime/processes.h"

#ifdef PLACER_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace placer::runtime {
namespace {

// NCCL's allreduce of `message` on GPU `device`, complete on return: Work::wait() only makes the
// current stream wait, and the devices' workers read the result on streams of their own.
void AllReduceOnGpu(c10d::Backend& nccl, std::vector<at::Tensor>& message, at::Device device) {
#ifdef PLACER_WITH_CUDA
  c10::cuda::CUDAGuard guard(device);
  c10::cuda::getCurrentCUDAStream(device.index()).synchronize();  // the local sum is done
  nccl.allreduce(message)->wait();
  c10::cuda::getCurrentCUDAStream(device.index()).synchronize();
#else
  (void)nccl;
  (void)message;
  throw std::runtime_error(
      fmt::format("{}: this placer was built without CUDA, so without NCCL", device.str()));
#endif
}

}  // namespace

BucketAllReduce::BucketAllReduce(std::shared_ptr<const Processes> processes,
                                 std::vector<Bucket> buckets)
    : processes_(std::move(processes)), buckets_(std::move(buckets)) {}

BucketAllReduce::~BucketAllReduce() {
  Abort();
  if (thread_.joinable()) thread_.join();
}

void BucketAllReduce::BeginStep(Ready ready, Fail fail) {
  if (thread_.joinable()) thread_.join();
  {
    std::lock_guard lock(mutex_);
    contributions_.assign(buckets_.size(), {});
    results_.assign(buckets_.size(), at::Tensor());
    aborted_ = false;
    done_ = false;
  }
  thread_ = std::thread([this, ready = std::move(ready), fail = std::move(fail)] {
    Communicate(ready, fail);
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    finished_.notify_all();
  });
}

void BucketAllReduce::Contribute(int bucket, const at::Tensor& value) {
  {
    std::lock_guard lock(mutex_);
    contributions_[static_cast<size_t>(bucket)].push_back(value);
  }
  contributed_.notify_one();
}

at::Tensor BucketAllReduce::Result(int bucket) const {
  std::lock_guard lock(mutex_);
  return results_[static_cast<size_t>(bucket)];
}

void BucketAllReduce::Abort() {
  {
    std::lock_guard lock(mutex_);
    aborted_ = true;
  }
  contributed_.notify_all();
}

bool BucketAllReduce::EndStep(double grace_seconds) {
  {
    std::unique_lock lock(mutex_);
    if (!finished_.wait_for(lock, std::chrono::duration<double>(std::max(0.0, grace_seconds)),
                            [&] { return done_; })) {
      return false;
    }
  }
  if (thread_.joinable()) thread_.join();
  return true;
}

void BucketAllReduce::Communicate(const Ready& ready, const Fail& fail) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    const Bucket& bucket = buckets_[b];
    std::vector<at::Tensor> local;
    {
      std::unique_lock lock(mutex_);
      contributed_.wait(lock, [&] {
        return aborted_ || static_cast<int>(contributions_[b].size()) == bucket.local_members;
      });
      if (aborted_) return;
      local = std::move(contributions_[b]);
    }
    try {
      // This process's replicas first (DDP's local reduction), then across processes. A process
      // without a replica of the bucket adds zeros: the group's allreduce needs every rank.
      const at::Device where = bucket.on_gpus ? bucket.device : at::Device(at::kCPU);
      at::Tensor sum;
      if (local.empty()) {
        sum = at::zeros({bucket.elements}, at::TensorOptions().dtype(at::kFloat).device(where));
      } else {
        sum = local[0].to(where).clone(at::MemoryFormat::Contiguous);
        for (size_t i = 1; i < local.size(); ++i) sum.add_(local[i].to(where));
      }
      std::vector<at::Tensor> message = {sum};
      if (bucket.on_gpus) {
        AllReduceOnGpu(*processes_->gpu_group, message, where);
      } else {
        processes_->group->allreduce(message)->wait();
      }
      {
        std::lock_guard lock(mutex_);
        results_[b] = message[0];
      }
      ready(static_cast<int>(b));
    } catch (const std::exception& e) {
      fail(fmt::format("all-reducing gradient bucket {} of {} across processes: {}", b,
                       buckets_.size(), e.what()));
      return;
    }
  }
}

}  // namespace placer::runtime
