// Gradient buckets whose replicas span processes, all-reduced as PyTorch DDP does: each process
// sums its own replicas' contributions to a bucket, then one c10d allreduce of the flat bucket
// (ProcessGroupGloo's ring on CPU tensors, NCCL's where every member is a GPU) sums the
// processes' partial sums; every replica reads
// the result. Buckets are all-reduced in their index order on every process (a communication
// thread of their own), as c10d requires collectives to be issued in the same order everywhere;
// a bucket that is complete early waits for the ones before it, as in DDP.
//
// The graph keeps the bucket's ring of ops (graph/training_step.h), which the simulator prices hop
// by hop; the executor runs its member m's split op as "contribute" and its concat op as
// "collect" (graph::kAllReduceBucket tags them) and skips the hops in between.
#pragma once

#include <ATen/core/Tensor.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace placer::runtime {

struct Processes;

class BucketAllReduce {
 public:
  struct Bucket {
    int64_t elements = 0;   // of the flat float bucket
    int local_members = 0;  // replicas in this process: contributions to wait for (0: adds zeros)
    // Every member on a GPU and one in each process: summed on `device` (this process's first
    // member's GPU) and all-reduced by NCCL (Processes::gpu_group). Otherwise by Gloo, in host
    // memory.
    bool on_gpus = false;
    at::Device device = at::kCPU;
  };
  BucketAllReduce(std::shared_ptr<const Processes> processes, std::vector<Bucket> buckets);
  ~BucketAllReduce();
  BucketAllReduce(const BucketAllReduce&) = delete;
  BucketAllReduce& operator=(const BucketAllReduce&) = delete;

  // Bucket b's sum over every replica of every process is ready: Result(b) holds it.
  using Ready = std::function<void(int bucket)>;
  using Fail = std::function<void(const std::string& message)>;
  // Starts the step's communication thread; it calls `ready` or `fail` from that thread.
  void BeginStep(Ready ready, Fail fail);
  // A local replica's flat gradient for `bucket` (called by its device's worker; never blocks).
  void Contribute(int bucket, const at::Tensor& value);
  // After Ready(bucket): the summed flat bucket (on the CPU, or Bucket::device; complete; readers
  // must not modify it).
  at::Tensor Result(int bucket) const;
  // The step failed: stop waiting for contributions.
  void Abort();
  // After the step: true once the thread is done, waiting up to `grace_seconds` for it; false
  // while it still waits inside an allreduce (a failed step whose peers never came): the caller
  // must then abandon this object.
  bool EndStep(double grace_seconds);
  int num_buckets() const { return static_cast<int>(buckets_.size()); }

 private:
  void Communicate(const Ready& ready, const Fail& fail);

  const std::shared_ptr<const Processes> processes_;
  const std::vector<Bucket> buckets_;
  mutable std::mutex mutex_;
  std::condition_variable contributed_;
  std::condition_variable finished_;
  std::vector<std::vector<at::Tensor>> contributions_;  // per bucket, this step
  std::vector<at::Tensor> results_;
  bool aborted_ = false;
  bool done_ = true;
  std::thread thread_;
};

}  // namespace placer::runtime
