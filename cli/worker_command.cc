#include "cli/worker_command.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <memory>
#include <tuple>

#include "graph/device.h"
#include "placer/config/config.h"
#include "placer/setup/worker_evaluators.h"
#include "proto/message_auth.h"
#include "runtime/cluster/process_group.h"
#include "runtime/cluster/store.h"
#include "runtime/cluster/worker_loop.h"
#include "runtime/processes.h"

namespace placer::cli {
namespace {

// A flag's value, else the environment variable torchrun sets; `what` names both when neither.
std::string Setting(const std::string& flag_value, const char* variable, const char* flag) {
  if (!flag_value.empty()) return flag_value;
  if (const char* value = std::getenv(variable); value != nullptr && *value != '\0') return value;
  throw InputError(fmt::format("placer worker: no {} given: pass {} or set {} (as torchrun does)",
                               variable, flag, variable));
}

int ToInt(const std::string& text, const char* variable) {
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("placer worker: {} must be an integer, got '{}'", variable, text));
}

// The key, as --key-file, PLACER_CLUSTER_KEY_FILE or PLACER_CLUSTER_KEY give it (in that
// order), and where it comes from. The file is read once the search answers: a search writes the
// key it generates before it listens.
std::pair<std::function<proto::ClusterKey()>, std::string> KeyOf(const Commands& c) {
  std::string file = c.key_file;
  if (const char* value = std::getenv("PLACER_CLUSTER_KEY_FILE"); file.empty() && value)
    file = value;
  if (!file.empty()) {
    return {[file] { return proto::ClusterKey::ReadFile(file); }, file};
  }
  if (const char* hex = std::getenv("PLACER_CLUSTER_KEY"); hex != nullptr && *hex != '\0') {
    try {
      const proto::ClusterKey key = proto::ClusterKey::FromHex(hex, "PLACER_CLUSTER_KEY");
      return {[key] { return key; }, "PLACER_CLUSTER_KEY"};
    } catch (const proto::KeyError& error) {
      throw InputError(fmt::format("placer worker: {}", error.what()));
    }
  }
  throw InputError(
      "placer worker: no cluster key: pass --key-file with the search's key (its "
      "cluster.key_file, or the cluster.key it writes into its output directory), or set "
      "PLACER_CLUSTER_KEY_FILE or PLACER_CLUSTER_KEY");
}

}  // namespace

int RunWorkerCommand(const Commands& c) {
  cluster::WorkerEndpoint endpoint;
  endpoint.host = Setting(c.master_addr, "MASTER_ADDR", "--master-addr");
  endpoint.port = ToInt(Setting(c.master_port, "MASTER_PORT", "--master-port"), "MASTER_PORT");
  endpoint.world_size = ToInt(Setting(c.world_size, "WORLD_SIZE", "--world-size"), "WORLD_SIZE");
  endpoint.rank = ToInt(Setting(c.rank, "RANK", "--rank"), "RANK");
  endpoint.connect_timeout_seconds = c.worker_timeout_seconds;
  std::tie(endpoint.key, endpoint.key_source) = KeyOf(c);
  // One intra-op thread: on a machine shared by several workers, OpenMP's spinning threads would
  // take the cores from the others (the MeasuredEvaluator sets each CPU device's own threads).
  at::set_num_threads(1);
  try {
    cluster::ServeWorker(
        endpoint,
        [](const std::string& text, const std::string& path) {
          auto evaluators =
              std::make_shared<setup::WorkerEvaluators>(config::ConfigFromText(text, path));
          return [evaluators](const proto::EvaluationTask& task) {
            return evaluators->Evaluate(task);
          };
        },
        std::cout);
  } catch (const proto::KeyError& error) {
    throw InputError(fmt::format("placer worker: {}", error.what()));
  } catch (const cluster::KeyMismatch& error) {
    throw InputError(
        fmt::format("placer worker: rank {} refused: {}", endpoint.rank, error.what()));
  }
  return kExitOk;
}

std::shared_ptr<const runtime::Processes> JoinProcessesOf(const graph::DeviceSet& devices) {
  const bool across = std::any_of(devices.begin(), devices.end(), [](const graph::Device& d) {
    return graph::DeviceProcess(d.name) >= 0;
  });
  if (!across) return nullptr;
  const cluster::Rendezvous rendezvous = cluster::RendezvousFromEnvironment();
  // GPUs of this process: their buckets may all-reduce over NCCL (runtime/bucket_allreduce.h).
  const bool gpus = std::any_of(devices.begin(), devices.end(), [&](const graph::Device& d) {
    return graph::DeviceProcess(d.name) == rendezvous.rank && d.type == graph::DeviceType::kCuda;
  });
  std::cout << fmt::format("process {} of {}: joining the Gloo{} group at {}:{}\n", rendezvous.rank,
                           rendezvous.world_size, gpus ? " and NCCL" : "", rendezvous.master_addr,
                           rendezvous.master_port);
  cluster::ProcessGroups groups =
      cluster::JoinProcessGroups(rendezvous, std::chrono::seconds(300), gpus);
  return std::make_shared<runtime::Processes>(
      runtime::Processes{std::move(groups.gloo), std::move(groups.nccl)});
}

}  // namespace placer::cli
