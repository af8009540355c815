// Measured evaluations per second through a pool of `placer worker` processes on this host:
// 1 worker against 2 (or the counts given), interleaved, repeated, median and range. Each trial
// starts fresh workers, lets each build its model and measure once untimed, then times a batch.
//
//   build/bench/cluster_bench [--config FILE] [--workers 1,2] [--tasks 16] [--repeats 5]
//                             [--kind measured|simulated]
//
// The config's devices are each worker's; with 2 cores, one cpu device per worker. Every message
// is sealed (proto/message_auth.h), as in a search; bench/cluster_ab.py runs this bench of two
// builds side by side (with and without the seals, say).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/arguments.h"
#include "bench/timing.h"
#include "graph/device.h"
#include "placer/config/config.h"
#include "placer/setup/devices.h"
#include "placer/setup/model_factory.h"
#include "runtime/cluster/worker_pool.h"

namespace {

namespace fs = std::filesystem;
using placer::bench::Clock;
using placer::bench::Median;
using placer::bench::SecondsSince;

pid_t StartWorker(int port, int world_size, int rank, const fs::path& key_file) {
  std::fflush(nullptr);  // or the child would print what this process has buffered
  const pid_t pid = fork();
  if (pid == 0) {
    FILE* out = std::freopen("/dev/null", "w", stdout);
    (void)out;
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
    setenv("WORLD_SIZE", std::to_string(world_size).c_str(), 1);
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("PLACER_CLUSTER_KEY_FILE", key_file.c_str(), 1);
    std::string binary = PLACER_BINARY;
    std::string worker = "worker";
    char* argv[] = {binary.data(), worker.data(), nullptr};
    execv(binary.c_str(), argv);
    _exit(127);
  }
  return pid;
}

// Evaluations per second of `tasks` measured placements on `workers` fresh workers.
double Trial(const placer::config::Config& config, const std::string& text, int workers, int tasks,
             placer::graph::EvaluatorKind kind) {
  const placer::graph::DeviceSet devices = placer::setup::ResolveDevices(config);
  const placer::graph::Graph graph = placer::setup::BuildSingleModel(config);
  const placer::graph::Placement placement =
      placer::graph::Placement::AllOn(graph, placer::graph::DeviceNames(devices), 0);
  double rate = 0;
  std::vector<pid_t> pids;
  const fs::path key_file =
      fs::temp_directory_path() / fmt::format("cluster_bench.{}.key", getpid());
  const placer::proto::ClusterKey key = placer::proto::ClusterKey::Generate();
  key.WriteFile(key_file);
  {
    placer::cluster::WorkerPool pool({.port = 0,
                                      .key = key,
                                      .workers = workers,
                                      .config_text = text,
                                      .config_path = fs::absolute(config.source).string()});
    for (int rank = 1; rank <= workers; ++rank) {
      pids.push_back(StartWorker(pool.port(), workers + 1, rank, key_file));
    }
    // Untimed: every worker builds its model and executor and measures once.
    pool.Evaluate(
        std::vector<placer::cluster::PoolTask>(static_cast<size_t>(workers), {kind, 1, placement}));
    const auto start = Clock::now();
    const auto results = pool.Evaluate(
        std::vector<placer::cluster::PoolTask>(static_cast<size_t>(tasks), {kind, 1, placement}));
    rate = tasks / SecondsSince(start);
    for (const auto& r : results) {
      if (!r.valid) throw std::runtime_error("invalid evaluation: " + r.invalid_reason);
    }
  }
  for (pid_t pid : pids) waitpid(pid, nullptr, 0);
  fs::remove(key_file);
  return rate;
}

double LoadAverage() {
  double load[1] = {0};
  getloadavg(load, 1);
  return load[0];
}

}  // namespace

int main(int argc, char** argv) {
  fs::path config_file = fs::path(PLACER_SOURCE_DIR) / "bench" / "cluster_bench.yaml";
  std::vector<int> counts = {1, 2};
  int tasks = 16, repeats = 5;
  placer::graph::EvaluatorKind kind = placer::graph::EvaluatorKind::kMeasured;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--config") {
      config_file = value;
    } else if (flag == "--workers") {
      counts = placer::bench::IntList(value);
    } else if (flag == "--tasks") {
      tasks = std::stoi(value);
    } else if (flag == "--repeats") {
      repeats = std::stoi(value);
    } else if (flag == "--kind") {
      const std::optional<placer::graph::EvaluatorKind> parsed =
          placer::graph::ParseEvaluatorKind(value);
      if (!parsed) {
        std::cerr << fmt::format("--kind: '{}' is none of {}\n", value,
                                 fmt::join(placer::graph::kEvaluatorKindNames, ", "));
        return 2;
      }
      kind = *parsed;
    } else {
      std::cerr << "unknown flag " << flag << '\n';
      return 2;
    }
  }
  const placer::config::Config config = placer::config::LoadConfig(config_file);
  std::ifstream in(config_file);
  const std::string text{std::istreambuf_iterator<char>(in), {}};
  std::cout << fmt::format(
      "cluster_bench: {} {} evaluations of {} (every op on {}) per trial, workers {}, {} "
      "repeats interleaved; load before {:.2f}\n",
      tasks, placer::graph::ToString(kind), config.model.name(),
      config.devices.devices.front().name, fmt::join(counts, "/"), repeats, LoadAverage());
  std::map<int, std::vector<double>> rates;
  for (int r = 0; r < repeats; ++r) {
    // Alternate the order, so that neither count always runs first.
    std::vector<int> order = counts;
    if (r % 2 == 1) std::reverse(order.begin(), order.end());
    for (int workers : order) {
      const double rate = Trial(config, text, workers, tasks, kind);
      rates[workers].push_back(rate);
      std::cout << fmt::format("repeat {} workers {}: {:.2f} evaluations/s (load {:.2f})\n", r + 1,
                               workers, rate, LoadAverage())
                << std::flush;
    }
  }
  for (int workers : counts) {
    const auto [low, high] = std::minmax_element(rates[workers].begin(), rates[workers].end());
    std::cout << fmt::format("workers {}: median {:.2f} evaluations/s (range {:.2f}-{:.2f})\n",
                             workers, Median(rates[workers]), *low, *high);
  }
  if (counts.size() >= 2) {
    std::vector<double> ratios;
    for (int r = 0; r < repeats; ++r) {
      ratios.push_back(rates[counts[1]][r] / rates[counts[0]][r]);
    }
    const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
    std::cout << fmt::format(
        "speed-up {} vs {} workers: median {:.2f}x (range {:.2f}-{:.2f}x, "
        "per repeat)\n",
        counts[1], counts[0], Median(ratios), *low, *high);
  }
  return 0;
}
