// The two graphs the simulator's fidelity is judged on (fidelity_bench, contention_bench): the
// d2l LeNet and a parallel MLP of two towers, 3 layers of 512, both at batch 256.
#pragma once

#include <cstdint>

#include "graph/data_parallel.h"
#include "graph/models.h"

namespace placer::bench {

inline constexpr graph::ParallelMlpOptions kFidelityMlp{
    .batch_size = 256, .in_features = 256, .width = 512, .depth = 3, .branches = 2, .classes = 10};

// The forward graphs of a shard of `batch` rows whose loss is normalised by `normalizer` rows.
inline graph::Graph LeNetShard(int64_t batch, int64_t normalizer) {
  return graph::BuildLeNet(
      {.batch_size = batch, .loss_normalizer = normalizer, .training_step = false});
}
inline graph::Graph FidelityMlpShard(int64_t batch, int64_t normalizer) {
  graph::ParallelMlpOptions shard = kFidelityMlp;
  shard.batch_size = batch;
  shard.loss_normalizer = normalizer;
  shard.training_step = false;
  return graph::BuildParallelMlp(shard);
}

}  // namespace placer::bench
