#include "runtime/cluster/worker_loop.h"

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ostream>
#include <thread>

#include "runtime/cluster/store.h"

namespace placer::cluster {
namespace {

constexpr std::chrono::milliseconds kHeartbeatPeriod{200};
// How long one wait for a task lasts before it is tried again (c10d logs a warning each time:
// an idle worker says so every ten minutes). A search that ends closes the store, which ends the
// wait at once.
constexpr std::chrono::minutes kInboxWait{10};

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown host";
  return name;
}

// Beats on its own connection, so that a long evaluation does not silence it.
class Heartbeat {
 public:
  Heartbeat(c10::intrusive_ptr<c10d::Store> store, int rank)
      : store_(std::move(store)), key_(keys::Heartbeat(rank)), thread_([this] { Run(); }) {}
  ~Heartbeat() {
    stop_ = true;
    thread_.join();
  }

 private:
  void Run() {
    while (!stop_) {
      try {
        store_->add(key_, 1);
      } catch (const std::exception&) {
        return;  // the search is gone; the main loop finds out too
      }
      std::this_thread::sleep_for(kHeartbeatPeriod);
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::string key_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace

int ServeWorker(const WorkerEndpoint& e, const EvaluatorFactory& factory, std::ostream& log) {
  if (e.world_size < 2 || e.rank < 1 || e.rank >= e.world_size) {
    throw ClusterError(fmt::format(
        "cluster: a worker's rank must be 1 to WORLD_SIZE - 1 (rank 0 is the search), got rank "
        "{} of world size {}",
        e.rank, e.world_size));
  }
  const auto timeout =
      std::chrono::milliseconds(static_cast<int64_t>(e.connect_timeout_seconds * 1000));
  c10::intrusive_ptr<c10d::TCPStore> store = JoinStore(e.host, e.port, timeout);
  const std::string where = fmt::format("{}:{}", e.host, e.port);
  try {
    const proto::MessageSealer sealer(e.key(), ToString(store->get(keys::kSession)));
    // What the search published, verified: nothing unsealed is believed.
    auto published = [&](const char* key) {
      proto::Opened opened = sealer.Open(key, store->get(key));
      if (opened.ok() && opened.sender == 0) return ToString(opened.payload);
      // Announce this worker sealed under its own key, so that the search names it.
      if (store->add(keys::Claim(e.rank), 1) == 1) {
        store->set(keys::Joined(e.rank),
                   sealer.Seal(keys::Joined(e.rank), e.rank, ToBytes(HostName())));
      }
      throw KeyMismatch(fmt::format(
          "cluster: the search at {} does not share this worker's key ({}): what it published "
          "({}) does not verify under it; give the worker the search's key (the search's "
          "cluster.key_file, or the cluster.key it writes into its output directory, as "
          "--key-file or PLACER_CLUSTER_KEY_FILE)",
          where, e.key_source, key));
    };
    const int world_size = std::stoi(published(keys::kWorldSize));
    if (world_size != e.world_size) {
      throw ClusterError(fmt::format(
          "cluster: the search at {} has a world of {} (itself and {} workers), this worker was "
          "told {}",
          where, world_size, world_size - 1, e.world_size));
    }
    if (store->add(keys::Claim(e.rank), 1) != 1) {
      throw ClusterError(
          fmt::format("cluster: rank {} has joined the search at {} already", e.rank, where));
    }
    const TaskEvaluator evaluate =
        factory(published(keys::kConfigText), published(keys::kConfigPath));
    store->add(keys::Heartbeat(e.rank), 1);
    Heartbeat heartbeat(store->clone(), e.rank);
    store->set(keys::Joined(e.rank),
               sealer.Seal(keys::Joined(e.rank), e.rank, ToBytes(HostName())));
    log << fmt::format("placer worker: rank {} of {} joined the search at {}\n", e.rank,
                       e.world_size, where)
        << std::flush;
    store->setTimeout(kInboxWait);
    int judged = 0;
    int64_t last_id = 0;  // the search numbers its tasks upwards: an id seen before is a replay
    proto::DroppedMessages drops;
    while (true) {
      std::vector<uint8_t> message;
      try {
        message = store->queuePop(keys::Inbox(e.rank), /*block=*/true);
      } catch (const c10::DistNetworkError&) {
        throw;
      } catch (const c10::DistStoreError&) {
        continue;  // no task yet
      }
      proto::Opened opened = sealer.Open(keys::Inbox(e.rank), message);
      proto::EvaluationTask task;
      if (opened.ok() && opened.sender != 0) opened.rejection = proto::Rejection::kWrongRank;
      if (opened.ok()) {
        try {
          task = proto::DecodeTask(opened.payload);
        } catch (const proto::WireError&) {
          opened.rejection = proto::Rejection::kGarbage;
        }
      }
      if (opened.ok() && task.id <= last_id) opened.rejection = proto::Rejection::kNotOutstanding;
      if (!opened.ok()) {
        drops.Count(opened.rejection);
        continue;
      }
      last_id = task.id;
      if (task.stop) break;
      proto::TaggedResult verdict{task.id, e.rank, {}};
      try {
        verdict.result = evaluate(task);
      } catch (const std::exception& error) {
        verdict.result = {};
        verdict.result.invalid_reason = error.what();
      }
      store->queuePush(keys::kResults,
                       sealer.Seal(keys::kResults, e.rank, proto::EncodeResult(verdict)));
      ++judged;
    }
    log << fmt::format("placer worker: rank {} leaves after {} placement{}; messages dropped: {}\n",
                       e.rank, judged, judged == 1 ? "" : "s", drops.ToString());
    return judged;
  } catch (const c10::DistNetworkError& error) {
    throw ClusterError(fmt::format("cluster: the search at {} is gone: {}", where, error.what()));
  }
}

}  // namespace placer::cluster
