// The worker's side of the pool (cluster/worker_pool.h): join the search's store as one rank,
// read the search's config, then judge every placement put in this rank's inbox until told to
// leave. A heartbeat thread tells the search that this process is alive.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>

#include "graph/evaluator.h"
#include "proto/evaluation_wire.h"
#include "proto/message_auth.h"

namespace placer::cluster {

// Where the search is and who this worker is: torchrun's MASTER_ADDR, MASTER_PORT, WORLD_SIZE
// (the search and its workers) and RANK (1..WORLD_SIZE-1; rank 0 is the search).
struct WorkerEndpoint {
  std::string host;
  int port = 0;
  int world_size = 0;
  int rank = 0;
  double connect_timeout_seconds = 300;  // for the search to come up, and then each call
  // The key the search seals its messages under, read once the search's store answers (a search
  // writes the key it generates before it listens), and where it comes from, for messages.
  std::function<proto::ClusterKey()> key;
  std::string key_source;
};

// Judges a task; an exception makes the placement invalid with its message.
using TaskEvaluator = std::function<graph::EvaluationResult(const proto::EvaluationTask&)>;
// Builds the task evaluator from the search's config (its text and the path it was read from).
using EvaluatorFactory =
    std::function<TaskEvaluator(const std::string& config_text, const std::string& config_path)>;

// Serves until the search says to leave (returns the number of placements judged) or is gone
// (ClusterError). Throws ClusterError when the rank is out of range or taken, or the world size
// differs from the search's; KeyMismatch when the search holds another key. A task that does not
// verify, was sent before (a replay) or is not from the search is dropped, counted and said at
// the end.
int ServeWorker(const WorkerEndpoint& endpoint, const EvaluatorFactory& factory, std::ostream& log);

}  // namespace placer::cluster
