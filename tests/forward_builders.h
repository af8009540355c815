// Forward graphs of small models as graph::ForwardBuilder gives them (forward ops and loss, no
// training step: the step builders under test add it), shared by the pipeline and search suites.
#pragma once

#include <cstdint>

#include "graph/data_parallel.h"
#include "graph/ir.h"
#include "graph/models.h"
#include "graph/training_step.h"
#include "graph/zoo.h"

namespace placer::test_support {

inline graph::Graph LeNetForward(int64_t rows, int64_t normalizer) {
  return graph::BuildLeNet(
      {.batch_size = rows, .loss_normalizer = normalizer, .training_step = false});
}

// Three branches of two layers between a shared input and a shared head.
inline graph::Graph BranchingForward(int64_t rows, int64_t normalizer) {
  return graph::BuildParallelMlp({.batch_size = rows,
                                  .in_features = 12,
                                  .width = 16,
                                  .depth = 2,
                                  .branches = 3,
                                  .classes = 5,
                                  .loss_normalizer = normalizer,
                                  .training_step = false});
}

// A BERT-shaped encoder small enough for CPU workers: width 32, 4 heads, MLP 64, sequences of 8.
inline graph::Graph SmallEncoderForward(int64_t rows, int64_t normalizer, int layers = 2) {
  return graph::BuildTransformerEncoder({.batch_size = rows,
                                         .seq_length = 8,
                                         .layers = layers,
                                         .hidden = 32,
                                         .heads = 4,
                                         .ffn = 64,
                                         .vocab = 50,
                                         .max_positions = 16,
                                         .classes = 3,
                                         .loss_normalizer = normalizer,
                                         .training_step = false});
}

// The plain step of `batch` rows: the model's own forward builder, training step included.
inline graph::Graph PlainStep(const graph::ForwardBuilder& forward, int64_t batch,
                              double learning_rate) {
  graph::Graph g = forward(batch, batch);
  graph::AppendBackwardAndUpdate(g, learning_rate);
  g.Validate();
  return g;
}

}  // namespace placer::test_support
