// What `placer search` and `placer compare` build from a config before searching: the model at
// every replica count (and micro-batch count) of the action space, its groups, the simulators the
// search learns on (a profile of these devices when the config's evaluator is measured), the
// measured evaluators that verify, and every baseline as a candidate (the warm starts and compare's
// rows).
#pragma once

#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/group_features.h"
#include "graph/grouping.h"
#include "placer/action_space.h"
#include "placer/candidate_evaluator.h"
#include "placer/config/config.h"
#include "placer/paired_comparison.h"
#include "placer/run_directory.h"
#include "placer/run_lock.h"
#include "placer/search.h"
#include "placer/setup/step_cache.h"
#include "runtime/sim/cost_model.h"

namespace placer::cluster {
class WorkerPool;
}

namespace placer::setup {

// A placement some method proposes, as a candidate of the search's action space, or the reason
// it has none.
struct Baseline {
  std::string name;
  std::optional<search::Candidate> candidate;
  std::string error;
  double seconds_to_produce = 0;
};

struct SearchSetup {
  config::Config config;
  graph::DeviceSet devices;
  std::vector<std::string> names;
  graph::Grouping grouping;
  std::string grouping_name;  // "coarsen, max_groups 256"
  graph::GroupFeatures features;
  // The step at each shape, built from one forward for the whole run (steps->forward(): an ONNX
  // export is read once per batch however many steps and rows are built from it).
  std::unique_ptr<StepCache> steps;
  // The search's steps (per step shape that builds, SearchSteps' order; [0]: R = 1), in `steps`.
  std::vector<const search::ReplicatedModel*> models;
  std::vector<std::unique_ptr<sim::CostModel>> costs;  // the simulators' (per model)
  // The simulators the search learns on (per model), and the configured kind's evaluators where
  // they are not those simulators (setup::MakeEvaluator's: the measured ones).
  std::vector<std::unique_ptr<graph::Evaluator>> simulators, judges;
  // With a cluster: section, the workers that judge the measured placements (and, for a
  // simulated search, the simulated ones): `measured` and `simulated` then judge through it.
  std::shared_ptr<cluster::WorkerPool> pool;
  std::vector<std::unique_ptr<graph::Evaluator>> pooled;
  std::unique_ptr<search::CandidateEvaluator> simulated;  // what the search learns on
  std::unique_ptr<search::CandidateEvaluator> measured;   // null unless search.evaluator: measured
  std::vector<Baseline> baselines;
  // Warm starts derived from the baselines: model parallelism inside each replica, data
  // parallelism between replicas (a baseline on the first D / R devices, copied R times); and
  // with tensor-parallel shapes, each with every group split (Megatron's TP x DP).
  std::vector<search::NamedCandidate> scaled_out;
  // Where the search has pipelines: the pipeline baseline's contiguous stages at every micro-batch
  // count and schedule searched.
  std::vector<search::NamedCandidate> pipelined;
  double lower_bound_seconds = 0;  // over every replica count (simulated costs)
  std::vector<std::string> notes;  // replica counts left out, and why
  double setup_seconds = 0;        // building, profiling and the baselines

  const graph::Graph& base() const { return models.front()->graph; }
  // The evaluator the config names: measured when it says so, simulated otherwise.
  const search::CandidateEvaluator& judge() const { return measured ? *measured : *simulated; }
  // The valid baselines and the scaled-out ones, one per distinct candidate.
  std::vector<search::NamedCandidate> WarmStarts() const;
  // What the search searches: the simulated judge, the groups' features, the warm starts and the
  // typical link.
  search::SearchProblem Problem() const;
};

// "models of 1/2/4 replicas (2,736/5,580/11,268 ops) and of 1 replica in 2/4 micro-batches
// (5,480/10,960 ops), 31 warm starts, set-up 2.1 s".
std::string DescribeSetup(const SearchSetup& setup);

// What `search` and `compare` note before they start: the replica and micro-batch counts left
// out, and, for a simulated search on the uncalibrated roofline model, how far off it may be and
// the `placer profile` command (for the config at `config_path`) that calibrates it.
std::vector<std::string> SetupNotes(const SearchSetup& setup, const std::string& config_path);

// "cluster: 2 of 2 workers still there, 0 placements reassigned; messages dropped: 3 (2 bad MAC,
// 1 replayed or not outstanding)", with a line per refused join and dropped worker; empty without
// a cluster.
std::string DescribeCluster(const SearchSetup& setup);

// Builds everything, reporting what takes time on `log`. Throws ConfigError, GraphError or
// InputError for bad input.
std::unique_ptr<SearchSetup> BuildSearchSetup(const config::Config& config, std::ostream& log);

// The groups the policy places, as search.grouping and search.max_groups say, and their name in
// messages and checkpoints ("coarsen, max_groups 256"). With a shipped expert placement for the
// model (read over `devices`), coarsening keeps its device classes apart while it can; an
// expert file that does not fit the model is said in `notes` when given.
graph::GroupingOptions GroupingOptionsFor(const config::Config& config, const graph::Graph& graph,
                                          const std::vector<std::string>& devices,
                                          std::vector<std::string>* notes = nullptr);
std::string GroupingName(const config::Config& config);

// The search's options from the config (budgets, policy, learner, what searches). Its wall budget
// is what search.max_wall_seconds leaves after the set-up, which planning includes (a tenth of
// it at least).
search::SearchOptions SearchOptionsFor(const SearchSetup& setup);
// The learned proposer's scorer file (search.edit_model, relative to the config's directory);
// empty unless search.edit_proposer is "learned". BuildSearchSetup has checked it by loading it
// (InputError naming the config, the key and the file when it cannot be read or is of another
// version or shape).
std::filesystem::path EditModelFileOf(const config::Config& config);
// search.policy_file resolved against the config's directory (empty: none).
std::filesystem::path PolicyFileOf(const config::Config& config);
search::RunIdentity RunIdentityFor(const SearchSetup& setup);

// The warm starts that are no baseline's row, for the final side-by-side judgement: `scaled_out`,
// then, with a measured judge, `pipelined`.
std::vector<search::NamedCandidate> DerivedWarmStarts(const SearchSetup& setup);

// The closing side-by-side's rounds: search.verify_rounds to search.verify_max_rounds measured,
// one simulated.
search::RoundOptions RoundOptionsFor(const SearchSetup& setup);
// A row's role by its method's name: "single device ..." and "data parallel ..." are the simple
// placements an answer that is not reliably faster gives way to.
search::Simplicity SimplicityOf(const std::string& method);

// The output directory's lock for the run's life (placer/run_lock.h), taken before any costly
// work; a lock left by a dead process is taken over, and said on `log`. Throws InputError (exit
// 2) naming the directory and the holder's PID when another run holds it.
std::unique_ptr<search::RunLock> LockOutputDirectory(const std::filesystem::path& directory,
                                                     std::ostream& log);

// "2 replicas (128/128)" or "1 replica".
std::string DescribeReplicas(const search::ReplicatedModel& model);

}  // namespace placer::setup
