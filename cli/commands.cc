#include "cli/commands.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>

#include "cli/compare_command.h"
#include "cli/inspect.h"
#include "cli/search_command.h"
#include "cli/worker_command.h"
#include "graph/micro_batches.h"
#include "graph/placement.h"
#include "placer/action_space.h"
#include "placer/baselines/baselines.h"
#include "placer/config/config.h"
#include "placer/setup/devices.h"
#include "placer/setup/model_factory.h"
#include "placer/setup/portable_float.h"
#include "placer/setup/pretraining.h"
#include "placer/setup/search_setup.h"
#include "placer/setup/step_cache.h"
#include "proto/writers.h"
#include "runtime/device.h"
#include "runtime/measured_evaluator.h"
#include "runtime/profiler.h"
#include "runtime/sim/simulated_evaluator.h"
#include "runtime/trace.h"
#include "runtime/trainer.h"

namespace placer::cli {
namespace {

int Inspect(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  setup::StepCache steps(config);
  const graph::Graph& graph = steps.Get({.replicas = config.model.replicas}).graph;
  std::cout << fmt::format("model: {} (batch {}, SGD lr {})\n\n", config.model.name(),
                           config.model.batch_size, config.model.learning_rate);
  PrintInspection(graph, std::cout);
  // The groups a search would place, which depend on the devices when an expert placement
  // shapes them; devices this machine cannot provide leave them to the other rules.
  std::vector<std::string> devices, notes;
  try {
    devices = graph::DeviceNames(setup::ResolveDevices(config));
  } catch (const config::ConfigError& error) {
    notes.push_back(fmt::format("devices left out of the grouping: {}", error.what()));
  }
  PrintGroups(graph,
              graph::MakeGrouping(graph, setup::GroupingOptionsFor(config, graph, devices, &notes)),
              setup::GroupingName(config), std::cout);
  for (const std::string& note : notes) std::cout << "note: " << note << '\n';
  return kExitOk;
}

int Validate(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  setup::StepCache steps(config);
  const graph::Graph& graph = steps.Get({.replicas = config.model.replicas}).graph;
  graph::DeviceSet devices = setup::ResolveDevices(config);
  if (!config.simulation.profile.empty()) setup::CostModelFor(config);
  std::cout << fmt::format("{}: valid ({} model, {} ops, {} parameters; devices {})\n",
                           c.config_path, config.model.name(), graph.num_ops(),
                           graph.ParameterCount(), fmt::join(graph::DeviceNames(devices), ", "));
  return kExitOk;
}

// Protobuf placements (what `placer search` writes next to the YAML) go by extension.
bool IsProtoFile(const std::string& path) {
  const std::string ext = std::filesystem::path(path).extension().string();
  return ext == ".pb" || ext == ".pbtxt" || ext == ".txtpb";
}

// The placement named on the command line: a YAML file (its variants chosen by the device count
// and `facts`, see setup::ExpertFacts), or every op on one device (by default the first configured
// device).
graph::Placement ChoosePlacement(const Commands& c, const graph::Graph& graph,
                                 const graph::DeviceSet& devices, std::string& description,
                                 const std::map<std::string, std::string>& facts) {
  std::vector<std::string> names = graph::DeviceNames(devices);
  if (!c.placement_path.empty()) {
    if (!c.device.empty()) throw InputError("give either --placement or --device, not both");
    description = c.placement_path;
    try {
      if (IsProtoFile(c.placement_path)) {
        return proto::ReadPlacementProto(c.placement_path, graph, names);
      }
      return graph::ReadPlacementYaml(c.placement_path, graph, names, facts);
    } catch (const graph::PlacementError& error) {
      throw InputError(error.what());
    }
  }
  std::string device = c.device.empty() ? names.front() : c.device;
  auto it = std::find(names.begin(), names.end(), device);
  if (it == names.end()) {
    throw InputError(fmt::format("--device {}: not one of the configured devices ({})", device,
                                 fmt::join(names, ", ")));
  }
  description = "every op on " + device;
  return graph::Placement::AllOn(graph, names, static_cast<int>(it - names.begin()));
}

// `predicted_batch`: the result is the simulator's for a step of that many rows, which has no
// spread to state but a throughput.
void PrintEvaluation(const graph::EvaluationResult& r, std::ostream& out,
                     int64_t predicted_batch = 0) {
  if (predicted_batch > 0) {
    out << fmt::format("predicted step time: {:.3f} ms, throughput {:.1f} samples/s\n",
                       r.step_seconds * 1e3, static_cast<double>(predicted_batch) / r.step_seconds);
  } else {
    out << fmt::format("step time: {:.3f} ms (median of {}; min {:.3f}, max {:.3f})\n",
                       r.step_seconds * 1e3, r.step_samples.size(), r.min_seconds * 1e3,
                       r.max_seconds * 1e3);
  }
  out << fmt::format("\n{:<10} {:>10} {:>7} {:>14}\n", "device", "busy ms", "busy", "peak memory");
  for (const graph::DeviceStats& d : r.devices) {
    out << fmt::format("{:<10} {:>10.3f} {:>6.0f}% {:>10.2f} MiB\n", d.device, d.busy_seconds * 1e3,
                       100 * d.busy_seconds / r.step_seconds,
                       static_cast<double>(d.peak_memory_bytes) / (1 << 20));
  }
  if (!r.transfers.empty()) {
    out << fmt::format("\n{:<22} {:>7} {:>12} {:>10}\n", "transfer", "copies", "bytes", "ms");
    for (const graph::TransferStats& t : r.transfers) {
      out << fmt::format("{:<22} {:>7} {:>12} {:>10.3f}\n", t.from + " -> " + t.to, t.count,
                         t.bytes, t.seconds * 1e3);
    }
  }
}

// The replica count of the model a command runs: the placement file's (`replicas:`, as search
// writes it for a replicated placement), else model.replicas.
int ReplicasFor(const Commands& c, const config::Config& config) {
  if (c.placement_path.empty()) return config.model.replicas;
  try {
    return IsProtoFile(c.placement_path) ? proto::ReadPlacementProtoReplicas(c.placement_path)
                                         : graph::ReadPlacementReplicas(c.placement_path);
  } catch (const graph::PlacementError& error) {
    throw InputError(error.what());
  }
}

// The micro-batch count and schedule of the placement file (`micro_batches:`, `schedule:`), or
// none.
graph::PipelineSettings PipelineFor(const Commands& c) {
  if (c.placement_path.empty()) return {};
  try {
    return IsProtoFile(c.placement_path) ? proto::ReadPlacementProtoPipeline(c.placement_path)
                                         : graph::ReadPlacementPipeline(c.placement_path);
  } catch (const graph::PlacementError& error) {
    throw InputError(error.what());
  }
}

// The shards per replica of the placement file (`tensor_ways:`), or 1.
int TensorWaysFor(const Commands& c) {
  if (c.placement_path.empty()) return 1;
  try {
    return IsProtoFile(c.placement_path) ? proto::ReadPlacementProtoTensorWays(c.placement_path)
                                         : graph::ReadPlacementTensorWays(c.placement_path);
  } catch (const graph::PlacementError& error) {
    throw InputError(error.what());
  }
}

// The training step the placement file is for: replicated, micro-batched (its op names are then
// "m<k>/<op>"), both ("r<r>/m<k>/<op>"), split ("r<r>/tp<s>/<op>"), or the configured model.
const graph::Graph& ModelFor(const Commands& c, const config::Config& config,
                             setup::StepCache& steps) {
  const setup::StepShape shape{ReplicasFor(c, config), PipelineFor(c).micro_batches,
                               TensorWaysFor(c)};
  if (shape.micro_batches == 1 && shape.tensor_ways == 1) return steps.Get(shape).graph;
  try {
    return steps.Get(shape).graph;
  } catch (const graph::GraphError& error) {
    throw InputError(fmt::format("{}: {}", c.placement_path, error.what()));
  } catch (const InputError& error) {
    throw InputError(fmt::format("{}: {}", c.placement_path, error.what()));
  }
}

int Evaluate(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  setup::StepCache steps(config);
  const graph::Graph& model = ModelFor(c, config, steps);
  graph::DeviceSet devices = setup::ResolveDevices(config, c.predict_only);
  std::string description;
  const search::ReplicatedModel* dp = nullptr;
  graph::Placement placement;
  if (c.data_parallel) {
    if (!c.placement_path.empty() || !c.device.empty()) {
      throw InputError("--data-parallel places the replicas itself: drop --placement/--device");
    }
    dp = &steps.DataParallel(static_cast<int>(devices.size()));
    placement = setup::ReplicaPlacement(*dp, graph::DeviceNames(devices));
    description = fmt::format("data parallel, shards of {}", fmt::join(dp->shard_sizes, "/"));
  } else {
    placement = ChoosePlacement(c, model, devices, description, setup::ExpertFacts(config));
    if (placement.micro_batches > 1) {
      const int replicas = ReplicasFor(c, config);
      description += fmt::format(" ({}{} micro-batches of {} rows, {})",
                                 replicas > 1 ? fmt::format("{} replicas x ", replicas) : "",
                                 placement.micro_batches,
                                 config.model.batch_size / replicas / placement.micro_batches,
                                 graph::ToString(placement.schedule));
    }
    if (const int ways = TensorWaysFor(c); ways > 1) {
      description +=
          fmt::format(" ({})", search::DescribeTensorParallel(ReplicasFor(c, config) * ways, ways));
    }
  }
  const graph::Graph& graph = dp != nullptr ? dp->graph : model;
  std::cout << fmt::format("model: {} (batch {}), placement: {}, devices: {}\n",
                           config.model.name(), config.model.batch_size, description,
                           fmt::join(graph::DeviceNames(devices), ", "));
  // GPUs the machine lacks exist only in the simulator (a simulated config may name them).
  const int gpus_present = runtime::NumCudaDevicesPresent();
  bool measurable =
      !c.predict_only && std::all_of(devices.begin(), devices.end(), [&](const auto& d) {
        return d.type != graph::DeviceType::kCuda || d.index < gpus_present;
      });
  // A placement across processes is measured by one process per rank, started with torchrun's
  // variables; without them, --simulate predicts it (process k's devices on host k) and stops.
  const bool across_processes = std::any_of(devices.begin(), devices.end(), [](const auto& d) {
    return graph::DeviceProcess(d.name) >= 0;
  });
  const bool simulate_only =
      !c.predict_only && across_processes && c.simulate && std::getenv("WORLD_SIZE") == nullptr;
  if (simulate_only) {
    measurable = false;
    std::cout << "note: the devices span processes and this process has no rank (torchrun's "
                 "MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK): simulated, not measured\n";
  }
  if (!measurable && !c.simulate) {
    throw InputError(fmt::format(
        "{}: the devices include GPUs this machine lacks ({} present); add --simulate to predict "
        "the step time instead of measuring it",
        c.config_path, gpus_present));
  }
  // The simulated trace goes next to the measured one: "<trace>.simulated.json" (or to the trace
  // path itself when nothing is measured), so that both open side by side in Perfetto.
  std::filesystem::path simulated_trace;
  if (!c.trace_path.empty() && c.simulate) {
    simulated_trace = measurable
                          ? std::filesystem::path(c.trace_path).replace_extension(".simulated.json")
                          : std::filesystem::path(c.trace_path);
  }
  std::optional<graph::EvaluationResult> predicted;
  if (c.simulate) {
    std::unique_ptr<sim::CostModel> costs = setup::CostModelFor(config);
    sim::SimulatedEvaluator simulator(graph, devices, *costs,
                                      {.record_trace = !simulated_trace.empty()});
    predicted = simulator.Evaluate(placement);
    std::cout << fmt::format(
        "simulated ({}): {}; lower bound {:.3f} ms\n",
        config.simulation.profile.empty() ? "roofline model" : config.simulation.profile.string(),
        predicted->valid ? fmt::format("{:.3f} ms", predicted->step_seconds * 1e3)
                         : "invalid: " + predicted->invalid_reason,
        simulator.lower_bound().seconds * 1e3);
    for (const std::string& note :
         setup::CostModelNotes(config, *costs, graph, devices, c.config_path, c.data_parallel)) {
      std::cout << "note: " << note << '\n';
    }
    if (predicted->valid && !simulated_trace.empty()) {
      runtime::WriteChromeTrace(
          simulated_trace, predicted->trace,
          (c.predict_only ? "placer predict: " : "placer evaluate --simulate: ") + description);
      std::cout << "simulated trace: " << simulated_trace.string() << '\n';
    }
  }
  if (!measurable) {
    if (!predicted->valid) return kExitFailure;
    std::cout << '\n';
    PrintEvaluation(*predicted, std::cout, config.model.batch_size);
    return kExitOk;
  }
  runtime::MeasurementOptions options = setup::MeasurementOptionsFor(config);
  options.record_trace = !c.trace_path.empty();
  options.processes = JoinProcessesOf(devices);
  runtime::MeasuredEvaluator evaluator(graph, devices, options);
  graph::EvaluationResult result = evaluator.Evaluate(placement);
  if (predicted && predicted->valid && result.valid) {
    std::cout << fmt::format("simulated / measured: {:.3f}\n",
                             predicted->step_seconds / result.step_seconds);
  }
  if (!result.valid) {
    std::cout << "invalid placement: " << result.invalid_reason << '\n';
    return kExitFailure;
  }
  PrintEvaluation(result, std::cout);
  if (!c.trace_path.empty()) {
    runtime::WriteChromeTrace(c.trace_path, result.trace, "placer evaluate: " + description);
    std::cout << "\ntrace of the last timed step: " << c.trace_path
              << " (open in https://ui.perfetto.dev or chrome://tracing)\n";
  }
  return kExitOk;
}

// `evaluate --simulate` without the measurement, so on GPUs this machine lacks too.
int Predict(const Commands& c) {
  Commands predicting = c;
  predicting.simulate = true;
  predicting.predict_only = true;
  return Evaluate(predicting);
}

int Profile(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  graph::DeviceSet devices = setup::ResolveDevices(config);
  // --data-parallel: the replicated step `evaluate --data-parallel` runs, whose ops (r<r>/<op>, on
  // shards of the batch) a profile of the model alone does not time.
  // Its devices' slowdown of each other is then timed with each running its own replica.
  std::optional<graph::Placement> replicas;
  setup::StepCache steps(config);
  const search::ReplicatedModel& step = c.data_parallel
                                            ? steps.DataParallel(static_cast<int>(devices.size()))
                                            : steps.Get({.replicas = config.model.replicas});
  if (c.data_parallel) replicas = setup::ReplicaPlacement(step, graph::DeviceNames(devices));
  const graph::Graph& graph = step.graph;
  std::filesystem::path output = c.output_path.empty() ? config.output.directory / "profile.json"
                                                       : std::filesystem::path(c.output_path);
  std::cout << fmt::format("profiling {} ops of {} on {}\n", graph.num_ops(), config.model.name(),
                           fmt::join(graph::DeviceNames(devices), ", "));
  sim::ProfiledCostModel profile =
      runtime::ProfileDevices(graph, devices,
                              {.warmup_steps = config.measurement.warmup_steps,
                               .timed_steps = std::max(5, config.measurement.timed_steps),
                               .seed = config.model.init_seed,
                               .model_name = config.model.name(),
                               .concurrent_shares = replicas});
  profile.Save(output);
  std::cout << fmt::format(
      "{} op timings and {} devices' links written to {}\n"
      "use it with  simulation: {{profile: {}}}\n",
      profile.num_op_entries(), devices.size(), output.string(), output.string());
  return kExitOk;
}

int Train(const Commands& c) {
  config::Config config = config::LoadConfig(c.config_path);
  setup::StepCache steps(config);
  const graph::Graph& single = steps.base();
  graph::Graph eval_graph = steps.forward()(config.model.batch_size, 0);
  graph::DeviceSet devices = setup::ResolveDevices(config);
  if (c.epochs < 1) throw InputError("--epochs must be at least 1");
  // Fashion-MNIST feeds [batch, 1, 28, 28] images to an input named "images": the zoo models
  // read tokens or colour images, other sizes of LeNet other images.
  const std::optional<graph::TensorId> images = single.FindTensor("images");
  if (!images || single.tensor(*images).shape != graph::Shape{config.model.batch_size, 1, 28, 28}) {
    throw InputError(fmt::format(
        "placer train feeds Fashion-MNIST images [batch, 1, 28, 28] to an input named 'images', "
        "which {} cannot read; time its training step with placer evaluate",
        config.model.onnx.empty() ? fmt::format("model.builtin '{}'", config.model.builtin)
                                  : fmt::format("model.onnx {}", config.model.onnx.string())));
  }
  std::string description;
  std::optional<graph::DataParallelGraph> dp;
  runtime::TrainingSetup setup;
  // The trainer feeds the shards as a graph::DataParallelGraph says them: the cached step's copy
  // (a Fashion-MNIST model's, small), replica r on device r.
  auto replicated = [&](const search::ReplicatedModel& step) {
    return graph::DataParallelGraph{
        .graph = step.graph,
        .placement = setup::ReplicaPlacement(step, graph::DeviceNames(devices)),
        .shard_sizes = step.shard_sizes};
  };
  if (c.data_parallel) {
    dp = replicated(steps.DataParallel(static_cast<int>(devices.size())));
    setup = runtime::DataParallelSetup(*dp);
    description = fmt::format("data parallel, shards of {}", fmt::join(dp->shard_sizes, "/"));
  } else if (const int replicas = ReplicasFor(c, config); replicas > 1) {
    dp = replicated(steps.Get({.replicas = replicas}));
    setup = runtime::DataParallelSetup(*dp);
    setup.placement =
        ChoosePlacement(c, dp->graph, devices, description, setup::ExpertFacts(config));
  } else {
    setup = runtime::SingleModelSetup(
        single, ChoosePlacement(c, single, devices, description, setup::ExpertFacts(config)));
  }
  runtime::ImageDataset train = runtime::LoadFashionMnist("train");
  runtime::ImageDataset test = runtime::LoadFashionMnist("test");
  std::cout << fmt::format(
      "training {} on Fashion-MNIST ({} train, {} test images), batch {}, "
      "lr {}, {}, devices: {}\n",
      config.model.name(), train.count, test.count, config.model.batch_size,
      config.model.learning_rate, description, fmt::join(graph::DeviceNames(devices), ", "));
  std::cout << fmt::format("{:>5} {:>6} {:>10} {:>9} {:>11}\n", "epoch", "steps", "train loss",
                           "test acc", "s / epoch");
  runtime::TrainOptions options{
      .epochs = c.epochs, .max_steps_per_epoch = c.max_steps, .seed = config.model.init_seed};
  runtime::Train(setup, eval_graph, devices, train, test, options,
                 [](const runtime::EpochReport& r) {
                   std::cout << fmt::format("{:>5} {:>6} {:>10.4f} {:>8.2f}% {:>11.2f}\n", r.epoch,
                                            r.steps, r.train_loss, 100 * r.test_accuracy, r.seconds)
                             << std::flush;
                 });
  return kExitOk;
}

int Pretrain(const Commands& c) {
  setup::PretrainOptions options;
  options.iterations = c.pretrain_iterations;
  options.problems_per_iteration = c.pretrain_problems;
  options.refine_rounds = c.pretrain_rounds;
  options.seed = c.pretrain_seed;
  const std::filesystem::path directory = c.pretrain_directory;
  try {
    setup::Pretrain(options, directory, std::cout);
  } catch (const std::runtime_error& error) {
    throw InputError(error.what());  // a directory of another run, or unreadable files
  }
  std::cout << fmt::format(
      "edit model: {} (use it with search.edit_proposer: learned, "
      "search.edit_model: <this file>)\n",
      (directory / setup::kEditModelFile).string());
  return kExitOk;
}

CLI::App* AddConfigCommand(CLI::App& app, Commands& c, const std::string& name,
                           const std::string& help, int (*body)(const Commands&)) {
  CLI::App* sub = app.add_subcommand(name, help);
  sub->add_option("-c,--config", c.config_path, "YAML config file (see configs/SCHEMA.md)")
      ->required();
  sub->callback([&c, body] { c.run = [&c, body] { return body(c); }; });
  return sub;
}

// The placement to run (or predict, or train under): a file, or every op on one device.
void AddPlacementOptions(CLI::App& sub, Commands& c) {
  sub.add_option("-p,--placement", c.placement_path,
                 "placement: YAML (op name -> device), or protobuf (.pb, .pbtxt) as search writes");
  sub.add_option("-d,--device", c.device, "put every op on this device instead");
}

}  // namespace

void RegisterCommands(CLI::App& app, Commands& c) {
  AddConfigCommand(app, c, "inspect",
                   "print the training step: ops, shapes, parameters, FLOPs and bytes", Inspect);
  AddConfigCommand(app, c, "validate", "check a config and the model it describes", Validate);
  CLI::App* evaluate = AddConfigCommand(
      app, c, "evaluate", "run and time the real training step under one placement", Evaluate);
  AddPlacementOptions(*evaluate, c);
  evaluate->add_option("-t,--trace", c.trace_path, "write a Chrome trace of the last timed step");
  evaluate->add_flag("--simulate", c.simulate,
                     "also print the simulator's prediction and the lower bound");
  evaluate->add_flag("--data-parallel", c.data_parallel,
                     "replicate the model on every device, split the minibatch, sum gradients");
  CLI::App* predict = AddConfigCommand(
      app, c, "predict",
      "predict a placement's step time, throughput, device busy time and peak memory with the "
      "simulator, on any GPUs (simulation.gpu_kind, devices[i].kind), measuring nothing",
      Predict);
  AddPlacementOptions(*predict, c);
  predict->add_option("-t,--trace", c.trace_path, "write the simulated step as a Chrome trace");
  predict->add_flag("--data-parallel", c.data_parallel,
                    "replicate the model on every device, split the minibatch, sum gradients");
  CLI::App* profile = AddConfigCommand(
      app, c, "profile", "time every op on every device and the copies between them", Profile);
  profile->add_option("-o,--output", c.output_path,
                      "cost profile file (default: <output.directory>/profile.json)");
  profile->add_flag(
      "--data-parallel", c.data_parallel,
      "profile the data-parallel step over the devices, for evaluate --data-parallel");
  CLI::App* search = AddConfigCommand(
      app, c, "search", "learn a placement (REINFORCE on measured or simulated step times)",
      RunSearchCommand);
  search->add_flag("--resume", c.resume, "continue the search checkpointed in output.directory");
  search->add_option("-o,--output", c.output_directory,
                     "output directory, instead of the config's output.directory");
  CLI::App* compare = AddConfigCommand(
      app, c, "compare",
      fmt::format("single device, data parallel, expert, pipeline, {}, random search and the "
                  "learned search, judged alike: report.md, report.html, report.json",
                  fmt::join(baselines::BaselineNames(), ", ")),
      RunCompareCommand);
  compare->add_option("-o,--output", c.output_directory,
                      "output directory, instead of the config's output.directory");
  CLI::App* train = AddConfigCommand(
      app, c, "train", "train on Fashion-MNIST under a placement, report test accuracy", Train);
  AddPlacementOptions(*train, c);
  train->add_flag("--data-parallel", c.data_parallel, "data parallel over every device");
  train->add_option("-e,--epochs", c.epochs, "epochs")->capture_default_str();
  CLI::App* worker = app.add_subcommand(
      "worker",
      "evaluate the placements a search with a cluster: section sends (rendezvous from "
      "MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK or the flags)");
  worker->add_option("--master-addr", c.master_addr, "the search's host (MASTER_ADDR)");
  worker->add_option("--master-port", c.master_port, "its cluster.port (MASTER_PORT)");
  worker->add_option("--world-size", c.world_size, "cluster.workers + 1 (WORLD_SIZE)");
  worker->add_option("--rank", c.rank, "this worker's rank, 1 to world size - 1 (RANK)");
  worker->add_option("--key-file", c.key_file,
                     "the search's cluster key: its cluster.key_file, or the cluster.key in its "
                     "output directory (else PLACER_CLUSTER_KEY_FILE, or PLACER_CLUSTER_KEY as "
                     "64 hex digits)");
  worker
      ->add_option("--timeout", c.worker_timeout_seconds,
                   "seconds to wait for the search to come up")
      ->capture_default_str();
  worker->callback([&c] { c.run = [&c] { return RunWorkerCommand(c); }; });
  CLI::App* pretrain = app.add_subcommand(
      "pretrain",
      "train the learned edit scorer (search.edit_proposer: learned) across generated models "
      "and simulated machines, by expert iteration; resumes in the same directory");
  pretrain->add_option("-o,--output", c.pretrain_directory, "directory of the run")
      ->capture_default_str();
  pretrain->add_option("--iterations", c.pretrain_iterations, "expert iterations")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  pretrain->add_option("--problems", c.pretrain_problems, "corpus problems per iteration")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  pretrain->add_option("--rounds", c.pretrain_rounds, "refinement rounds per problem")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  pretrain->add_option("--seed", c.pretrain_seed, "seed of the corpus and the training")
      ->capture_default_str();
  pretrain->callback([&c] {
    setup::UsePortableFloatKernels();  // now: the kernels are chosen at the first tensor op
    c.run = [&c] { return Pretrain(c); };
  });
  train->add_option("--max-steps", c.max_steps, "cap on minibatches per epoch (0: all)")
      ->capture_default_str();
}

}  // namespace placer::cli
