// Placements across processes (issue 17): two real processes on 127.0.0.1, each with one 1-thread
// CPU worker, joined torchrun-style into a Gloo group; tensors cross through c10d send/recv. Each
// case must train exactly as the same graph on one device of one process.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <thread>

#include "graph/training_step.h"
#include "runtime/device.h"
#include "tests/cross_process_cases.h"
#include "tests/placer_process.h"
#include "tests/temp_dir.h"
#include "tests/torch_support.h"

namespace placer {
namespace {

namespace fs = std::filesystem;
using runtime::TensorMap;

std::string ReadLog(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Starts cross_process::kProcesses processes of `binary` (empty: placer) with torchrun's
// variables on 127.0.0.1, rank k with `args(k)` and its output in dir/rank<k>.log; their exit
// codes. They finish within seconds; a hang (a tensor never received) is killed, and fails.
std::vector<int> RunRanks(const std::string& binary,
                          const std::function<std::vector<std::string>(int)>& args,
                          const fs::path& dir) {
  const int port = placer_test::FreePort();
  std::vector<pid_t> children;
  for (int rank = 0; rank < cross_process::kProcesses; ++rank) {
    placer_test::ChildOptions options;
    options.binary = binary;
    options.env = {{"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)},
                   {"WORLD_SIZE", std::to_string(cross_process::kProcesses)},
                   {"RANK", std::to_string(rank)},
                   {"OMP_NUM_THREADS", "1"}};
    children.push_back(
        placer_test::StartPlacer(args(rank), dir / fmt::format("rank{}.log", rank), options));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(180);
  std::vector<int> codes(children.size(), -1);
  for (size_t done = 0; done < children.size();) {
    for (size_t i = 0; i < children.size(); ++i) {
      if (codes[i] != -1) continue;
      int status = 0;
      if (waitpid(children[i], &status, WNOHANG) == children[i]) {
        codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        ++done;
      } else if (std::chrono::steady_clock::now() > deadline) {
        kill(children[i], SIGKILL);
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return codes;
}

// Runs case `name` in cross_process::kProcesses processes; the parameters they hold, together.
TensorMap RunAcrossProcesses(const std::string& name, const fs::path& dir) {
  const std::vector<int> codes = RunRanks(
      CROSS_PROCESS_STEP,
      [&](int rank) {
        return std::vector<std::string>{name, (dir / fmt::format("rank{}.bin", rank)).string()};
      },
      dir);
  TensorMap all;
  for (int rank = 0; rank < cross_process::kProcesses; ++rank) {
    const fs::path log = dir / fmt::format("rank{}.log", rank);
    EXPECT_EQ(codes[static_cast<size_t>(rank)], 0) << "rank " << rank << ":\n" << ReadLog(log);
    if (codes[static_cast<size_t>(rank)] != 0) continue;
    for (auto& [n, value] :
         cross_process::ReadParameters((dir / fmt::format("rank{}.bin", rank)).string())) {
      EXPECT_FALSE(all.count(n)) << n << " is held by two processes";
      all[n] = value;
    }
  }
  return all;
}

// The parameters after cross_process::kSteps steps of `c.graph` with every op on one device of
// this process, flattened as the processes write them.
TensorMap OneDevice(const cross_process::Case& c) {
  graph::DeviceSet one = {{"cpu:0", graph::DeviceType::kCpu, 0, 1, 0}};
  graph::Placement placement = graph::Placement::AllOn(c.graph, {"cpu:0"}, 0);
  runtime::Executor executor(c.graph, one, placement, c.parameters);
  for (int step = 0; step < cross_process::kSteps; ++step) executor.RunStep(c.batch);
  TensorMap flat;
  for (const auto& [name, value] : executor.Parameters()) flat[name] = value.flatten();
  return flat;
}

TEST(CrossProcessTest, APlacementSpanningTwoProcessesTrainsAsOneDevice) {
  test_support::TempDir dir("cross_process_split");
  cross_process::Case c = cross_process::Split();
  const TensorMap expected = OneDevice(c);
  // The step must have changed them, or the comparison would prove nothing.
  ASSERT_FALSE(at::allclose(expected.at("fc1.weight"), c.parameters.at("fc1.weight").flatten()));
  TensorMap actual = RunAcrossProcesses("split", dir.path());
  test_support::ExpectSameParameters(actual, expected, "split over w0 and w1", 1e-6);
}

// Runs data-parallel case `name` (every replica of `c`) across the processes: each replica must
// end with the one-device parameters, and no tensor may cross by send/recv: the gradients cross as
// c10d allreduces of buckets, not as the graph's ring of chunks.
void ExpectDataParallelTrainsAsOneDevice(const std::string& name, const cross_process::Case& c,
                                         double tolerance = 1e-6) {
  test_support::TempDir dir("cross_process_" + name);
  const TensorMap expected = OneDevice(cross_process::DataParallelReference());
  TensorMap actual = RunAcrossProcesses(name, dir.path());
  for (int r = 0; r < static_cast<int>(c.devices.size()); ++r) {
    TensorMap replica;
    for (const auto& [n, value] : expected) {
      auto it = actual.find(graph::ReplicaName(r, n));
      if (it != actual.end()) replica[n] = it->second;
    }
    test_support::ExpectSameParameters(replica, expected, fmt::format("{}: replica {}", name, r),
                                       tolerance);
  }
  for (int rank = 0; rank < cross_process::kProcesses; ++rank) {
    const std::string log = ReadLog(dir.path() / fmt::format("rank{}.log", rank));
    for (int step = 0; step < cross_process::kSteps; ++step) {
      const std::string line = fmt::format("rank {} step {}: ", rank, step);
      const size_t at = log.find(line);
      ASSERT_NE(at, std::string::npos) << log;
      const std::string rest = log.substr(at, log.find('\n', at) - at);
      EXPECT_NE(rest.find(", 0 bytes sent to other processes"), std::string::npos) << rest;
    }
  }
}

// Distinct gradient buckets of a replicated graph.
size_t Buckets(const graph::Graph& g) {
  std::set<int64_t> buckets;
  for (const graph::Op& op : g.ops()) {
    if (op.attrs.Has(std::string(graph::kAllReduceBucket))) {
      buckets.insert(op.attrs.GetInt(std::string(graph::kAllReduceBucket)));
    }
  }
  return buckets.size();
}

TEST(CrossProcessTest, DataParallelAcrossTwoProcessesTrainsAsOneDevice) {
  const cross_process::Case c = cross_process::DataParallel();
  EXPECT_EQ(Buckets(c.graph), 1u);  // LeNet's gradients fit DDP's default 25 MiB
  ExpectDataParallelTrainsAsOneDevice("data_parallel", c);
}

// Two replicas in each process: each process sums its two replicas' buckets, then allreduces.
TEST(CrossProcessTest, TwoReplicasPerProcessTrainAsOneDevice) {
  const cross_process::Case c = cross_process::DataParallel(2);
  ASSERT_EQ(c.devices.size(), 4u);
  ExpectDataParallelTrainsAsOneDevice("data_parallel_2x2", c);
}

// Buckets small enough to cut LeNet's gradients into several: each is its own allreduce, and a
// gradient in the wrong bucket, or a bucket left out, changes the parameters.
TEST(CrossProcessTest, SeveralBucketsTrainAsOneDevice) {
  const cross_process::Case c = cross_process::DataParallel(1, cross_process::kSmallBucketBytes);
  EXPECT_EQ(Buckets(c.graph), 3u);
  ExpectDataParallelTrainsAsOneDevice("data_parallel_small_buckets", c);
}

// One GPU per process, the buckets all-reduced by ProcessGroupNCCL. Needs two GPUs; where there
// are fewer, it is skipped, and says so: NCCL across processes is then only compiled.
TEST(CrossProcessTest, DataParallelOnGpusOfTwoProcessesTrainsAsOneDevice) {
  const int gpus = runtime::NumCudaDevicesPresent();
  if (gpus < cross_process::kProcesses) {
    GTEST_SKIP() << "NOT RUN: NCCL across processes needs " << cross_process::kProcesses
                 << " GPUs (one per process), this machine has " << gpus
                 << "; the NCCL path is compiled, not run";
  }
  const cross_process::Case c = cross_process::DataParallel(1, cross_process::kSmallBucketBytes,
                                                            cross_process::ProcessGpus());
  ExpectDataParallelTrainsAsOneDevice("data_parallel_gpus", c, 1e-4);
}

// The command line of docs/cluster.md: `placer evaluate --data-parallel` with devices of two
// processes, started once per process, measures the step in both.
TEST(CrossProcessTest, EvaluateRunsADataParallelStepAcrossProcesses) {
  test_support::TempDir dir("cross_process_evaluate");
  const fs::path config = dir.path() / "two_processes.yaml";
  std::ofstream(config) << "model:\n  builtin: lenet\n  batch_size: 32\n"
                           "devices:\n  - {name: w0/cpu:0, threads: 1}\n"
                           "  - {name: w1/cpu:0, threads: 1}\n"
                           "measurement:\n  warmup_steps: 1\n  timed_steps: 2\n";
  const std::vector<int> codes = RunRanks(
      "",
      [&](int) {
        return std::vector<std::string>{"evaluate", "--config", config.string(), "--data-parallel"};
      },
      dir.path());
  for (int rank = 0; rank < cross_process::kProcesses; ++rank) {
    const std::string log = ReadLog(dir.path() / fmt::format("rank{}.log", rank));
    EXPECT_EQ(codes[static_cast<size_t>(rank)], 0) << "rank " << rank << ":\n" << log;
    EXPECT_NE(log.find(fmt::format("process {} of 2", rank)), std::string::npos) << log;
    // Each process's table of devices has the worker it ran, and only that one.
    EXPECT_NE(log.find(fmt::format("\nw{}/cpu:0 ", rank)), std::string::npos) << log;
    EXPECT_EQ(log.find(fmt::format("\nw{}/cpu:0 ", 1 - rank)), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace placer
