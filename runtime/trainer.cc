#include "runtime/trainer.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <chrono>

#include "graph/ops.h"

namespace placer::runtime {
namespace {

// Images scaled to [0, 1] as d2l's ToTensor does, labels as int64, for rows [begin, end).
std::pair<at::Tensor, at::Tensor> Slice(const ImageDataset& data, const at::Tensor& order,
                                        int64_t begin, int64_t end, int64_t batch) {
  at::Tensor all_pixels = at::from_blob(const_cast<uint8_t*>(data.pixels.data()),
                                        {data.count, 1, data.rows, data.cols}, at::kByte);
  at::Tensor all_labels =
      at::from_blob(const_cast<uint8_t*>(data.labels.data()), {data.count}, at::kByte);
  at::Tensor index = order.slice(0, begin, end);
  at::Tensor images = all_pixels.index_select(0, index).to(at::kFloat).div_(255.0);
  at::Tensor labels = all_labels.index_select(0, index).to(at::kLong);
  if (end - begin < batch) {  // pad the last test batch; padded rows are not counted
    images = at::cat({images, at::zeros({batch - (end - begin), 1, data.rows, data.cols})});
    labels = at::cat({labels, at::zeros({batch - (end - begin)}, at::kLong)});
  }
  return {images, labels};
}

std::string LogitsOf(const graph::Graph& g) {
  for (const graph::Op& op : g.ops()) {
    if (op.type == graph::op_types::kSoftmaxCrossEntropy) return g.tensor(op.inputs[0]).name;
  }
  throw graph::GraphError("the model has no loss, so no logits to predict with");
}

double TestAccuracy(const graph::Graph& eval_graph, const graph::DeviceSet& devices,
                    const TensorMap& parameters, const ImageDataset& test) {
  const int64_t batch = eval_graph.tensor(eval_graph.TensorByName("images")).shape[0];
  ExecutorOptions options;
  options.forward_only = true;
  graph::DeviceSet first = {devices.front()};
  Executor executor(eval_graph, first,
                    graph::Placement::AllOn(eval_graph, graph::DeviceNames(first), 0), parameters,
                    options);
  const std::string logits = LogitsOf(eval_graph);
  at::Tensor order = at::arange(test.count, at::kLong);
  int64_t correct = 0;
  for (int64_t begin = 0; begin < test.count; begin += batch) {
    int64_t end = std::min(begin + batch, test.count);
    auto [images, labels] = Slice(test, order, begin, end, batch);
    executor.RunStep({{"images", images}, {"labels", labels}});
    at::Tensor predicted = executor.LastValue(logits).to(at::kCPU).argmax(1);
    correct += predicted.slice(0, 0, end - begin)
                   .eq(labels.slice(0, 0, end - begin))
                   .sum()
                   .item<int64_t>();
  }
  return static_cast<double>(correct) / static_cast<double>(test.count);
}

}  // namespace

std::vector<EpochReport> Train(const TrainingSetup& setup, const graph::Graph& eval_graph,
                               const graph::DeviceSet& devices, const ImageDataset& train,
                               const ImageDataset& test, const TrainOptions& options,
                               const std::function<void(const EpochReport&)>& on_epoch) {
  using Clock = std::chrono::steady_clock;
  const graph::Graph& g = *setup.step_graph;
  const int64_t batch = eval_graph.tensor(eval_graph.TensorByName("images")).shape[0];
  // Every replica starts from the same weights: those of the single model.
  TensorMap initial = InitializeParameters(eval_graph, options.seed);
  TensorMap parameters;
  for (graph::TensorId id : g.Parameters()) {
    const std::string& name = g.tensor(id).name;
    parameters[name] = initial.at(setup.model_name_of(name));
  }
  Executor executor(g, devices, setup.placement, parameters);
  at::Generator shuffle = at::detail::createCPUGenerator(options.seed + 1);
  std::vector<EpochReport> reports;
  for (int epoch = 1; epoch <= options.epochs; ++epoch) {
    EpochReport report;
    report.epoch = epoch;
    at::Tensor order = at::randperm(train.count, shuffle, at::kLong);
    int64_t steps = train.count / batch;  // full minibatches only
    if (options.max_steps_per_epoch > 0)
      steps = std::min<int64_t>(steps, options.max_steps_per_epoch);
    double loss_sum = 0;
    auto begin = Clock::now();
    for (int64_t step = 0; step < steps; ++step) {
      auto [images, labels] = Slice(train, order, step * batch, (step + 1) * batch, batch);
      loss_sum += executor.RunStep(setup.make_feeds(images, labels)).loss;
    }
    report.seconds = std::chrono::duration<double>(Clock::now() - begin).count();
    report.steps = static_cast<int>(steps);
    report.train_loss = loss_sum / static_cast<double>(std::max<int64_t>(1, steps));
    TensorMap trained;
    for (auto& [name, value] : executor.Parameters()) {
      std::string model_name = setup.model_name_of(name);
      if (!trained.count(model_name)) trained[model_name] = value;
    }
    report.test_accuracy = TestAccuracy(eval_graph, devices, trained, test);
    if (on_epoch) on_epoch(report);
    reports.push_back(report);
  }
  return reports;
}

TrainingSetup SingleModelSetup(const graph::Graph& graph, graph::Placement placement) {
  TrainingSetup setup;
  setup.step_graph = &graph;
  setup.placement = std::move(placement);
  setup.make_feeds = [](const at::Tensor& images, const at::Tensor& labels) {
    return TensorMap{{"images", images}, {"labels", labels}};
  };
  return setup;
}

TrainingSetup DataParallelSetup(const graph::DataParallelGraph& dp) {
  TrainingSetup setup;
  setup.step_graph = &dp.graph;
  setup.placement = dp.placement;
  std::vector<int64_t> shards = dp.shard_sizes;
  setup.make_feeds = [shards](const at::Tensor& images, const at::Tensor& labels) {
    TensorMap feeds;
    int64_t offset = 0;
    for (size_t r = 0; r < shards.size(); ++r) {
      const int replica = static_cast<int>(r);
      feeds[graph::ReplicaName(replica, "images")] = images.narrow(0, offset, shards[r]);
      feeds[graph::ReplicaName(replica, "labels")] = labels.narrow(0, offset, shards[r]);
      offset += shards[r];
    }
    return feeds;
  };
  setup.model_name_of = [](const std::string& name) { return name.substr(name.find('/') + 1); };
  return setup;
}

}  // namespace placer::runtime
