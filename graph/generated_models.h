// Random model DAGs for pretraining placement policies (placer/pretraining.h): families of shapes
// that placement problems are made of, with random sizes, so that what is learned on them is about
// structure and cost, not about one model. Every one is a real forward graph (Linear, ReLU, Add,
// Concat, a softmax cross-entropy loss) that the training step, the executor and the simulator
// take as any other model. Torch-free; the same seed gives the same graph.
//   layered          L layers of k blocks each; a block reads the sum of 1-3 blocks of the layer
//                    before (random widths per layer);
//   branching        a chain of stages; each stage forks into b branches of random depth and
//                    width, joined by a concatenation (inception-like);
//   towers           T independent towers of random depth and width on one input, summed;
//   recurrent        an unrolled grid: cell (l, t) reads cell (l - 1, t) and cell (l, t - 1), the
//                    wavefront parallelism of stacked recurrent layers;
//   series_parallel  a random series-parallel composition of Linear+ReLU blocks.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/ir.h"

namespace placer::graph {

enum class GeneratedFamily { kLayered, kBranching, kTowers, kRecurrent, kSeriesParallel };
const std::vector<std::string_view>& GeneratedFamilyNames();  // in enum order
std::string_view GeneratedFamilyName(GeneratedFamily family);

struct GeneratedModelOptions {
  GeneratedFamily family = GeneratedFamily::kLayered;
  uint64_t seed = 1;
  int blocks = 40;         // about how many Linear+ReLU blocks
  int64_t min_width = 64;  // widths are drawn log-uniformly in [min_width, max_width]
  int64_t max_width = 2048;
  int64_t in_features = 256;
  int64_t classes = 16;
};

// The forward graph (and loss) of `batch` rows, the loss a mean over `normalizer` rows (0: the
// batch): a graph::ForwardBuilder.
Graph BuildGeneratedModel(const GeneratedModelOptions& options, int64_t batch, int64_t normalizer);

// "layered-7-b40".
std::string GeneratedModelName(const GeneratedModelOptions& options);

}  // namespace placer::graph
