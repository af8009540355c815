// A check shared by the tests of split steps (the Megatron-style baseline's, the search's
// tensor-parallel shapes): two steps of a step whose replicas are split Megatron's way give one
// device's losses and, shards put back together, its parameters.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "graph/data_parallel.h"
#include "graph/micro_batches.h"
#include "graph/placement.h"
#include "graph/step_names.h"
#include "graph/tensor_parallel.h"
#include "graph/training_step.h"
#include "runtime/executor.h"
#include "runtime/tensor_parallel.h"
#include "tests/support.h"
#include "tests/torch_support.h"

namespace placer::test_support {

// Two steps of `step` placed by `placement` on CPU workers (R replicas of M micro-batches each,
// every replica split as `split`, from the model's parameters drawn from `seed`) give the losses
// of two steps of the plain model (`forward` at `batch` rows) on one device to 1e-5, and every
// replica's shards put back together give its parameters to 1e-6. Returns the step's trained
// parameters.
inline runtime::TensorMap ExpectSplitTrainsAsOneDevice(
    const graph::ForwardBuilder& forward, double learning_rate, const graph::Graph& step,
    const graph::Placement& placement, const graph::TensorParallelGraph& split, int64_t batch,
    int replicas, int micro_batches, uint32_t seed) {
  graph::Graph plain = forward(batch, 0);
  graph::AppendBackwardAndUpdate(plain, learning_rate);
  const runtime::TensorMap initial = runtime::InitializeParameters(plain, seed);
  const runtime::TensorMap minibatch = runtime::SyntheticBatch(plain, seed + 1);
  runtime::Executor reference(plain, CpuWorkers(1), graph::Placement::AllOn(plain, {"cpu:0"}, 0),
                              initial);
  const runtime::TensorMap sliced = runtime::ShardParameters(initial, split);
  runtime::TensorMap parameters, feeds;
  const int64_t rows = batch / (replicas * micro_batches);
  for (int r = 0; r < replicas; ++r) {
    for (const auto& [name, value] : sliced) parameters[graph::ReplicaName(r, name)] = value;
    for (const auto& [name, value] : minibatch) {
      for (int k = 0; k < micro_batches; ++k) {
        const std::string fed = micro_batches == 1 ? name : graph::MicroBatchName(k, name);
        feeds[graph::ReplicaName(r, fed)] = value.narrow(0, (r * micro_batches + k) * rows, rows);
      }
    }
  }
  runtime::Executor executor(step, CpuWorkers(static_cast<int>(placement.devices.size())),
                             placement, parameters);
  for (int s = 0; s < 2; ++s) {
    EXPECT_NEAR(executor.RunStep(feeds).loss, reference.RunStep(minibatch).loss, 1e-5)
        << "step " << s;
  }
  const runtime::TensorMap trained = executor.Parameters();
  for (int r = 0; r < replicas; ++r) {
    runtime::TensorMap replica;
    for (const auto& [name, value] : sliced) {
      replica[name] = trained.at(graph::ReplicaName(r, name));
    }
    ExpectSameParameters(runtime::GatherParameters(replica, split), reference.Parameters(),
                         fmt::format("replica {}", r), 1e-6);
  }
  return trained;
}

}  // namespace placer::test_support
