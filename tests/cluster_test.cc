// A pool of real `placer worker` processes on 127.0.0.1 (cluster/worker_pool.h): the verdicts
// equal the local evaluators', a worker killed while it evaluates loses nothing, a worker that
// never comes is named within the join timeout, and `placer search` with a cluster: section ends
// exactly where the same search without one ends.
#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
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
#include <thread>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/device.h"
#include "graph/micro_batches.h"
#include "placer/config/config.h"
#include "placer/setup/devices.h"
#include "placer/setup/model_factory.h"
#include "proto/evaluation_wire.h"
#include "proto/message_auth.h"
#include "runtime/cluster/store.h"
#include "runtime/cluster/worker_pool.h"
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

// A worker holding the key in `key_file` (read once the search's store answers).
pid_t StartWorker(int port, int world_size, int rank, const fs::path& log,
                  const fs::path& key_file) {
  return Start({"worker"}, log,
               {{"MASTER_ADDR", "127.0.0.1"},
                {"MASTER_PORT", std::to_string(port)},
                {"WORLD_SIZE", std::to_string(world_size)},
                {"RANK", std::to_string(rank)},
                {"PLACER_CLUSTER_KEY_FILE", key_file.string()}});
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
  proto::ClusterKey key = proto::ClusterKey::Generate();
  fs::path key_file = dir.path() / "pool.key";  // `key`, for the workers of a WorkerPool
  config::Config config;
  graph::DeviceSet devices;
  std::vector<std::string> names;
  graph::Graph single, replicated;
  graph::MicroBatchedGraph pipelined;  // 4 micro-batches

  explicit Fixture(const std::string& extra = "") {
    std::ofstream(config_file) << kConfig << extra;
    key.WriteFile(key_file);
    config = config::LoadConfig(config_file);
    devices = setup::ResolveDevices(config);
    names = graph::DeviceNames(devices);
    single = setup::BuildSingleModel(config);
    replicated = graph::BuildDataParallel(setup::ForwardBuilderFor(config), config.model.batch_size,
                                          {"r0", "r1"}, {1.0, 1.0}, config.model.learning_rate)
                     .graph;
    pipelined = graph::BuildMicroBatched(setup::ForwardBuilderFor(config), config.model.batch_size,
                                         4, config.model.learning_rate);
  }

  cluster::PoolOptions Options(int workers) const {
    return {.port = 0,
            .key = key,
            .workers = workers,
            .join_timeout_seconds = 60,
            .heartbeat_timeout_seconds = 2,
            .config_text = ReadFile(config_file),
            .config_path = config_file.string()};
  }

  // Every op on one device, every other forward op on the other device, the replicas of the
  // replicated model one per device, and the alternating stages as a 1F1B pipeline of 4
  // micro-batches (the task carries M and the schedule; the worker builds the micro-batched step).
  std::vector<cluster::PoolTask> Tasks(graph::EvaluatorKind kind) const {
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

  std::vector<graph::EvaluationResult> Local(const std::vector<cluster::PoolTask>& tasks) const {
    std::unique_ptr<sim::CostModel> costs = setup::CostModelFor(config);
    std::vector<graph::EvaluationResult> results;
    for (const cluster::PoolTask& task : tasks) {
      const graph::Graph& graph = task.placement.micro_batches > 1 ? pipelined.graph
                                  : task.replicas == 1             ? single
                                                                   : replicated;
      if (task.kind == graph::EvaluatorKind::kSimulated) {
        results.push_back(sim::SimulatedEvaluator(graph, devices, *costs).Evaluate(task.placement));
      } else {
        results.push_back(
            runtime::MeasuredEvaluator(graph, devices, setup::MeasurementOptionsFor(config))
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
    workers.Add(StartWorker(pool->port(), 3, rank, WorkerLog(f.dir.path(), rank), f.key_file));
  }
  // Simulated: the same numbers to the last bit.
  const std::vector<cluster::PoolTask> simulated = f.Tasks(graph::EvaluatorKind::kSimulated);
  const std::vector<graph::EvaluationResult> local = f.Local(simulated);
  const std::vector<graph::EvaluationResult> pooled = pool->Evaluate(simulated);
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
  const std::vector<cluster::PoolTask> measured = f.Tasks(graph::EvaluatorKind::kMeasured);
  const std::vector<graph::EvaluationResult> local_measured = f.Local(measured);
  const std::vector<graph::EvaluationResult> pooled_measured = pool->Evaluate(measured);
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
  cluster::PoolTask wrong = f.Tasks(graph::EvaluatorKind::kSimulated).front();
  wrong.placement.device_of_op.pop_back();
  const graph::EvaluationResult refused = pool->Evaluate({wrong}).front();
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
    pid_of_rank[rank] =
        StartWorker(pool->port(), 3, rank, WorkerLog(f.dir.path(), rank), f.key_file);
    workers.Add(pid_of_rank[rank]);
  }
  std::vector<cluster::PoolTask> tasks = f.Tasks(graph::EvaluatorKind::kMeasured);
  const std::vector<cluster::PoolTask> more = f.Tasks(graph::EvaluatorKind::kMeasured);
  tasks.insert(tasks.end(), more.begin(), more.end());
  const std::vector<graph::EvaluationResult> pooled = pool->Evaluate(tasks);
  ASSERT_TRUE(killed);
  const std::vector<graph::EvaluationResult> local = f.Local(tasks);
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
  worker = StartWorker(pool.port(), 2, 1, WorkerLog(f.dir.path(), 1), f.key_file);
  Workers workers;
  workers.Add(worker);
  try {
    pool.Evaluate(f.Tasks(graph::EvaluatorKind::kMeasured));
    FAIL() << "a pool without workers judged a batch";
  } catch (const graph::EvaluatorUnavailable& error) {
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
  workers.Add(StartWorker(pool.port(), 3, 1, WorkerLog(f.dir.path(), 1),
                          f.key_file));  // rank 2 never comes
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

// A simulated search with budgets in steps: wherever its evaluations are judged, it ends in the
// same place. Without tensor-parallel shapes, which a cluster's workers do not build (a local
// simulated search has them by default).
constexpr const char* kSearchInSteps =
    "search:\n  evaluator: simulated\n  policy_steps: 4\n  samples_per_step: 8\n"
    "  refinement_rounds: 3\n  max_wall_seconds: 3600\n  replicas: [1, 2]\n"
    "  tensor_ways: [1]\n"
    "output:\n  directory: run\n";

// `placer search` on the fixture's config, logging to search.log beside it.
pid_t StartSearch(const Fixture& f) {
  return Start({"search", "--config", f.config_file.string()}, f.dir.path() / "search.log");
}

// The search hands each policy step's batch to the workers and learns from their verdicts:
// with budgets in steps, it ends exactly where the local search ends. Both search the default
// space, pipelines included (the workers build the micro-batched steps the tasks name).
TEST(ClusterTest, SearchThroughWorkersEndsWhereTheLocalSearchEnds) {
  const int port = FreePort();
  Fixture local(kSearchInSteps);
  Fixture pooled(std::string(kSearchInSteps) + "cluster:\n  workers: 2\n  port: " +
                 std::to_string(port) + "\n  join_timeout_seconds: 60\n");
  ASSERT_EQ(Wait(StartSearch(local)), 0) << ReadFile(local.dir.path() / "search.log");
  const pid_t coordinator = StartSearch(pooled);
  Workers workers;
  for (int rank = 1; rank <= 2; ++rank) {
    // The key the search generates for this run, in its output directory.
    workers.Add(StartWorker(port, 3, rank, WorkerLog(pooled.dir.path(), rank),
                            pooled.dir.path() / "run" / "cluster.key"));
  }
  ASSERT_EQ(Wait(coordinator), 0) << ReadFile(pooled.dir.path() / "search.log");
  EXPECT_EQ(workers.WaitAll(), 0);
  const std::string log = ReadFile(pooled.dir.path() / "search.log");
  EXPECT_THAT(log, HasSubstr("cluster: 2 workers joined"));
  EXPECT_THAT(log, HasSubstr("messages dropped: 0"));
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

std::string HostName() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// A worker given another key is refused at its join: it says so and leaves with exit code 2; the
// search names its rank and host, frees the rank, and a worker with the right key then takes it.
TEST(ClusterTest, AWorkerWithAnotherKeyIsRefusedAndNamed) {
  Fixture f;
  const fs::path other_key = f.dir.path() / "other.key";
  proto::ClusterKey::Generate().WriteFile(other_key);
  cluster::WorkerPool pool(f.Options(1));
  const fs::path refused_log = WorkerLog(f.dir.path(), 1);
  EXPECT_EQ(Wait(StartWorker(pool.port(), 2, 1, refused_log, other_key)), 2);
  EXPECT_THAT(ReadFile(refused_log), HasSubstr("rank 1 refused"));
  EXPECT_THAT(ReadFile(refused_log),
              HasSubstr("does not share this worker's key (" + other_key.string() + ")"));
  std::thread wait([&pool] { pool.WaitForWorkers(); });
  // The pool reads the refused join and frees rank 1 (as a test client of the store sees).
  auto observer = cluster::JoinStore("127.0.0.1", pool.port(), std::chrono::seconds(10));
  for (int tries = 0; observer->check({cluster::keys::Claim(1)}) && tries < 500; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Workers workers;
  workers.Add(StartWorker(pool.port(), 2, 1, WorkerLog(f.dir.path(), 2), f.key_file));
  wait.join();
  ASSERT_EQ(pool.refused().size(), 1u);
  EXPECT_THAT(pool.refused().front(), HasSubstr("rank 1 (host " + HostName() + ")"));
  EXPECT_THAT(pool.refused().front(), HasSubstr("not sealed under this search's key"));
  EXPECT_EQ(pool.dropped_messages().ToString(), "1 (1 bad MAC)");
  const graph::EvaluationResult judged =
      pool.Evaluate({f.Tasks(graph::EvaluatorKind::kSimulated).front()}).front();
  EXPECT_TRUE(judged.valid) << judged.invalid_reason;
}

// The store listens where the config says (127.0.0.1 by default), not on every interface as c10d
// would: from another address of this host its port is closed.
TEST(ClusterTest, ThePoolsStoreListensOnItsAddressOnly) {
  Fixture f;
  cluster::WorkerPool pool(f.Options(1));
  std::string other;  // an IPv4 address of this host that is not a loopback one
  ifaddrs* addresses = nullptr;
  ASSERT_EQ(getifaddrs(&addresses), 0);
  for (ifaddrs* a = addresses; a != nullptr && other.empty(); a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    char text[INET_ADDRSTRLEN] = {};
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, text, sizeof(text));
    if (!std::string(text).starts_with("127.")) other = text;
  }
  freeifaddrs(addresses);
  auto connects = [&](const std::string& address) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(pool.port()));
    inet_pton(AF_INET, address.c_str(), &to.sin_addr);
    const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) == 0;
    close(fd);
    return ok;
  };
  EXPECT_TRUE(connects("127.0.0.1"));
  if (other.empty()) GTEST_SKIP() << "NOT RUN: this host has no address but loopback ones";
  EXPECT_FALSE(connects(other)) << "the store answers at " << other;
}

// A worker judges what the search sealed for it once: a task pushed again (a replay), one sealed
// for another worker's inbox and one sealed by another rank than the search are dropped and
// counted, and its one verdict is sealed by it. The search here is the test itself, on the store.
TEST(ClusterTest, ATaskCarriesItsEvaluatorKindAndTheWireRefusesAnUnknownOne) {
  proto::EvaluationTask task{.id = 3, .kind = graph::EvaluatorKind::kMeasured, .replicas = 2};
  task.placement.devices = {"cpu:0", "cpu:1"};
  task.placement.device_of_op = {0, 1, -1};
  for (const graph::EvaluatorKindInfo& info : graph::kEvaluatorKinds) {
    task.kind = info.kind;
    EXPECT_EQ(proto::DecodeTask(proto::EncodeTask(task)).kind, info.kind) << info.name;
  }
  // A peer of another version naming a kind this one lacks: its name is on the wire as a string
  // field, here altered in place to one of the same length.
  task.kind = graph::EvaluatorKind::kSimulated;
  std::vector<uint8_t> bytes = proto::EncodeTask(task);
  const std::string name = "simulated";
  auto at = std::search(bytes.begin(), bytes.end(), name.begin(), name.end());
  ASSERT_NE(at, bytes.end());
  at[name.size() - 1] = 'x';
  try {
    proto::DecodeTask(bytes);
    FAIL() << "a task of an unknown evaluator kind decoded";
  } catch (const proto::WireError& error) {
    EXPECT_THAT(error.what(), HasSubstr("'simulatex' is none of measured, simulated"));
  }
  // A stop message carries no kind to judge with.
  task.stop = true;
  EXPECT_TRUE(proto::DecodeTask(proto::EncodeTask(task)).stop);
}

TEST(ClusterTest, AWorkerJudgesATaskOnceAndDropsReplaysAndTasksNotSealedForIt) {
  Fixture f;
  auto store = cluster::HostStore("127.0.0.1", 0, std::chrono::seconds(60));
  const proto::MessageSealer sealer(f.key, "session of this test");
  namespace keys = cluster::keys;
  auto publish = [&](const char* key, const std::string& value) {
    store->set(key, sealer.Seal(key, 0, cluster::ToBytes(value)));
  };
  store->set(keys::kSession, cluster::ToBytes("session of this test"));
  publish(keys::kConfigText, ReadFile(f.config_file));
  publish(keys::kConfigPath, f.config_file.string());
  publish(keys::kWorldSize, "2");
  const fs::path log = WorkerLog(f.dir.path(), 1);
  Workers workers;
  workers.Add(StartWorker(store->getPort(), 2, 1, log, f.key_file));
  store->wait({keys::Joined(1)});
  const cluster::PoolTask task = f.Tasks(graph::EvaluatorKind::kSimulated).front();
  auto sealed = [&](int64_t id, const std::string& inbox, int sender, bool stop = false) {
    const proto::EvaluationTask t{id, stop, task.kind, task.replicas, task.placement};
    return sealer.Seal(inbox, sender, proto::EncodeTask(t));
  };
  store->queuePush(keys::Inbox(1), sealed(5, keys::Inbox(1), 0));
  store->queuePush(keys::Inbox(1), sealed(5, keys::Inbox(1), 0));  // again: a replay
  store->queuePush(keys::Inbox(1), sealed(6, keys::Inbox(2), 0));  // for rank 2's inbox
  store->queuePush(keys::Inbox(1), sealed(7, keys::Inbox(1), 2));  // sealed by rank 2
  store->queuePush(keys::Inbox(1), sealed(8, keys::Inbox(1), 0, /*stop=*/true));
  EXPECT_EQ(workers.WaitAll(), 0) << ReadFile(log);
  EXPECT_THAT(ReadFile(log),
              HasSubstr("leaves after 1 placement; messages dropped: 3 (1 bad MAC, 1 wrong rank, "
                        "1 replayed or not outstanding)"));
  ASSERT_EQ(store->queueLen(keys::kResults), 1);
  const proto::Opened verdict = sealer.Open(keys::kResults, store->queuePop(keys::kResults, false));
  ASSERT_TRUE(verdict.ok()) << proto::ToString(verdict.rejection);
  EXPECT_EQ(verdict.sender, 1);
  const proto::TaggedResult result = proto::DecodeResult(verdict.payload);
  EXPECT_EQ(result.id, 5);
  EXPECT_TRUE(result.result.valid) << result.result.invalid_reason;
}

// A process that reaches the store without the key, and one that holds it as a compromised rank
// 2 would, push forged, garbage, replayed, moved and wrong-rank messages into the queues while a
// search runs on two workers (tests/rogue_client.cc): the search ends exactly where it ends
// without them, and the search and the workers say what they dropped.
TEST(ClusterTest, RogueMessagesOnTheStoreChangeNothingAndAreCounted) {
  const int port = FreePort();
  Fixture local(kSearchInSteps);
  Fixture pooled(std::string(kSearchInSteps) + "cluster:\n  workers: 2\n  port: " +
                 std::to_string(port) + "\n  join_timeout_seconds: 60\n  key_file: shared.key\n");
  const fs::path key_file = pooled.dir.path() / "shared.key";  // the search creates it
  ASSERT_EQ(Wait(StartSearch(local)), 0) << ReadFile(local.dir.path() / "search.log");
  const pid_t coordinator = StartSearch(pooled);
  Workers rogues;
  const fs::path rogue_log = pooled.dir.path() / "rogue.log";
  rogues.Add(
      placer_test::StartPlacer({"127.0.0.1", std::to_string(port), "--insider", key_file.string()},
                               rogue_log, {.binary = ROGUE_CLIENT}));
  // The rogue's garbage is in the inboxes before the workers come.
  std::this_thread::sleep_for(std::chrono::seconds(2));
  Workers workers;
  for (int rank = 1; rank <= 2; ++rank) {
    workers.Add(StartWorker(port, 3, rank, WorkerLog(pooled.dir.path(), rank), key_file));
  }
  ASSERT_EQ(Wait(coordinator), 0) << ReadFile(pooled.dir.path() / "search.log");
  EXPECT_EQ(workers.WaitAll(), 0);
  EXPECT_EQ(rogues.WaitAll(), 0) << ReadFile(rogue_log);
  EXPECT_EQ(ReadFile(pooled.dir.path() / "run" / "best_placement.yaml"),
            ReadFile(local.dir.path() / "run" / "best_placement.yaml"));
  EXPECT_EQ(ReadFile(pooled.dir.path() / "run" / "search.csv"),
            ReadFile(local.dir.path() / "run" / "search.csv"));
  const std::string rogue = ReadFile(rogue_log);
  EXPECT_THAT(rogue, ::testing::ContainsRegex("forged 400 garbage 60 replayed [1-9][0-9]* "
                                              "moved [0-9]+ wrong-rank 400"));
  // Every kind dropped: the rogue's own catches put its forged and garbage messages back twice
  // too, so the counts are at least what it pushed, not exactly.
  const std::string log = ReadFile(pooled.dir.path() / "search.log");
  EXPECT_THAT(log, ::testing::ContainsRegex(
                       "messages dropped: [0-9]+ \\([0-9]{2,} garbage, [0-9]{3,} bad MAC, "
                       "[0-9]{3,} wrong rank, [1-9][0-9]* replayed or not outstanding\\)"));
  for (int rank = 1; rank <= 2; ++rank) {
    // Each inbox's garbage at least.
    EXPECT_THAT(ReadFile(WorkerLog(pooled.dir.path(), rank)),
                ::testing::ContainsRegex("messages dropped: [0-9]+ \\(.*[0-9]{2,} garbage"));
  }
}

}  // namespace
}  // namespace placer
