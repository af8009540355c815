// Real training on Fashion-MNIST under a placement: the experiment of the d2l multi-GPU chapter.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/device.h"
#include "graph/ir.h"
#include "graph/placement.h"
#include "runtime/executor.h"
#include "runtime/fashion_mnist.h"

namespace placer::runtime {

struct TrainOptions {
  int epochs = 10;
  int max_steps_per_epoch = 0;  // 0: every full minibatch of the training set
  uint64_t seed = 0;            // initial weights and the shuffling of each epoch
};

struct EpochReport {
  int epoch = 0;
  int steps = 0;
  double train_loss = 0;     // mean over the epoch's steps
  double test_accuracy = 0;  // on all test images
  double seconds = 0;        // training steps only, evaluation excluded
};

// What is trained: the training-step graph and its placement, plus how a minibatch of `batch`
// images and labels becomes the graph's inputs (one input pair, or one shard per data-parallel
// replica), and how the trained parameters map back to the single model's names.
struct TrainingSetup {
  const graph::Graph* step_graph = nullptr;
  graph::Placement placement;
  std::function<TensorMap(const at::Tensor& images, const at::Tensor& labels)> make_feeds;
  std::function<std::string(const std::string& parameter)> model_name_of =
      [](const std::string& name) { return name; };
};

// Feeds the minibatch as is ("images", "labels").
TrainingSetup SingleModelSetup(const graph::Graph& graph, graph::Placement placement);
// Splits the minibatch into the replicas' shards ("r<i>/images", ...).
TrainingSetup DataParallelSetup(const graph::DataParallelGraph& dp);

// Trains with SGD from weights drawn with `options.seed`; after each epoch measures test accuracy
// with the single-device forward graph `eval_graph` (same model, same batch size) on the first
// device. `on_epoch` is called after each epoch.
std::vector<EpochReport> Train(const TrainingSetup& setup, const graph::Graph& eval_graph,
                               const graph::DeviceSet& devices, const ImageDataset& train,
                               const ImageDataset& test, const TrainOptions& options,
                               const std::function<void(const EpochReport&)>& on_epoch = nullptr);

}  // namespace placer::runtime
