#include "cli/model_factory.h"

#include <fmt/format.h>

#include "cli/commands.h"
#include "graph/onnx_loader.h"

namespace placer::cli {

namespace {

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

graph::DataParallelGraph BuildDataParallelOver(const config::Config& config,
                                               const std::vector<std::string>& replicas) {
  return graph::BuildDataParallel(ForwardBuilderFor(config), config.model.batch_size, replicas,
                                  std::vector<double>(replicas.size(), 1.0),
                                  config.model.learning_rate);
}

graph::DataParallelGraph BuildReplicated(const config::Config& config, int replicas) {
  std::vector<std::string> replica_names;
  for (int r = 0; r < replicas; ++r) replica_names.push_back(fmt::format("r{}", r));
  return BuildDataParallelOver(config, replica_names);
}

runtime::MeasurementOptions MeasurementOptionsFor(const config::Config& config) {
  return {.warmup_steps = config.measurement.warmup_steps,
          .timed_steps = config.measurement.timed_steps,
          .time_limit_seconds = config.measurement.time_limit_seconds,
          .seed = config.model.init_seed};
}

graph::Graph BuildModel(const config::Config& config) {
  if (config.model.replicas > 1) return BuildReplicated(config, config.model.replicas).graph;
  return BuildSingleModel(config);
}

graph::ForwardBuilder ForwardBuilderFor(const config::Config& config) {
  return [config](int64_t batch, int64_t normalizer) {
    return Build(config, batch, normalizer, false);
  };
}

std::unique_ptr<sim::CostModel> CostModelFor(const config::Config& config) {
  sim::RooflineOptions roofline;
  if (config.simulation.gpu_link == "nvlink") roofline.gpu_to_gpu = sim::LinkPresets::Nvlink();
  if (config.simulation.profile.empty()) return std::make_unique<sim::RooflineCostModel>(roofline);
  try {
    return std::make_unique<sim::ProfiledCostModel>(
        sim::ProfiledCostModel::Load(config.simulation.profile, sim::RooflineCostModel(roofline)));
  } catch (const sim::ProfileError& error) {
    throw InputError(fmt::format("simulation.profile: {}", error.what()));
  }
}

}  // namespace placer::cli
