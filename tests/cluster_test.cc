// A pool of real `placer worker` processes on 127.0.0.1 (cluster/worker_pool.h): the verdicts
// equal the local evaluators', a worker killed while it evaluates loses nothing, a worker that
// never comes is named within the join timeout, and `placer search` with a cluster: section ends
// exactly where the same search without one ends.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "cli/model_factory.h"
#include "graph/data_parallel.h"
#include "graph/micro_batches.h"
#include "placer/config/config.h"
#include "runtime/cluster/store.h"
#include "runtime/cluster/worker_pool.h"
#include "runtime/device.h"
#include "runtime/measured_evaluator.h"
#include "runtime/sim/simulated_evaluator.h"
#include "tests/placer_process.h"
#include "tests/temp_dir.h"

namespace placer {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string ReadFile(const fs::path& file) {
  std::ifstream in(file);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

using test_support::TempDir;

using placer_test::Wait;

pid_t Start(const std::vector<std::string>& args, const fs::path& log,
            std::map<std::string, std::string> env = {}) {
  return placer_test::StartPlacer(args, log, {.env = std::move(env)});
}

// Worker `rank`'s log in `dir`.
fs::path WorkerLog(const fs::path& dir, int rank) {
  fs::path log = dir / "worker";
  log += std::to_string(rank);
  return log;
}

pid_t StartWorker(int port, int world_size, int rank, const fs::path& log) {
  return Start({"worker"}, log,
               {{"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)},
                {"WORLD_SIZE", std::to_string(world_size)},
                {"RANK", std::to_string(rank)}});
}

// Workers still running at the end of a test (a failed assertion) are killed and reaped.
class Workers {
 public:
  void Add(pid_t pid) { pids_.push_back(pid); }
  int WaitAll() {
    int worst = 0;
    for (pid_t pid : pids_) worst = std::max(worst, Wait(pid));
    pids_.clear();
    return worst;
  }
  ~Workers() {
    for (pid_t pid : pids_) {
      kill(pid, SIGKILL);
      Wait(pid);
    }
  }

 private:
  std::vector<pid_t> pids_;
};

using placer_test::FreePort;

// A small LeNet on two 1-thread CPU workers: a measured step takes milliseconds.
constexpr const char* kConfig =
    "model:\n  builtin: lenet\n  batch_size: 32\n"
    "devices:\n  - {name: cpu:0, threads: 1}\n  - {name: cpu:1, threads: 1}\n"
    "measurement:\n  warmup_steps: 1\n  timed_steps: 2\n";

struct Fixture {
  TempDir dir{"placer_cluster_test"};
  fs::path config_file = dir.path() / "config.yaml";
  config::Config config;
  runtime::DeviceSet devices;
  std::vector<std::string> names;
  graph::Graph single, replicated;
  graph::MicroBatchedGraph pipelined;  // 4 micro-batches

  explicit Fixture(const std::string& extra = "") {
    std::ofstream(config_file) << kConfig << extra;
    config = config::LoadConfig(config_file);
    devices = runtime::ResolveDevices(config);
    names = runtime::DeviceNames(devices);
    single = cli::BuildSingleModel(config);
    replicated = graph::BuildDataParallel(cli::ForwardBuilderFor(config), config.model.batch_size,
                                          {"r0", "r1"}, {1.0, 1.0}, config.model.learning_rate)
                     .graph;
    pipelined = graph::BuildMicroBatched(cli::ForwardBuilderFor(config), config.model.batch_size, 4,
                                         config.model.learning_rate);
  }

  cluster::PoolOptions Options(int workers) const {
    return {.port = 0,
            .workers = workers,
            .join_timeout_seconds = 60,
            .heartbeat_timeout_seconds = 2,
            .config_text = ReadFile(config_file),
            .config_path = config_file.string()};
  }

  // Every op on one device, every other forward op on the other device, the replicas of the
  // replicated model one per device, and the alternating stages as a 1F1B pipeline of 4
  // micro-batches (the task carries M and the schedule; the worker builds the micro-batched step).
  std::vector<cluster::PoolTask> Tasks(const std::string& kind) const {
    std::vector<cluster::PoolTask> tasks;
    tasks.push_back({kind, 1, graph::Placement::AllOn(single, names, 0)});
    tasks.push_back({kind, 1, graph::Placement::AllOn(single, names, 1)});
    graph::Placement alternating = graph::Placement::AllOn(single, names, 0);
    int k = 0;
    for (int& device : alternating.device_of_op) {
      if (device >= 0) device = k++ % 2;
    }
    tasks.push_back({kind, 1, alternating});
    graph::Placement split = graph::Placement::AllOn(replicated, names, 0);
    for (graph::OpId id = 0; id < replicated.num_ops(); ++id) {
      int& device = split.device_of_op[static_cast<size_t>(id)];
      if (device >= 0 && replicated.op(id).name.starts_with("r1/")) device = 1;
    }
    tasks.push_back({kind, 2, split});
    tasks.push_back({kind, 1,
                     graph::PlaceMicroBatches(pipelined, single, alternating,
                                              graph::PipelineSchedule::kOneFOneB)});
    return tasks;
  }

  std::vector<runtime::EvaluationResult> Local(const std::vector<cluster::PoolTask>& tasks) const {
    std::unique_ptr<sim::CostModel> costs = cli::CostModelFor(config);
    std::vector<runtime::EvaluationResult> results;
    for (const cluster::PoolTask& task : tasks) {
      const graph::Graph& graph = task.placement.micro_batches > 1 ? pipelined.graph
                                  : task.replicas == 1             ? single
                                                                   : replicated;
      if (task.kind == "simulated") {
        results.push_back(sim::SimulatedEvaluator(graph, devices, *costs).Evaluate(task.placement));
      } else {
        results.push_back(
            runtime::MeasuredEvaluator(graph, devices, cli::MeasurementOptionsFor(config))
                .Evaluate(task.placement));
      }
    }
    return results;
  }
};

TEST(ClusterTest, PoolVerdictsEqualLocalOnes) {
  Fixture f;
  auto pool = std::make_shared<cluster::WorkerPool>(f.Options(2));
  Workers workers;
  for (int rank = 1; rank <= 2; ++rank) {
    workers.Add(StartWorker(pool->port(), 3, rank, WorkerLog(f.dir.path(), rank)));
  }
  // Simulated: the same numbers to the last bit.
  const std::vector<cluster::PoolTask> simulated = f.Tasks("simulated");
  const std::vector<runtime::EvaluationResult> local = f.Local(simulated);
  const std::vector<runtime::EvaluationResult> pooled = pool->Evaluate(simulated);
  ASSERT_EQ(pooled.size(), local.size());
  for (size_t i = 0; i < local.size(); ++i) {
    ASSERT_TRUE(local[i].valid) << local[i].invalid_reason;
    EXPECT_TRUE(pooled[i].valid) << pooled[i].invalid_reason;
    EXPECT_EQ(pooled[i].step_seconds, local[i].step_seconds) << "task " << i;
    ASSERT_EQ(pooled[i].devices.size(), local[i].devices.size());
    for (size_t d = 0; d < local[i].devices.size(); ++d) {
      EXPECT_EQ(pooled[i].devices[d].busy_seconds, local[i].devices[d].busy_seconds);
      EXPECT_EQ(pooled[i].devices[d].peak_memory_bytes, local[i].devices[d].peak_memory_bytes);
    }
    EXPECT_EQ(pooled[i].transfers.size(), local[i].transfers.size());
  }
  // Measured: times differ run to run, the training itself does not: the same loss after the
  // same steps, the same memory, the same transfers.
  const std::vector<cluster::PoolTask> measured = f.Tasks("measured");
  const std::vector<runtime::EvaluationResult> local_measured = f.Local(measured);
  const std::vector<runtime::EvaluationResult> pooled_measured = pool->Evaluate(measured);
  for (size_t i = 0; i < local_measured.size(); ++i) {
    ASSERT_TRUE(local_measured[i].valid) << local_measured[i].invalid_reason;
    ASSERT_TRUE(pooled_measured[i].valid) << pooled_measured[i].invalid_reason;
    EXPECT_EQ(pooled_measured[i].final_loss, local_measured[i].final_loss) << "task " << i;
    EXPECT_GT(pooled_measured[i].step_seconds, 0);
    EXPECT_EQ(pooled_measured[i].step_samples.size(), local_measured[i].step_samples.size());
    ASSERT_EQ(pooled_measured[i].transfers.size(), local_measured[i].transfers.size());
    for (size_t t = 0; t < local_measured[i].transfers.size(); ++t) {
      EXPECT_EQ(pooled_measured[i].transfers[t].bytes, local_measured[i].transfers[t].bytes);
    }
  }
  // A placement for another model is invalid with the reason, not a crash of the worker.
  cluster::PoolTask wrong = f.Tasks("simulated").front();
  wrong.placement.device_of_op.pop_back();
  const runtime::EvaluationResult refused = pool->Evaluate({wrong}).front();
  EXPECT_FALSE(refused.valid);
  EXPECT_THAT(refused.invalid_reason, HasSubstr("ops"));
  EXPECT_EQ(pool->live_workers(), 2);
  pool.reset();  // tells the workers to leave
  EXPECT_EQ(workers.WaitAll(), 0);
}

TEST(ClusterTest, AWorkerKilledWhileEvaluatingLosesNothing) {
  Fixture f;
  cluster::PoolOptions options = f.Options(2);
  std::map<int, pid_t> pid_of_rank;
  bool killed = false;
  // Rank 2 dies the moment it is handed its second placement: it holds one it will never judge.
  options.on_dispatch = [&](int rank, int handed) {
    if (rank == 2 && handed == 2 && !killed) {
      kill(pid_of_rank.at(2), SIGKILL);
      killed = true;
    }
  };
  auto pool = std::make_shared<cluster::WorkerPool>(options);
  Workers workers;
  for (int rank = 1; rank <= 2; ++rank) {
    pid_of_rank[rank] = StartWorker(pool->port(), 3, rank, WorkerLog(f.dir.path(), rank));
    workers.Add(pid_of_rank[rank]);
  }
  std::vector<cluster::PoolTask> tasks = f.Tasks("measured");
  const std::vector<cluster::PoolTask> more = f.Tasks("measured");
  tasks.insert(tasks.end(), more.begin(), more.end());
  const std::vector<runtime::EvaluationResult> pooled = pool->Evaluate(tasks);
  ASSERT_TRUE(killed);
  const std::vector<runtime::EvaluationResult> local = f.Local(tasks);
  ASSERT_EQ(pooled.size(), tasks.size());
  for (size_t i = 0; i < tasks.size(); ++i) {
    ASSERT_TRUE(pooled[i].valid) << "task " << i << ": " << pooled[i].invalid_reason;
    EXPECT_EQ(pooled[i].final_loss, local[i].final_loss) << "task " << i;
  }
  EXPECT_EQ(pool->reassigned(), 1);
  EXPECT_EQ(pool->live_workers(), 1);
  ASSERT_EQ(pool->dropped().size(), 1u);
  EXPECT_THAT(pool->dropped().front(), HasSubstr("rank 2: no heartbeat"));
  pool.reset();
  EXPECT_EQ(Wait(pid_of_rank[1]), 0);
  EXPECT_EQ(Wait(pid_of_rank[2]), 128 + SIGKILL);
}

TEST(ClusterTest, EveryWorkerGoneIsAnErrorNotInvalidPlacements) {
  Fixture f;
  cluster::PoolOptions options = f.Options(1);
  pid_t worker = -1;
  options.on_dispatch = [&](int, int handed) {
    if (handed == 2) kill(worker, SIGKILL);
  };
  cluster::WorkerPool pool(options);
  worker = StartWorker(pool.port(), 2, 1, WorkerLog(f.dir.path(), 1));
  Workers workers;
  workers.Add(worker);
  try {
    pool.Evaluate(f.Tasks("measured"));
    FAIL() << "a pool without workers judged a batch";
  } catch (const runtime::EvaluatorUnavailable& error) {
    EXPECT_THAT(error.what(), HasSubstr("every worker is gone"));
    EXPECT_THAT(error.what(), HasSubstr("rank 1: no heartbeat"));
  }
}

TEST(ClusterTest, AMissingWorkerIsNamedWithinTheJoinTimeout) {
  Fixture f;
  cluster::PoolOptions options = f.Options(2);
  options.join_timeout_seconds = 2;
  cluster::WorkerPool pool(options);
  Workers workers;
  workers.Add(StartWorker(pool.port(), 3, 1, WorkerLog(f.dir.path(), 1)));  // rank 2 never comes
  const auto start = std::chrono::steady_clock::now();
  try {
    pool.WaitForWorkers();
    FAIL() << "the pool did not notice that rank 2 never came";
  } catch (const cluster::ClusterError& error) {
    EXPECT_THAT(error.what(), HasSubstr("worker rank 2 of 2 did not join"));
    EXPECT_THAT(error.what(), HasSubstr("within 2 s"));
  }
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 2 + 1.0);
}

// The search hands each policy step's batch to the workers and learns from their verdicts:
// with budgets in steps, it ends exactly where the local search ends. Both search the default
// space, pipelines included (the workers build the micro-batched steps the tasks name).
TEST(ClusterTest, SearchThroughWorkersEndsWhereTheLocalSearchEnds) {
  const int port = FreePort();
  const std::string search =
      "search:\n  evaluator: simulated\n  policy_steps: 4\n  samples_per_step: 8\n"
      "  refinement_rounds: 3\n  max_wall_seconds: 3600\n  replicas: [1, 2]\n"
      "output:\n  directory: run\n";
  Fixture local(search);
  Fixture pooled(search + "cluster:\n  workers: 2\n  port: " + std::to_string(port) +
                 "\n  join_timeout_seconds: 60\n");
  ASSERT_EQ(Wait(Start({"search", "--config", local.config_file.string()},
                       local.dir.path() / "search.log")),
            0)
      << ReadFile(local.dir.path() / "search.log");
  const pid_t coordinator =
      Start({"search", "--config", pooled.config_file.string()}, pooled.dir.path() / "search.log");
  Workers workers;
  for (int rank = 1; rank <= 2; ++rank) {
    workers.Add(StartWorker(port, 3, rank, WorkerLog(pooled.dir.path(), rank)));
  }
  ASSERT_EQ(Wait(coordinator), 0) << ReadFile(pooled.dir.path() / "search.log");
  EXPECT_EQ(workers.WaitAll(), 0);
  const std::string log = ReadFile(pooled.dir.path() / "search.log");
  EXPECT_THAT(log, HasSubstr("cluster: 2 workers joined"));
  for (int rank = 1; rank <= 2; ++rank) {
    // Both judged some of the search's placements.
    EXPECT_THAT(ReadFile(WorkerLog(pooled.dir.path(), rank)),
                ::testing::ContainsRegex("leaves after [1-9][0-9]* placements"));
  }
  EXPECT_EQ(ReadFile(pooled.dir.path() / "run" / "best_placement.yaml"),
            ReadFile(local.dir.path() / "run" / "best_placement.yaml"));
  const std::string csv = ReadFile(pooled.dir.path() / "run" / "search.csv");
  EXPECT_EQ(csv, ReadFile(local.dir.path() / "run" / "search.csv"));
  // Pipelines were judged on the workers, and some were valid (valid is the column before the
  // reward, origin and candidate).
  EXPECT_THAT(csv,
              ::testing::ContainsRegex(",1,-?[0-9.]+,[01],\"[^\"]*\",\"1/[248]/(gpipe|1f1b):"));
}

}  // namespace
}  // namespace placer
