// A tensor between two processes on this machine (c10d send/recv over ProcessGroupGloo, what the
// executor's process transport does) against a copy within one process (the in-process CPU
// transport's clone), for 1, 16 and 256 MiB of floats.
//   cross-process: rank 0 sends, rank 1 receives and sends it back; one transfer is half the
//                  round trip (the same bytes, both directions). Every receive fills a fresh
//                  tensor, as the process transport's do (and as every clone is fresh).
//   in-process:    at::Tensor::clone on rank 0, interleaved with the round trips
//   allreduce:     then ProcessGroupGloo::allreduce of the same bytes as one flat gradient bucket
//                  (what the executor does per bucket of a data-parallel step across processes:
//                  runtime/bucket_allreduce.h), timed on rank 0 from call to completion
// Medians over repeats with min-max. Both processes use one intra-op thread.
// Usage: transport_bench [repeats=10]   (starts its two processes itself on 127.0.0.1)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "runtime/cluster/process_group.h"
#include "runtime/cluster/store.h"

namespace {

using namespace placer;
using bench::Clock;
using bench::Median;

constexpr int64_t kMiB = 1 << 20;

std::string Summary(std::vector<double> seconds, int64_t bytes) {
  std::sort(seconds.begin(), seconds.end());
  const double median = Median(seconds);
  return fmt::format("{:>9.3f} ms ({:.3f}-{:.3f}) {:>6.2f} GB/s", median * 1e3,
                     seconds.front() * 1e3, seconds.back() * 1e3,
                     static_cast<double>(bytes) / median / 1e9);
}

int RunRank(int repeats) {
  at::set_num_threads(1);
  const cluster::Rendezvous rendezvous = cluster::RendezvousFromEnvironment();
  auto group = cluster::JoinGlooGroup(rendezvous, std::chrono::seconds(60));
  const int peer = 1 - rendezvous.rank;
  if (rendezvous.rank == 0) {
    fmt::print("transport_bench: {} repeats (1 warm-up), median (min-max) per transfer\n", repeats);
    fmt::print("{:>8}  {:<40}  {:<40}  {:>8}  {}\n", "MiB", "in-process copy (clone)",
               "cross-process Gloo send/recv (RTT/2)", "ratio", "Gloo allreduce of a bucket");
  }
  int tag = 0;
  for (int64_t mib : {1, 16, 256}) {
    const int64_t bytes = mib * kMiB;
    std::vector<at::Tensor> message = {at::randn({bytes / 4}, at::kFloat)};
    std::vector<double> copies, transfers;
    for (int repeat = 0; repeat <= repeats; ++repeat) {
      if (rendezvous.rank == 0) {
        auto begin = Clock::now();
        at::Tensor copy = message[0].clone();
        const double copy_seconds = bench::SecondsSince(begin);
        begin = Clock::now();
        group->send(message, peer, tag)->wait();
        std::vector<at::Tensor> back = {at::empty_like(message[0])};
        group->recv(back, peer, tag)->wait();
        const double round_trip = bench::SecondsSince(begin);
        if (repeat > 0) {
          copies.push_back(copy_seconds);
          transfers.push_back(round_trip / 2);
        }
      } else {
        std::vector<at::Tensor> received = {at::empty_like(message[0])};
        group->recv(received, peer, tag)->wait();
        group->send(received, peer, tag)->wait();
      }
    }
    ++tag;
    std::vector<double> all_reduces;
    for (int repeat = 0; repeat <= repeats; ++repeat) {
      std::vector<at::Tensor> bucket = {message[0].clone()};
      auto begin = Clock::now();
      group->allreduce(bucket)->wait();
      if (repeat > 0) all_reduces.push_back(bench::SecondsSince(begin));
    }
    if (rendezvous.rank == 0) {
      std::vector<double> ratios;
      for (size_t i = 0; i < copies.size(); ++i) ratios.push_back(transfers[i] / copies[i]);
      fmt::print("{:>8}  {:<40}  {:<40}  {:>7.1f}x  {}\n", mib, Summary(copies, bytes),
                 Summary(transfers, bytes), Median(ratios), Summary(all_reduces, bytes));
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::stoi(argv[1]) : 10;
  try {
    if (std::getenv("RANK") != nullptr) return RunRank(repeats);
    // Start both ranks, torchrun-style, on a port the store's host picks now.
    int port = 0;
    {
      auto probe = cluster::HostStore("127.0.0.1", 0, std::chrono::seconds(10));
      port = probe->getPort();
    }
    std::vector<pid_t> children;
    for (int rank = 0; rank < 2; ++rank) {
      pid_t pid = fork();
      if (pid == 0) {
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        setenv("WORLD_SIZE", "2", 1);
        setenv("RANK", std::to_string(rank).c_str(), 1);
        setenv("OMP_NUM_THREADS", "1", 1);
        execl("/proc/self/exe", argv[0], std::to_string(repeats).c_str(), nullptr);
        _exit(127);
      }
      children.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    return failed == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "transport_bench: {}\n", e.what());
    return 1;
  }
}
