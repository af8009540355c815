// The processes of a placement across processes (ExecutorOptions::processes): the c10d groups
// (ProcessGroupGloo on CPU, ProcessGroupNCCL on GPUs; runtime/cluster/process_group.h forms
// them). Gloo's send/recv carries tensors between them (GPU tensors through host memory). Devices
// named "w<k>/..." belong to the process of rank k.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace placer::runtime {

struct Processes {
  c10::intrusive_ptr<c10d::Backend> group;      // Gloo: CPU tensors (send/recv, allreduce)
  c10::intrusive_ptr<c10d::Backend> gpu_group;  // NCCL: the GPU buckets' allreduce; may be null
  int rank() const { return group->getRank(); }
};

}  // namespace placer::runtime
