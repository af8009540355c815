// The search's side of a pool of evaluation workers (`placer worker` processes, here or on other
// hosts): it hosts the rendezvous, waits for every worker, and judges a batch of placements on all
// of them at once, one placement per worker at a time. A worker that stops beating its heart is
// dropped and the placement it held goes to another; a batch ends with every verdict.
// Torch-free header (the c10d store stays in worker_pool.cc).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "graph/evaluator.h"
#include "graph/placement.h"
#include "proto/message_auth.h"

namespace placer::cluster {

struct PoolOptions {
  int port = 29500;                   // 0: a free one (WorkerPool::port() says which)
  std::string address = "127.0.0.1";  // where the workers reach the store, for messages
  std::string listen_address;         // where the store listens; empty: `address`
  // What every message is sealed under; the workers hold the same key (proto/message_auth.h).
  proto::ClusterKey key;
  int workers = 1;                   // ranks 1..workers
  double join_timeout_seconds = 60;  // from the pool's start
  double heartbeat_timeout_seconds = 10;
  // What the workers build their models and evaluators from: the search's config file.
  std::string config_text;
  std::string config_path;
  // Called after each placement handed to a worker, with the worker's rank and how many it has
  // been handed so far (tests stop a worker while it evaluates).
  std::function<void(int rank, int handed)> on_dispatch;
};

struct PoolTask {
  graph::EvaluatorKind kind = graph::EvaluatorKind::kSimulated;  // which worker evaluator judges it
  int replicas = 1;                                              // the model's replica count
  graph::Placement placement;
};

class WorkerPool {
 public:
  // Hosts the store and publishes the config; workers may join from then on. Throws ClusterError
  // when the port cannot be had.
  explicit WorkerPool(PoolOptions options);
  ~WorkerPool();  // every worker still there is told to leave
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int port() const;
  int workers() const;
  // Returns once every worker has joined. Throws ClusterError naming the ranks still missing when
  // join_timeout_seconds have passed since the pool started.
  void WaitForWorkers();
  // Every task judged on the workers, results in order. Waits for the workers first. Throws
  // graph::EvaluatorUnavailable when no worker is left.
  std::vector<graph::EvaluationResult> Evaluate(const std::vector<PoolTask>& tasks);

  int live_workers() const;
  int reassigned() const;                    // placements taken back from a dropped worker
  std::vector<std::string> dropped() const;  // "rank 2: no heartbeat for 10.0 s"
  // Joins that did not verify: "rank 2 (host h): its join is not sealed under this search's key".
  std::vector<std::string> refused() const;
  // Verdicts and joins not acted on (forged, altered, replayed, from the wrong rank, garbage).
  proto::DroppedMessages dropped_messages() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One of the search's evaluators, judged by the pool: measured or simulated, on the model with
// `replicas` replicas. Its name is its kind, as the local evaluator's would be.
class PoolEvaluator : public graph::Evaluator {
 public:
  PoolEvaluator(std::shared_ptr<WorkerPool> pool, graph::EvaluatorKind kind, int replicas);
  graph::EvaluationResult Evaluate(const graph::Placement& placement) override;
  std::vector<graph::EvaluationResult> EvaluateBatch(
      std::span<const graph::Placement> placements) override;
  std::string name() const override { return std::string(graph::ToString(kind_)); }
  // The workers' evaluators answer as one of their kind here would.
  bool deterministic() const override { return graph::Describe(kind_).deterministic; }

 private:
  std::shared_ptr<WorkerPool> pool_;
  graph::EvaluatorKind kind_;
  int replicas_;
};

}  // namespace placer::cluster
