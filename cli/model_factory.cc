#include "cli/model_factory.h"

#include <fmt/format.h>

#include <algorithm>

#include "cli/commands.h"
#include "graph/models.h"
#include "graph/onnx_loader.h"
#include "graph/zoo.h"

namespace placer::cli {

namespace {

graph::LstmCellKind CellKind(const std::string& name) {
  return name == "fused" ? graph::LstmCellKind::kFused : graph::LstmCellKind::kGates;
}

// The model zoo (graph/zoo.h); false when model.builtin is not one of its models.
bool BuildZooModel(const config::Config& config, int64_t batch, int64_t normalizer,
                   bool training_step, graph::Graph& out) {
  const config::ModelConfig& m = config.model;
  if (m.builtin == "inception_v3") {
    out = graph::BuildInceptionV3({.batch_size = batch,
                                   .image_size = m.inception_v3.image_size,
                                   .classes = m.inception_v3.classes,
                                   .width_multiplier = m.inception_v3.width_multiplier,
                                   .learning_rate = m.learning_rate,
                                   .loss_normalizer = normalizer,
                                   .training_step = training_step});
  } else if (m.builtin == "rnnlm") {
    out = graph::BuildRnnLm({.batch_size = batch,
                             .time_steps = m.rnnlm.time_steps,
                             .layers = m.rnnlm.layers,
                             .hidden = m.rnnlm.hidden,
                             .embedding = m.rnnlm.embedding,
                             .vocab = m.rnnlm.vocab,
                             .cell = CellKind(m.rnnlm.cell),
                             .learning_rate = m.learning_rate,
                             .loss_normalizer = normalizer,
                             .training_step = training_step});
  } else if (m.builtin == "nmt") {
    out = graph::BuildNmt({.batch_size = batch,
                           .layers = m.nmt.layers,
                           .source_steps = m.nmt.source_steps,
                           .target_steps = m.nmt.target_steps,
                           .hidden = m.nmt.hidden,
                           .embedding = m.nmt.embedding,
                           .source_vocab = m.nmt.source_vocab,
                           .target_vocab = m.nmt.target_vocab,
                           .cell = CellKind(m.nmt.cell),
                           .learning_rate = m.learning_rate,
                           .loss_normalizer = normalizer,
                           .training_step = training_step});
  } else if (m.builtin == "transformer") {
    const config::ModelConfig::Transformer& t = m.transformer;
    out = graph::BuildTransformerEncoder({.batch_size = batch,
                                          .seq_length = t.seq_length,
                                          .layers = t.layers,
                                          .hidden = t.hidden,
                                          .heads = t.heads,
                                          .ffn = t.ffn,
                                          .vocab = t.vocab,
                                          .max_positions = t.max_positions,
                                          .classes = t.classes,
                                          .learning_rate = m.learning_rate,
                                          .loss_normalizer = normalizer,
                                          .training_step = training_step});
  } else {
    return false;
  }
  return true;
}

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
  if (m.builtin == "lenet") {
    graph::LeNetOptions options;
    options.batch_size = batch;
    options.learning_rate = m.learning_rate;
    options.image_size = m.lenet.image_size;
    options.conv1_channels = m.lenet.conv1_channels;
    options.conv2_channels = m.lenet.conv2_channels;
    options.hidden = m.lenet.hidden;
    options.classes = m.lenet.classes;
    options.loss_normalizer = normalizer;
    options.training_step = training_step;
    return graph::BuildLeNet(options);
  }
  if (graph::Graph zoo; BuildZooModel(config, batch, normalizer, training_step, zoo)) return zoo;
  throw config::ConfigError(config.source.string(), 0, 0, "model.builtin",
                            "unknown built-in model '" + m.builtin + "'");
}

}  // namespace

std::map<std::string, std::string> ExpertFacts(const config::Config& config) {
  const config::ModelConfig& m = config.model;
  if (m.builtin == "rnnlm") return {{"layers", std::to_string(m.rnnlm.layers)}};
  if (m.builtin == "nmt") return {{"layers", std::to_string(m.nmt.layers)}};
  if (m.builtin == "transformer") return {{"layers", std::to_string(m.transformer.layers)}};
  return {};
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
  std::unique_ptr<sim::ProfiledCostModel> profile;
  try {
    profile = std::make_unique<sim::ProfiledCostModel>(
        sim::ProfiledCostModel::Load(config.simulation.profile, sim::RooflineCostModel(roofline)));
  } catch (const sim::ProfileError& error) {
    throw InputError(fmt::format("simulation.profile: {}", error.what()));
  }
  // A profile of another model would leave every op it lacks to the roofline model without a
  // word: the profile must time each op of this model on some device.
  const graph::Graph model = BuildSingleModel(config);
  for (const graph::Op& op : model.ops()) {
    const bool timed =
        std::any_of(profile->metadata().devices.begin(), profile->metadata().devices.end(),
                    [&](const auto& device) {
                      return profile->FindOpSeconds(op.name, device.name).has_value();
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

}  // namespace placer::cli
