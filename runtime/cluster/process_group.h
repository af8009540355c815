// The c10d process groups of a placement across processes: ProcessGroupGloo (CPU tensors) and,
// for GPUs, ProcessGroupNCCL over a c10d::TCPStore, rendezvoused the way torchrun does
// (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK). Only c10d's API is used; gloo's headers (Debian's
// libgloo-dev) are needed to compile this file, never its library: the torch wheel exports gloo's
// symbols itself.
#pragma once

#include <chrono>
#include <string>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace placer::cluster {

struct Rendezvous {
  std::string master_addr;  // where rank 0 hosts the store
  int master_port = 0;
  int world_size = 0;
  int rank = 0;
};

// From torchrun's variables; throws ClusterError naming a variable that is missing or malformed.
Rendezvous RendezvousFromEnvironment();

// The Gloo group of `world_size` processes over `store`, this one being `rank`. The address the
// others reach this process at, as PyTorch chooses it: the interface GLOO_SOCKET_IFNAME names,
// else 127.0.0.1 when `master_addr` is this machine's loopback, else this host's name. Throws
// ClusterError after `timeout` when a process does not come.
c10::intrusive_ptr<c10d::Backend> ConnectGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int world_size,
                                              const std::string& master_addr,
                                              std::chrono::milliseconds timeout);

// ProcessGroupNCCL over `store`, for the CUDA tensors of a placement across processes (devices
// "w<k>/cuda:N"): its communicators form on the first collective. Built only with
// PLACER_WITH_CUDA (the wheel's nvidia/nccl headers); without it, throws ClusterError.
c10::intrusive_ptr<c10d::Backend> ConnectNccl(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int world_size,
                                              std::chrono::milliseconds timeout);

struct ProcessGroups {
  c10::intrusive_ptr<c10d::Backend> gloo;  // CPU tensors
  c10::intrusive_ptr<c10d::Backend> nccl;  // CUDA tensors; null unless asked for
};

// Rank 0 hosts the store at master_addr:master_port, the others join it; then ConnectGloo, and
// ConnectNccl too when `with_nccl`.
ProcessGroups JoinProcessGroups(const Rendezvous& rendezvous, std::chrono::milliseconds timeout,
                                bool with_nccl);
// JoinProcessGroups without NCCL: the Gloo group.
c10::intrusive_ptr<c10d::Backend> JoinGlooGroup(const Rendezvous& rendezvous,
                                                std::chrono::milliseconds timeout);

}  // namespace placer::cluster
