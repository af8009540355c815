#include "runtime/cluster/worker_pool.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "proto/evaluation_wire.h"
#include "runtime/cluster/store.h"

namespace placer::cluster {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::milliseconds Milliseconds(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// How often the heartbeats are read while a batch is judged.
constexpr std::chrono::milliseconds kPollInterval{50};

// Wakes the search's wait for verdicts every kPollInterval with an empty message in the verdicts'
// queue, so that it reads the heartbeats without a store call that times out (c10d logs a
// warning for each).
class Ticker {
 public:
  explicit Ticker(c10::intrusive_ptr<c10d::Store> store)
      : store_(std::move(store)), thread_([this] { Run(); }) {}
  ~Ticker() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }

 private:
  void Run() {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, kPollInterval, [this] { return stop_; })) {
      try {
        store_->queuePush(keys::kResults, {});
      } catch (const std::exception&) {
        return;
      }
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

struct WorkerPool::Impl {
  struct Worker {
    int rank = 0;
    bool joined = false;  // its sealed join verified
    bool live = true;
    std::optional<size_t> task;  // index into the batch being judged
    int64_t dispatch = -1;       // id of the task it holds
    int handed = 0;
    int64_t beats = -1;
    Clock::time_point beat_seen;
  };

  // A task handed out: which of the batch's, and to whom (only that rank's verdict counts).
  struct Dispatch {
    size_t task = 0;
    int rank = 0;
  };

  PoolOptions options;
  Clock::time_point started = Clock::now();
  std::string session;  // this pool's nonce: messages of other runs do not verify here
  proto::MessageSealer sealer;
  c10::intrusive_ptr<c10d::TCPStore> store;
  std::vector<Worker> workers;  // [rank - 1]
  bool joined = false;
  int64_t next_id = 1;
  int reassigned = 0;
  std::vector<std::string> dropped;
  std::vector<std::string> refused;
  proto::DroppedMessages drops;
  std::mutex mutex;  // one batch at a time

  explicit Impl(PoolOptions o)
      : options(std::move(o)), session(proto::NewSession()), sealer(options.key, session) {}

  void Publish(const char* key, const std::string& value) {
    store->set(key, sealer.Seal(key, 0, ToBytes(value)));
  }

  // Every task, stop included, gets a fresh id: a worker takes only ids above the last it took,
  // so a task pushed again (a replay) is refused.
  int64_t Send(int rank, proto::EvaluationTask task) {
    task.id = next_id++;
    store->queuePush(keys::Inbox(rank), sealer.Seal(keys::Inbox(rank), 0, proto::EncodeTask(task)));
    return task.id;
  }

  // A worker's join, once it is in the store: taken when sealed by that rank under this key;
  // otherwise refused, named and its rank freed for a worker with the right key.
  void ReadJoin(Worker& w) {
    const std::string key = keys::Joined(w.rank);
    if (!store->check({key})) return;
    const std::vector<uint8_t> message = store->get(key);
    const proto::Opened join = sealer.Open(key, message);
    if (join.ok() && join.sender == w.rank) {
      w.joined = true;
      return;
    }
    drops.Count(join.ok() ? proto::Rejection::kWrongRank : join.rejection);
    const std::optional<proto::Opened> claimed = proto::Unverified(message);
    refused.push_back(fmt::format(
        "rank {} (host {}): its join is not sealed under this search's key (a worker started "
        "with another key, or not a worker)",
        w.rank, claimed ? ToString(claimed->payload) : "unknown"));
    store->deleteKey(key);
    store->deleteKey(keys::Claim(w.rank));
  }

  void Drop(Worker& w, const std::string& why, std::deque<size_t>& pending) {
    w.live = false;
    dropped.push_back(fmt::format("rank {}: {}", w.rank, why));
    if (w.task) {
      pending.push_front(*w.task);
      ++reassigned;
      w.task.reset();
    }
    try {  // if it is alive after all, it leaves rather than judge what nobody reads
      Send(w.rank, {.stop = true});
    } catch (const std::exception&) {
    }
  }

  // A verdict sealed under this key by the rank that holds its task; anything else is counted
  // and dropped.
  std::optional<proto::TaggedResult> OpenVerdict(const std::vector<uint8_t>& message,
                                                 const std::map<int64_t, Dispatch>& outstanding) {
    proto::Opened opened = sealer.Open(keys::kResults, message);
    std::optional<proto::TaggedResult> verdict;
    if (opened.ok()) {
      try {
        verdict = proto::DecodeResult(opened.payload);
      } catch (const proto::WireError&) {
        opened.rejection = proto::Rejection::kGarbage;
      }
    }
    if (verdict) {
      const auto it = outstanding.find(verdict->id);
      if (verdict->rank != opened.sender) {
        opened.rejection = proto::Rejection::kWrongRank;  // sealed by one rank, naming another
      } else if (it == outstanding.end()) {
        opened.rejection = proto::Rejection::kNotOutstanding;
      } else if (it->second.rank != opened.sender) {
        opened.rejection = proto::Rejection::kWrongRank;  // a task handed to another rank
      }
    }
    if (opened.ok()) return verdict;
    drops.Count(opened.rejection);
    return std::nullopt;
  }

  void CheckHeartbeats(std::deque<size_t>& pending) {
    std::vector<std::string> names;
    std::vector<Worker*> live;
    for (Worker& w : workers) {
      if (w.live) {
        names.push_back(keys::Heartbeat(w.rank));
        live.push_back(&w);
      }
    }
    if (names.empty()) return;
    const std::vector<std::vector<uint8_t>> values = store->multiGet(names);
    const auto now = Clock::now();
    for (size_t k = 0; k < live.size(); ++k) {
      Worker& w = *live[k];
      const int64_t beats = std::stoll(ToString(values[k]));
      if (beats != w.beats) {
        w.beats = beats;
        w.beat_seen = now;
      } else if (std::chrono::duration<double>(now - w.beat_seen).count() >
                 options.heartbeat_timeout_seconds) {
        Drop(w, fmt::format("no heartbeat for {:.1f} s", options.heartbeat_timeout_seconds),
             pending);
      }
    }
  }
};

WorkerPool::WorkerPool(PoolOptions options) {
  if (options.workers < 1) throw ClusterError("cluster: a pool needs at least one worker");
  impl_ = std::make_unique<Impl>(std::move(options));
  const PoolOptions& o = impl_->options;
  impl_->store = HostStore(o.listen_address.empty() ? o.address : o.listen_address, o.port,
                           Milliseconds(o.join_timeout_seconds));
  // The session first: a worker reads it before anything sealed.
  impl_->store->set(keys::kSession, ToBytes(impl_->session));
  impl_->Publish(keys::kConfigText, o.config_text);
  impl_->Publish(keys::kConfigPath, o.config_path);
  // Last: a worker that reads the world size finds the config there.
  impl_->Publish(keys::kWorldSize, std::to_string(o.workers + 1));
  for (int rank = 1; rank <= o.workers; ++rank) impl_->workers.push_back({.rank = rank});
}

WorkerPool::~WorkerPool() {
  for (Impl::Worker& w : impl_->workers) {
    if (!w.live) continue;
    try {
      impl_->Send(w.rank, {.stop = true});
    } catch (const std::exception&) {  // a worker gone already needs no goodbye
    }
  }
  // The store goes down with this object: give the workers a moment to read their goodbye
  // (a worker that finds the store gone instead leaves all the same, with a message).
  for (auto start = Clock::now(); Clock::now() - start < std::chrono::seconds(2);) {
    bool read = true;
    for (const Impl::Worker& w : impl_->workers) {
      try {
        if (w.live && impl_->store->queueLen(keys::Inbox(w.rank)) > 0) read = false;
      } catch (const std::exception&) {
      }
    }
    if (read) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

int WorkerPool::port() const { return impl_->store->getPort(); }
int WorkerPool::workers() const { return impl_->options.workers; }

void WorkerPool::WaitForWorkers() {
  std::lock_guard lock(impl_->mutex);
  if (impl_->joined) return;
  const PoolOptions& o = impl_->options;
  std::vector<int> missing;
  while (true) {
    missing.clear();
    for (Impl::Worker& w : impl_->workers) {
      if (!w.joined) impl_->ReadJoin(w);
      if (!w.joined) missing.push_back(w.rank);
    }
    if (missing.empty()) break;
    if (SecondsSince(impl_->started) > o.join_timeout_seconds) {
      throw ClusterError(fmt::format(
          "cluster: worker rank{} {} of {} did not join the search at {}:{} within {:.0f} s "
          "(cluster.join_timeout_seconds); start each worker with `placer worker`, "
          "MASTER_ADDR={} MASTER_PORT={} WORLD_SIZE={} RANK=<1..{}> and this search's key{}{}",
          missing.size() == 1 ? "" : "s", fmt::join(missing, ", "), o.workers, o.address, port(),
          o.join_timeout_seconds, o.address, port(), o.workers + 1, o.workers,
          impl_->refused.empty() ? "" : "; refused: ", fmt::join(impl_->refused, "; ")));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const auto now = Clock::now();
  for (Impl::Worker& w : impl_->workers) w.beat_seen = now;
  impl_->joined = true;
}

std::vector<graph::EvaluationResult> WorkerPool::Evaluate(const std::vector<PoolTask>& tasks) {
  WaitForWorkers();
  std::lock_guard lock(impl_->mutex);
  Impl& p = *impl_;
  std::vector<std::optional<graph::EvaluationResult>> results(tasks.size());
  std::deque<size_t> pending;
  for (size_t i = 0; i < tasks.size(); ++i) pending.push_back(i);
  std::map<int64_t, Impl::Dispatch> outstanding;
  size_t done = 0;
  auto last_check = Clock::now();
  // A tick or a verdict comes every kPollInterval; waiting longer means the store itself is stuck.
  p.store->setTimeout(std::chrono::seconds(60));
  Ticker ticker(p.store->clone());
  while (done < tasks.size()) {
    // Hand a placement to every idle worker.
    for (Impl::Worker& w : p.workers) {
      while (w.live && !w.task && !pending.empty()) {
        const size_t i = pending.front();
        pending.pop_front();
        if (results[i]) continue;  // judged meanwhile by a worker dropped too early
        const int64_t id =
            p.Send(w.rank, {0, false, tasks[i].kind, tasks[i].replicas, tasks[i].placement});
        w.task = i;
        w.dispatch = id;
        outstanding[id] = {i, w.rank};
        if (p.options.on_dispatch) p.options.on_dispatch(w.rank, ++w.handed);
      }
    }
    if (pending.empty() &&
        std::none_of(p.workers.begin(), p.workers.end(), [](const auto& w) { return w.task; })) {
      throw std::logic_error(fmt::format(
          "cluster: {} placements neither judged nor held by a worker", tasks.size() - done));
    }
    if (std::none_of(p.workers.begin(), p.workers.end(), [](const auto& w) { return w.live; })) {
      throw graph::EvaluatorUnavailable(
          fmt::format("cluster: every worker is gone ({}); {} of {} placements judged",
                      fmt::join(p.dropped, "; "), done, tasks.size()));
    }
    std::vector<uint8_t> message;
    try {
      message = p.store->queuePop(keys::kResults, /*block=*/true);
    } catch (const c10::DistQueueEmptyError&) {
      // Another client of the store popped what woke this wait: c10d keeps nobody out of a
      // queue. A verdict taken so and never put back leaves its task held, as a slow worker's
      // would: the MACs keep forged verdicts out, not a denial of service.
    }
    if (!message.empty()) {  // a verdict, not a tick
      std::optional<proto::TaggedResult> verdict = p.OpenVerdict(message, outstanding);
      if (verdict) {
        const size_t i = outstanding.at(verdict->id).task;
        outstanding.erase(verdict->id);
        // The first verdict counts, even from a worker dropped meanwhile: nothing judged is lost.
        if (!results[i]) {
          results[i] = std::move(verdict->result);
          ++done;
        }
        for (Impl::Worker& w : p.workers) {
          if (w.dispatch == verdict->id) w.task.reset();
        }
      }
    }
    if (Clock::now() - last_check >= kPollInterval) {
      p.CheckHeartbeats(pending);
      last_check = Clock::now();
    }
  }
  std::vector<graph::EvaluationResult> out;
  out.reserve(results.size());
  for (auto& r : results) out.push_back(std::move(*r));
  return out;
}

int WorkerPool::live_workers() const {
  return static_cast<int>(std::count_if(impl_->workers.begin(), impl_->workers.end(),
                                        [](const auto& w) { return w.live; }));
}
int WorkerPool::reassigned() const { return impl_->reassigned; }
std::vector<std::string> WorkerPool::dropped() const { return impl_->dropped; }
std::vector<std::string> WorkerPool::refused() const { return impl_->refused; }
proto::DroppedMessages WorkerPool::dropped_messages() const { return impl_->drops; }

PoolEvaluator::PoolEvaluator(std::shared_ptr<WorkerPool> pool, graph::EvaluatorKind kind,
                             int replicas)
    : pool_(std::move(pool)), kind_(kind), replicas_(replicas) {}

graph::EvaluationResult PoolEvaluator::Evaluate(const graph::Placement& placement) {
  return EvaluateBatch(std::span(&placement, 1)).front();
}

std::vector<graph::EvaluationResult> PoolEvaluator::EvaluateBatch(
    std::span<const graph::Placement> placements) {
  std::vector<PoolTask> tasks;
  tasks.reserve(placements.size());
  for (const graph::Placement& placement : placements) {
    tasks.push_back({kind_, replicas_, placement});
  }
  return pool_->Evaluate(tasks);
}

}  // namespace placer::cluster
