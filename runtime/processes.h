// The processes of a placement across processes (ExecutorOptions::processes): the c10d group
// (ProcessGroupGloo on CPU, runtime/cluster/process_group.h forms it) whose send/recv carries
// tensors between them. Devices named "w<k>/..." belong to the process of rank k.
#pragma once

#include <torch/csrc/distributed/c10d/Backend.hpp>

namespace placer::runtime {

struct Processes {
  c10::intrusive_ptr<c10d::Backend> group;
  int rank() const { return group->getRank(); }
};

}  // namespace placer::runtime
