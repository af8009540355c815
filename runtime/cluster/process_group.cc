#include "runtime/cluster/process_group.h"

#include <fmt/format.h>

#include <cstdlib>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "runtime/cluster/store.h"

#ifdef PLACER_WITH_CUDA
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace placer::cluster {
namespace {

std::string Variable(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') {
    throw ClusterError(
        fmt::format("cluster: {} is not set (torchrun's MASTER_ADDR, MASTER_PORT, "
                    "WORLD_SIZE and RANK name the rendezvous)",
                    name));
  }
  return value;
}

int IntVariable(const char* name, int minimum) {
  const std::string text = Variable(name);
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size() && value >= minimum) return value;
  } catch (const std::exception&) {
  }
  throw ClusterError(fmt::format("cluster: {}='{}' is not an integer >= {}", name, text, minimum));
}

bool IsLoopback(const std::string& host) { return host == "localhost" || host.starts_with("127."); }

}  // namespace

Rendezvous RendezvousFromEnvironment() {
  Rendezvous r;
  r.master_addr = Variable("MASTER_ADDR");
  r.master_port = IntVariable("MASTER_PORT", 1);
  r.world_size = IntVariable("WORLD_SIZE", 1);
  r.rank = IntVariable("RANK", 0);
  if (r.rank >= r.world_size) {
    throw ClusterError(
        fmt::format("cluster: RANK={} is not below WORLD_SIZE={}", r.rank, r.world_size));
  }
  return r;
}

c10::intrusive_ptr<c10d::Backend> ConnectGloo(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int world_size,
                                              const std::string& master_addr,
                                              std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  try {
    if (const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
        interface != nullptr && *interface != '\0') {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(interface));
    } else if (IsLoopback(master_addr)) {
      options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else {
      options->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    // The group's keys apart from the evaluation pool's, should both share a store.
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("placer/gloo", store);
    return c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, rank, world_size, options);
  } catch (const std::exception& error) {
    throw ClusterError(fmt::format(
        "cluster: rank {} of {} could not form the Gloo group within {:.0f} s: {}", rank,
        world_size, std::chrono::duration<double>(timeout).count(), error.what()));
  }
}

c10::intrusive_ptr<c10d::Backend> ConnectNccl(const c10::intrusive_ptr<c10d::Store>& store,
                                              int rank, int world_size,
                                              std::chrono::milliseconds timeout) {
#ifdef PLACER_WITH_CUDA
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  try {
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("placer/nccl", store);
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(prefixed, rank, world_size, options);
  } catch (const std::exception& error) {
    throw ClusterError(fmt::format("cluster: rank {} of {} could not form the NCCL group: {}", rank,
                                   world_size, error.what()));
  }
#else
  (void)store;
  (void)timeout;
  throw ClusterError(fmt::format(
      "cluster: rank {} of {}: this placer was built without CUDA (PLACER_WITH_CUDA=OFF), so "
      "without NCCL: it cannot place on GPUs of several processes",
      rank, world_size));
#endif
}

ProcessGroups JoinProcessGroups(const Rendezvous& rendezvous, std::chrono::milliseconds timeout,
                                bool with_nccl) {
  c10::intrusive_ptr<c10d::Store> store;
  if (rendezvous.rank == 0) {
    // Every interface, as torchrun's store listens: MASTER_ADDR is how the others name this
    // host, which need not resolve here to the interface they reach.
    store = HostStore("0.0.0.0", rendezvous.master_port, timeout);
  } else {
    store = JoinStore(rendezvous.master_addr, rendezvous.master_port, timeout);
  }
  ProcessGroups groups;
  groups.gloo =
      ConnectGloo(store, rendezvous.rank, rendezvous.world_size, rendezvous.master_addr, timeout);
  if (with_nccl) {
    groups.nccl = ConnectNccl(store, rendezvous.rank, rendezvous.world_size, timeout);
  }
  return groups;
}

c10::intrusive_ptr<c10d::Backend> JoinGlooGroup(const Rendezvous& rendezvous,
                                                std::chrono::milliseconds timeout) {
  return JoinProcessGroups(rendezvous, timeout, /*with_nccl=*/false).gloo;
}

}  // namespace placer::cluster
