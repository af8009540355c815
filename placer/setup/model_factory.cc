#include "placer/setup/model_factory.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <utility>

#include "graph/onnx_loader.h"
#include "placer/setup/input_error.h"
#include "runtime/sim/simulated_evaluator.h"

namespace placer::setup {

namespace {

// How far off the roofline model was on the 2-vCPU development VM: simulated over measured step
// time of LeNet's named placements on cpu:0 and cpu:1 (bench/RESULTS.md, issue 21).
constexpr const char* kRooflineOnDevelopmentVm = "0.04 to 0.43";

graph::Graph Build(const config::Config& config, int64_t batch, int64_t normalizer,
                   bool training_step) {
  const config::ModelConfig& m = config.model;
  if (!m.onnx.empty()) {
    // Read again for every replica: shards differ in batch size, which the file's shape
    // subgraphs are evaluated with.
    return graph::LoadOnnx(m.onnx, {.batch_size = batch,
                                    .training_step = training_step,
                                    .learning_rate = m.learning_rate,
                                    .loss_normalizer = normalizer});
  }
  if (!m.options) {
    throw config::ConfigError(config.source.string(), 0, 0, "model.builtin",
                              "unknown built-in model '" + m.builtin + "'");
  }
  return m.options->Build({.batch_size = batch,
                           .learning_rate = m.learning_rate,
                           .loss_normalizer = normalizer,
                           .training_step = training_step});
}

}  // namespace

std::map<std::string, std::string> ExpertFacts(const config::Config& config) {
  return config.model.options ? config.model.options->ExpertFacts()
                              : std::map<std::string, std::string>{};
}

std::optional<std::string> BatchProblem(const config::Config& config, int64_t batch) {
  if (batch < 1) return fmt::format("a batch of {} rows", batch);
  // Built-in models take any batch; an ONNX export only the batches its shape constants allow.
  if (config.model.onnx.empty()) return std::nullopt;
  return graph::OnnxBatchProblem(config.model.onnx, batch);
}

std::filesystem::path ExpertFile(const config::Config& config) {
  if (!config.model.onnx.empty()) return {};
  std::filesystem::path file =
      config.source.parent_path() / "experts" / (config.model.builtin + ".yaml");
  return std::filesystem::exists(file) ? file : std::filesystem::path();
}

graph::Graph BuildSingleModel(const config::Config& config) {
  return Build(config, config.model.batch_size, 0, true);
}

runtime::MeasurementOptions MeasurementOptionsFor(const config::Config& config) {
  return {.warmup_steps = config.measurement.warmup_steps,
          .timed_steps = config.measurement.timed_steps,
          .time_limit_seconds = config.measurement.time_limit_seconds,
          .seed = config.model.init_seed};
}

std::unique_ptr<graph::Evaluator> MakeEvaluator(
    graph::EvaluatorKind kind, const graph::Graph& step, const graph::DeviceSet& devices,
    const config::Config& config, const std::function<const sim::CostModel&()>& costs) {
  switch (kind) {
    case graph::EvaluatorKind::kMeasured:
      return std::make_unique<runtime::MeasuredEvaluator>(step, devices,
                                                          MeasurementOptionsFor(config));
    case graph::EvaluatorKind::kSimulated:
      return std::make_unique<sim::SimulatedEvaluator>(step, devices, costs());
  }
  throw std::logic_error(fmt::format("no evaluator for kind {}", static_cast<int>(kind)));
}

graph::ForwardBuilder ForwardBuilderFor(const config::Config& config) {
  if (config.model.onnx.empty()) {
    return [config](int64_t batch, int64_t normalizer) {
      return Build(config, batch, normalizer, false);
    };
  }
  // An export is read once per (batch, normalizer): a step's replicas, micro-batches and shards
  // ask for the same forward again and again (OPT-350m's set-up read its 1.3 GB about 120 times,
  // 500 s). The copies share their parameter values (graph::SharedValues).
  struct Forwards {
    std::mutex mutex;
    std::map<std::pair<int64_t, int64_t>, graph::Graph> built;
  };
  auto forwards = std::make_shared<Forwards>();
  return [config, forwards](int64_t batch, int64_t normalizer) {
    std::lock_guard<std::mutex> lock(forwards->mutex);
    auto [it, added] = forwards->built.try_emplace({batch, normalizer});
    if (added) {
      try {
        it->second = Build(config, batch, normalizer, false);
      } catch (...) {
        forwards->built.erase(it);
        throw;
      }
    }
    return it->second;
  };
}

std::unique_ptr<sim::CostModel> CostModelFor(const config::Config& config) {
  sim::RooflineOptions options;
  options.gpus_per_host = config.simulation.gpus_per_host;
  options.process_hosts = config.simulation.process_hosts;
  options.between_hosts = sim::LinkPresets::Network(config.simulation.host_link_gbps,
                                                    config.simulation.host_link_latency_us * 1e-6);
  // GPUs of their kinds (the config checked the names), every configured GPU named so that a pair
  // of mixed kinds gets the slower NVLink.
  sim::GpuKindOptions gpus{.default_kind = config.simulation.gpu_kind,
                           .precision = config.simulation.precision,
                           .efficiency = config.simulation.gpu_efficiency,
                           .nvlink = config.simulation.gpu_link == config::GpuLink::kNvlink};
  for (const config::DeviceConfig& device : config.devices.devices) {
    if (graph::DeviceFromName(device.name).type != graph::DeviceType::kCuda) continue;
    gpus.device_kinds[device.name] = config.GpuKindOf(device);
  }
  sim::RooflineCostModel roofline = sim::RooflineForGpuKinds(options, gpus);
  if (config.simulation.profile.empty()) return std::make_unique<sim::RooflineCostModel>(roofline);
  std::unique_ptr<sim::ProfiledCostModel> profile;
  try {
    profile = std::make_unique<sim::ProfiledCostModel>(
        sim::ProfiledCostModel::Load(config.simulation.profile, roofline));
  } catch (const sim::ProfileError& error) {
    throw InputError(fmt::format("simulation.profile: {}", error.what()));
  }
  // A profile of another model would leave every op it lacks to the roofline model without a
  // word: the profile must time each op of this model on some device, by its own name or as the
  // first replica's (a profile of the data-parallel step, `placer profile --data-parallel`, names
  // its ops r<replica>/<op>).
  const graph::Graph model = BuildSingleModel(config);
  for (const graph::Op& op : model.ops()) {
    const bool timed =
        std::any_of(profile->metadata().devices.begin(), profile->metadata().devices.end(),
                    [&](const auto& device) {
                      return profile->FindOpSeconds(op.name, device.name).has_value() ||
                             profile->FindOpSeconds("r0/" + op.name, device.name).has_value();
                    });
    if (!timed) {
      throw InputError(fmt::format(
          "simulation.profile: {}: a profile of model '{}' lacks op '{}' of this model ({}); "
          "profile it with: placer profile --config {}",
          config.simulation.profile.string(), profile->metadata().model, op.name,
          config.model.name(), config.source.string()));
    }
  }
  return profile;
}

std::vector<std::string> CostModelNotes(const config::Config& config, const sim::CostModel& costs,
                                        const graph::Graph& graph, const graph::DeviceSet& devices,
                                        const std::string& config_path, bool data_parallel) {
  const std::string profile_command =
      fmt::format("placer profile --config {}{} -o profile.json", config_path,
                  data_parallel ? " --data-parallel" : "");
  const auto* profile = dynamic_cast<const sim::ProfiledCostModel*>(&costs);
  const bool gpus_only = std::all_of(devices.begin(), devices.end(), [](const auto& device) {
    return device.type == graph::DeviceType::kCuda;
  });
  if (profile == nullptr && gpus_only &&
      config.simulation.gpu_efficiency == sim::GpuEfficiency::kAchieved) {
    return {
        "GPU ops at the fractions of their peaks that an H200's kernels reached "
        "(simulation.gpu_efficiency: achieved; other kinds assume the same fractions), "
        "not what these devices were measured at"};
  }
  if (profile == nullptr) {
    // The figures are fidelity_bench's roofline variant (bench/RESULTS.md, issue 21).
    return {fmt::format(
        "the roofline model is uncalibrated: datasheet peak FLOP/s and bandwidths, not what these "
        "devices reach (on the 2-vCPU development VM it predicted LeNet's CPU steps at {} of their "
        "measured time, bench/RESULTS.md); where the devices exist, calibrate it: {}, then "
        "simulation: {{profile: profile.json}}",
        kRooflineOnDevelopmentVm, profile_command)};
  }
  int missing = 0;
  for (graph::OpId op = 0; op < graph.num_ops(); ++op) {
    const bool timed = std::any_of(devices.begin(), devices.end(), [&](const auto& device) {
      return profile->FindOpSeconds(graph.op(op).name, device.name).has_value();
    });
    if (!timed) ++missing;
  }
  if (missing == 0) return {};
  return {fmt::format(
      "{} has no timing for {} of the {} ops of this graph; the uncalibrated roofline model "
      "stands in for them{}: profile this graph with {}",
      config.simulation.profile.string(), missing, graph.num_ops(),
      data_parallel ? " (a data-parallel step has its own ops, r<replica>/<op>, on shards of the "
                      "batch)"
                    : "",
      profile_command)};
}

}  // namespace placer::setup
