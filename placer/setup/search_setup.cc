#include "placer/setup/search_setup.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <ostream>
#include <set>
#include <sstream>
#include <thread>

#include "placer/edit_model.h"
#include "placer/graph_policy.h"
#include "placer/setup/devices.h"
#include "placer/setup/input_error.h"
#include "placer/setup/model_factory.h"
#include "placer/setup/simulated_problem.h"
#include "placer/setup/tensor_parallel_models.h"
#include "placer/setup/warm_starts.h"
#include "placer/verifier.h"
#include "proto/message_auth.h"
#include "runtime/cluster/worker_pool.h"
#include "runtime/profiler.h"
#include "runtime/sim/simulated_evaluator.h"

namespace placer::setup {
namespace {

// The key the pool seals its messages under: cluster.key_file (created when missing), else
// PLACER_CLUSTER_KEY, else a new key for this run in the output directory; `source` says which,
// for the workers.
proto::ClusterKey ClusterKeyFor(const config::Config& config, std::string* source) {
  try {
    std::filesystem::path file = config.cluster.key_file;
    if (file.empty()) {
      if (const char* hex = std::getenv("PLACER_CLUSTER_KEY"); hex != nullptr && *hex != '\0') {
        *source = "PLACER_CLUSTER_KEY";
        return proto::ClusterKey::FromHex(hex, *source);
      }
      file = config.output.directory / "cluster.key";
      std::filesystem::create_directories(file.parent_path());
      proto::ClusterKey::Generate().WriteFile(file);
    } else if (!std::filesystem::exists(file)) {
      proto::ClusterKey::Generate().WriteFile(file);
    }
    *source = file.string();
    return proto::ClusterKey::ReadFile(file);
  } catch (const proto::KeyError& error) {
    throw InputError(error.what());
  } catch (const std::filesystem::filesystem_error& error) {
    throw InputError(fmt::format("cluster key: {}", error.what()));
  }
}

// The pool of a config's cluster: section, hosting the rendezvous; its workers join meanwhile.
std::shared_ptr<cluster::WorkerPool> StartPool(const config::Config& config, std::ostream& log) {
  std::ifstream file(config.source, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  if (!file || text.str().empty()) {
    throw InputError(fmt::format("{}: cannot read the config again for the cluster's workers",
                                 config.source.string()));
  }
  const config::ClusterConfig& c = config.cluster;
  std::string key_source;
  proto::ClusterKey key = ClusterKeyFor(config, &key_source);
  auto pool = std::make_shared<cluster::WorkerPool>(
      cluster::PoolOptions{.port = c.port,
                           .address = c.address,
                           .listen_address = c.listen_address,
                           .key = key,
                           .workers = c.workers,
                           .join_timeout_seconds = c.join_timeout_seconds,
                           .heartbeat_timeout_seconds = c.heartbeat_timeout_seconds,
                           .config_text = text.str(),
                           .config_path = std::filesystem::absolute(config.source).string()});
  const bool from_file = key_source != "PLACER_CLUSTER_KEY";
  log << fmt::format(
             "cluster: waiting for {} worker{} (placer worker with MASTER_ADDR={} "
             "MASTER_PORT={} WORLD_SIZE={} RANK=1..{} and {}{}); messages are sealed under that "
             "key, not encrypted\n",
             c.workers, c.workers == 1 ? "" : "s", c.address, pool->port(), c.workers + 1,
             c.workers, from_file ? "--key-file " : "", key_source)
      << std::flush;
  return pool;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The replicated pipelines to search: search.pipeline_replicas x the micro-batch counts above 1,
// every pair when the config names the replica counts, else the default ones within
// ActionSpace::kMaxPipelineOps. Throws InputError for a replica count that is not searched.
std::vector<search::ReplicatedPipeline> ReplicatedPipelinesFor(
    const config::Config& config, const std::vector<int>& replica_counts,
    const std::vector<int>& micro_batches, int devices, int64_t step_ops) {
  if (!config.search.pipeline_replicas) {
    // The default micro-batch counts grow with the device count; each replica's pipeline spans
    // fewer devices and keeps to its own share of them.
    return search::ActionSpace::DefaultReplicatedPipelines(
        search::ActionSpace::DefaultPipelineReplicaCounts(devices, replica_counts), micro_batches,
        config.model.batch_size, step_ops, config.search.micro_batches.empty() ? devices : 0);
  }
  std::vector<search::ReplicatedPipeline> pipelines;
  for (int r : *config.search.pipeline_replicas) {
    if (r > 1 &&
        std::find(replica_counts.begin(), replica_counts.end(), r) == replica_counts.end()) {
      throw InputError(fmt::format(
          "{}: search.pipeline_replicas: {} replicas are not searched (search.replicas: {})",
          config.source.string(), r, fmt::join(replica_counts, ", ")));
    }
    for (int m : micro_batches) {
      if (r > 1 && m > 1) pipelines.push_back({r, m});
    }
  }
  return pipelines;
}

// The tensor-parallel shapes to search: search.tensor_ways (or its default) x the replica counts
// it divides. Split steps are judged in this process: by the simulator, and in a measured search
// by running them on the devices (its simulator profiled on them, its closing side-by-side
// measured); a cluster's workers do not build them yet, so there naming ways is refused
// (InputError). Unnamed, only a simulated search gets them: a measured search's default space
// stays what its measured rows were taken with.
std::vector<search::TensorParallelShape> TensorParallelShapesFor(
    const config::Config& config, const std::vector<int>& replica_counts, int devices) {
  const bool in_process = config.cluster.workers == 0;
  if (!config.search.tensor_ways) {
    if (!in_process || graph::Describe(config.search.evaluator).runs_the_step) return {};
    return DefaultTensorParallelShapes(devices, config.simulation.gpus_per_host, replica_counts);
  }
  std::vector<search::TensorParallelShape> shapes;
  for (int ways : *config.search.tensor_ways) {
    if (ways == 1) continue;
    if (!in_process) {
      throw InputError(fmt::format(
          "{}: search.tensor_ways: {} ways: a cluster's workers do not build tensor-parallel "
          "steps (search in this process: cluster.workers: 0)",
          config.source.string(), ways));
    }
    if (devices % ways != 0) {
      throw InputError(fmt::format("{}: search.tensor_ways: {} ways do not divide the {} devices",
                                   config.source.string(), ways, devices));
    }
    const size_t before = shapes.size();
    for (int copies : replica_counts) {
      if (copies % ways == 0) shapes.push_back({copies, ways});
    }
    if (shapes.size() == before) {
      throw InputError(fmt::format(
          "{}: search.tensor_ways: {} ways divide no replica count searched (search.replicas: {})",
          config.source.string(), ways, fmt::join(replica_counts, ", ")));
    }
  }
  return shapes;
}

}  // namespace

std::vector<search::NamedCandidate> SearchSetup::WarmStarts() const {
  std::vector<search::NamedCandidate> warm;
  std::set<std::string> seen;
  for (const Baseline& b : baselines) {
    if (b.candidate && seen.insert(search::KeyOf(*b.candidate)).second) {
      warm.push_back({b.name, *b.candidate});
    }
  }
  for (const auto* list : {&scaled_out, &pipelined}) {
    for (const search::NamedCandidate& c : *list) {
      if (seen.insert(search::KeyOf(c.candidate)).second) warm.push_back(c);
    }
  }
  return warm;
}

std::vector<search::NamedCandidate> DerivedWarmStarts(const SearchSetup& setup) {
  std::vector<search::NamedCandidate> derived = setup.scaled_out;
  // The simulator judged the pipelined warm starts in the search already and would say the same
  // again (on NMT with 8 layers each is a 105k- or 209k-op step to simulate); a measured judge may
  // rank them above the simulator's favourites.
  if (setup.measured) derived.insert(derived.end(), setup.pipelined.begin(), setup.pipelined.end());
  return derived;
}

graph::GroupingOptions GroupingOptionsFor(const config::Config& config, const graph::Graph& graph,
                                          const std::vector<std::string>& devices,
                                          std::vector<std::string>* notes) {
  graph::GroupingOptions options{config.search.grouping, config.search.max_groups, {}};
  if (config.search.grouping != graph::GroupingMethod::kCoarsen) return options;
  // Coarsening merges within a layer, block or branch of the model (ops named alike) before it
  // mixes them, so that the search can move one layer without another; and it keeps the shipped
  // expert placement expressible over the groups (the search starts from it), by merging only ops
  // the expert puts on one device while that is enough. A file that does not fit this model is
  // said in `notes` (a search says it where the expert's row is made).
  std::vector<int> expert_devices;
  if (const std::filesystem::path expert = ExpertFile(config); !expert.empty()) {
    try {
      expert_devices =
          graph::ReadPlacementYaml(expert, graph, devices, ExpertFacts(config)).device_of_op;
    } catch (const graph::PlacementError& error) {
      if (notes != nullptr) {
        notes->push_back(fmt::format("the expert placement {} shapes no groups: {}",
                                     expert.string(), error.what()));
      }
    }
  }
  options.keep_apart = graph::CombineClasses(graph::NameClasses(graph, 2), expert_devices);
  return options;
}

std::string GroupingName(const config::Config& config) {
  return config.search.grouping == graph::GroupingMethod::kCoarsen
             ? fmt::format("coarsen, max_groups {}", config.search.max_groups)
             : graph::ToString(config.search.grouping);
}

std::string DescribeCluster(const SearchSetup& setup) {
  if (!setup.pool) return "";
  const cluster::WorkerPool& pool = *setup.pool;
  std::string text = fmt::format(
      "cluster: {} of {} worker{} still there, {} placement{} reassigned; messages dropped: {}",
      pool.live_workers(), pool.workers(), pool.workers() == 1 ? "" : "s", pool.reassigned(),
      pool.reassigned() == 1 ? "" : "s", pool.dropped_messages().ToString());
  for (const std::string& why : pool.refused()) text += "\n  refused " + why;
  for (const std::string& why : pool.dropped()) text += "\n  dropped " + why;
  return text;
}

std::vector<std::string> SetupNotes(const SearchSetup& s, const std::string& config_path) {
  std::vector<std::string> notes = s.notes;
  if (!s.measured && s.config.simulation.profile.empty()) {
    for (std::string& note : CostModelNotes(s.config, *s.costs.front(), s.models.front()->graph,
                                            s.devices, config_path, false)) {
      notes.push_back(std::move(note));
    }
  }
  return notes;
}

std::string DescribeSetup(const SearchSetup& s) {
  std::vector<std::string> counts, ops, micro_batches, micro_batch_ops, replicated, replicated_ops,
      split, split_ops;
  for (const auto& m : s.models) {
    const std::string size = std::to_string(m->graph.num_ops());
    if (m->tensor_ways > 1) {
      split.push_back(fmt::format("{}x{}", m->replicas / m->tensor_ways, m->tensor_ways));
      split_ops.push_back(size);
    } else if (m->micro_batches == 1) {
      counts.push_back(std::to_string(m->replicas));
      ops.push_back(size);
    } else if (m->replicas == 1) {
      micro_batches.push_back(std::to_string(m->micro_batches));
      micro_batch_ops.push_back(size);
    } else {
      replicated.push_back(fmt::format("{}x{}", m->replicas, m->micro_batches));
      replicated_ops.push_back(size);
    }
  }
  const std::string pipelines =
      micro_batches.empty()
          ? ""
          : fmt::format(" and of 1 replica in {} micro-batches ({} ops)",
                        fmt::join(micro_batches, "/"), fmt::join(micro_batch_ops, "/"));
  const std::string replicated_pipelines =
      replicated.empty()
          ? ""
          : fmt::format(", replicated pipelines {} (replicas x micro-batches; {} ops)",
                        fmt::join(replicated, "/"), fmt::join(replicated_ops, "/"));
  const std::string tensor_parallel =
      split.empty() ? ""
                    : fmt::format(", tensor-parallel {} (replicas x shards; {} ops)",
                                  fmt::join(split, "/"), fmt::join(split_ops, "/"));
  return fmt::format("models of {} replicas ({} ops){}{}{}, {} warm starts, set-up {:.1f} s",
                     fmt::join(counts, "/"), fmt::join(ops, "/"), pipelines, replicated_pipelines,
                     tensor_parallel, s.WarmStarts().size(), s.setup_seconds);
}

search::RoundOptions RoundOptionsFor(const SearchSetup& setup) {
  return search::RoundsFor(setup.judge(), {.min_rounds = setup.config.search.verify_rounds,
                                           .max_rounds = setup.config.search.verify_max_rounds});
}

search::Simplicity SimplicityOf(const std::string& method) {
  if (method.starts_with("single device")) return search::Simplicity::kSingleDevice;
  if (method.starts_with("data parallel")) return search::Simplicity::kDataParallel;
  return search::Simplicity::kOther;
}

std::unique_ptr<search::RunLock> LockOutputDirectory(const std::filesystem::path& directory,
                                                     std::ostream& log) {
  std::unique_ptr<search::RunLock> lock;
  try {
    lock = std::make_unique<search::RunLock>(directory);
  } catch (const search::RunLockHeld& held) {
    throw InputError(held.what());
  }
  if (const std::optional<pid_t> dead = lock->taken_over_from()) {
    log << fmt::format("note: took over {}, left by process {} (no longer running)\n",
                       lock->file().string(), *dead);
  }
  return lock;
}

std::string DescribeReplicas(const search::ReplicatedModel& model) {
  if (model.tensor_ways > 1)
    return search::DescribeTensorParallel(model.replicas, model.tensor_ways);
  if (model.micro_batches > 1) {
    const std::string micro_batches = fmt::format("{} micro-batches of {}", model.micro_batches,
                                                  model.shard_sizes.front() / model.micro_batches);
    return model.replicas == 1 ? micro_batches
                               : fmt::format("{} replicas of {}", model.replicas, micro_batches);
  }
  return model.replicas == 1
             ? "1 replica"
             : fmt::format("{} replicas ({})", model.replicas, fmt::join(model.shard_sizes, "/"));
}

std::filesystem::path EditModelFileOf(const config::Config& config) {
  if (config.search.options.edit_proposal != search::EditProposal::kLearned) return {};
  const std::filesystem::path& file = config.search.options.edit_model_file;
  return file.is_relative() ? config.source.parent_path() / file : file;
}

std::filesystem::path PolicyFileOf(const config::Config& config) {
  const std::filesystem::path& file = config.search.options.policy.pretrained_file;
  if (file.empty()) return {};
  return file.is_relative() ? config.source.parent_path() / file : file;
}

namespace {

// A pretrained policy that cannot be read is refused as bad input before any work.
void CheckPolicyFile(const config::Config& config) {
  const std::filesystem::path file = PolicyFileOf(config);
  if (file.empty()) return;
  try {
    search::PolicyOptions options;
    options.kind = search::PolicyKind::kGraph;
    search::GraphPolicyImpl(options).LoadWeights(file);
  } catch (const std::runtime_error& error) {
    throw InputError(
        fmt::format("{}: search.policy_file: {}", config.source.string(), error.what()));
  }
}

// A learned scorer that cannot be read is refused as bad input before any work, not mid-search.
void CheckEditModel(const config::Config& config) {
  const std::filesystem::path file = EditModelFileOf(config);
  if (file.empty()) return;
  try {
    search::EditModel::Load(file);
  } catch (const std::runtime_error& error) {
    throw InputError(
        fmt::format("{}: search.edit_model: {}", config.source.string(), error.what()));
  }
}

}  // namespace

std::unique_ptr<SearchSetup> BuildSearchSetup(const config::Config& config, std::ostream& log) {
  const auto start = std::chrono::steady_clock::now();
  auto s = std::make_unique<SearchSetup>();
  s->config = config;
  CheckEditModel(config);
  CheckPolicyFile(config);
  s->devices = setup::ResolveDevices(config);
  s->names = graph::DeviceNames(s->devices);
  // A kind that runs the step is spent on the best candidates and the rows; the search learns on
  // a simulator profiled on these devices.
  const bool measured = graph::Describe(config.search.evaluator).runs_the_step;
  if (config.cluster.workers > 0) s->pool = StartPool(config, log);
  // Measured, a CPU worker beyond this machine's cores would share a core with another and time
  // a machine that is not there (absent GPUs are refused by ResolveDevices).
  const auto cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (const graph::Device& device : s->devices) {
    if (measured && device.type == graph::DeviceType::kCpu && device.index >= cores) {
      throw InputError(fmt::format(
          "{}: device '{}' is not present: this machine has {} core{} (cpu:0 to cpu:{}); a "
          "simulated search (search.evaluator: simulated) may use absent devices",
          config.source.string(), device.name, cores, cores == 1 ? "" : "s", cores - 1));
    }
  }
  const auto devices = static_cast<int>(s->names.size());

  s->steps = std::make_unique<StepCache>(config);
  const graph::Graph& base = s->steps->base();
  s->grouping = graph::MakeGrouping(base, GroupingOptionsFor(config, base, s->names));
  s->grouping_name = GroupingName(config);
  s->features = graph::ComputeGroupFeatures(base, s->grouping);
  s->steps->UseGrouping(s->grouping);
  std::vector<int> wanted =
      config.search.replicas.empty()
          ? search::ActionSpace::DefaultReplicaCounts(devices, config.model.batch_size)
          : config.search.replicas;
  for (int r : wanted) {
    if (r > devices || r > config.model.batch_size) {
      throw InputError(fmt::format(
          "{}: search.replicas: {} replicas need at most as many devices ({}) and rows of the "
          "batch ({})",
          config.source.string(), r, devices, config.model.batch_size));
    }
  }
  // Pipelines are judged wherever the step is: the simulators here, the measured evaluators (each
  // micro-batched step profiled for the search's simulator below) and the cluster's workers (the
  // evaluation task carries M and the schedule; `placer worker` builds the same step).
  const std::vector<int> micro_batches =
      config.search.micro_batches.empty()
          ? search::ActionSpace::DefaultMicroBatchCounts(
                config.model.batch_size, base.num_ops(),
                search::ActionSpace::DefaultMaxMicroBatches(devices))
          : config.search.micro_batches;
  s->models = SearchSteps(
      *s->steps,
      {.replica_counts = wanted,
       .micro_batch_counts = micro_batches,
       .pipelines = ReplicatedPipelinesFor(config, wanted, micro_batches, devices, base.num_ops()),
       .tensor_parallel = TensorParallelShapesFor(config, wanted, devices),
       .max_tensor_parallel_ops = kMaxTensorParallelOps},
      &s->notes);
  const search::ActionSpace space = search::SpaceOf(devices, s->models);

  if (measured) {
    // The search learns on a simulator of these very devices: each op of each model timed here.
    // The profile runs every op on each device in turn, which a memory limit meant for placements
    // (where only pipelines may fit) would refuse: it times the ops without the limits, and the
    // simulator holds placements to them.
    graph::DeviceSet unlimited = s->devices;
    for (graph::Device& device : unlimited) device.memory_capacity = 0;
    for (const auto& m : s->models) {
      const auto profiling = std::chrono::steady_clock::now();
      log << fmt::format("profiling the training step with {} on {} for the search's simulator",
                         DescribeReplicas(*m), fmt::join(s->names, ", "))
          << std::flush;
      s->costs.push_back(std::make_unique<sim::ProfiledCostModel>(
          runtime::ProfileDevices(m->graph, unlimited,
                                  {.warmup_steps = std::min(3, config.measurement.warmup_steps),
                                   .timed_steps = std::max(5, config.measurement.timed_steps),
                                   .seed = config.model.init_seed,
                                   .model_name = config.model.name()})));
      log << fmt::format(": {:.1f} s\n", SecondsSince(profiling));
    }
  } else {
    s->costs.push_back(CostModelFor(config));
  }
  std::vector<const search::ReplicatedModel*> models;
  std::vector<graph::Evaluator*> simulators, measurers;
  for (size_t i = 0; i < s->models.size(); ++i) {
    const search::ReplicatedModel& m = *s->models[i];
    auto simulator =
        std::make_unique<sim::SimulatedEvaluator>(m.graph, s->devices, *s->costs[measured ? i : 0]);
    s->lower_bound_seconds =
        i == 0 ? simulator->lower_bound().seconds
               : std::min(s->lower_bound_seconds, simulator->lower_bound().seconds);
    s->simulators.push_back(std::move(simulator));
    simulators.push_back(s->simulators.back().get());
    models.push_back(&m);
    if (s->pool) {
      // The workers judge what the config's evaluator judges; a measured search's learning
      // simulator (profiled here) stays here.
      s->pooled.push_back(
          std::make_unique<cluster::PoolEvaluator>(s->pool, config.search.evaluator, m.replicas));
      if (measured) {
        measurers.push_back(s->pooled.back().get());
      } else {
        simulators.back() = s->pooled.back().get();
      }
    } else if (measured || config.search.evaluator != graph::EvaluatorKind::kSimulated) {
      // The configured kind's own evaluator: a measured one beside the learning simulator, or
      // another kind that judges throughout in the simulator's place.
      s->judges.push_back(
          MakeEvaluator(config.search.evaluator, m.graph, s->devices, config,
                        [&]() -> const sim::CostModel& { return *s->costs[measured ? i : 0]; }));
      if (measured) {
        measurers.push_back(s->judges.back().get());
      } else {
        simulators.back() = s->judges.back().get();
      }
    }
  }
  s->simulated = std::make_unique<search::CandidateEvaluator>(space, models, simulators, s->names);
  if (measured) {
    s->measured = std::make_unique<search::CandidateEvaluator>(space, models, measurers, s->names);
  }
  AddWarmStarts(*s, space);
  if (s->pool) {
    s->pool->WaitForWorkers();
    log << fmt::format("cluster: {} worker{} joined\n", s->pool->workers(),
                       s->pool->workers() == 1 ? "" : "s");
  }
  s->setup_seconds = SecondsSince(start);
  return s;
}

search::SearchProblem SearchSetup::Problem() const {
  if (costs.empty()) return {simulated.get(), features, WarmStarts()};
  return {simulated.get(), features, WarmStarts(),
          sim::TypicalSecondsPerByte(*costs.front(), devices),
          ScheduleCostsOf(*costs.front(), base(), grouping, devices)};
}

search::SearchOptions SearchOptionsFor(const SearchSetup& setup) {
  // The config's options, with what is derived: the search's share of the wall budget, and the
  // files resolved against the config's directory (the scorer's only for the learned proposer).
  search::SearchOptions o = setup.config.search.options;
  o.max_wall_seconds = std::max(o.max_wall_seconds - setup.setup_seconds, 0.1 * o.max_wall_seconds);
  o.policy.pretrained_file = PolicyFileOf(setup.config);
  o.edit_model_file = EditModelFileOf(setup.config);
  return o;
}

namespace {

// "RxM" per replicated pipeline of the space, for the run's identity.
std::vector<std::string> ReplicatedPipelineCounts(const search::ActionSpace& space) {
  std::vector<std::string> counts;
  for (const search::ReplicatedPipeline& p : space.replicated_pipelines()) {
    counts.push_back(fmt::format("{}x{}", p.replicas, p.micro_batches));
  }
  return counts;
}

// "R/tT" per tensor-parallel shape of the space, for the run's identity.
std::vector<std::string> TensorParallelShapes(const search::ActionSpace& space) {
  std::vector<std::string> shapes;
  for (const search::TensorParallelShape& t : space.tensor_parallel()) {
    shapes.push_back(fmt::format("{}/t{}", t.replicas, t.tensor_ways));
  }
  return shapes;
}

}  // namespace

search::RunIdentity RunIdentityFor(const SearchSetup& s) {
  return {s.config.model.name(),
          s.grouping_name,
          graph::GroupingFingerprint(s.grouping),
          s.grouping.num_groups(),
          s.names,
          s.simulated->space().replica_counts(),
          s.simulated->space().micro_batch_counts(),
          ReplicatedPipelineCounts(s.simulated->space()),
          TensorParallelShapes(s.simulated->space())};
}

}  // namespace placer::setup
