// The placements across processes that cross_process_test checks, built the same way by the test
// (its one-device reference) and by the processes it starts (cross_process_step.cc), and how
// those processes hand their trained parameters back (a file of names and floats).
#pragma once

#include <ATen/ATen.h>
#include <fmt/format.h>

#include <fstream>
#include <stdexcept>
#include <string>

#include "graph/data_parallel.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "runtime/executor.h"

namespace placer::cross_process {

inline constexpr int kProcesses = 2;
inline constexpr int kSteps = 2;
inline constexpr double kLearningRate = 0.2;

struct Case {
  graph::Graph graph;
  graph::Placement placement;  // over `devices`
  runtime::TensorMap parameters, batch;
  graph::DeviceSet devices;
};

// GPU k of this machine in process k: "w0/cuda:0", "w1/cuda:1" (NCCL needs a GPU per process).
inline graph::DeviceSet ProcessGpus() {
  graph::DeviceSet devices;
  for (int k = 0; k < kProcesses; ++k) {
    devices.push_back({fmt::format("w{}/cuda:{}", k, k), graph::DeviceType::kCuda, k, 1, 0});
  }
  return devices;
}

// `per_process` 1-thread CPU workers per process: "w0/cpu:0", ..., "w1/cpu:0", ...
inline graph::DeviceSet ProcessWorkers(int per_process = 1) {
  graph::DeviceSet devices;
  for (int k = 0; k < kProcesses; ++k) {
    for (int i = 0; i < per_process; ++i) {
      devices.push_back({fmt::format("w{}/cpu:{}", k, i), graph::DeviceType::kCpu, i, 1, 0});
    }
  }
  return devices;
}

// LeNet whose convolutions run in process 0 and whose fully connected layers, and the loss, in
// process 1: activations cross forward, their gradients back.
inline Case Split() {
  Case c;
  c.graph = graph::BuildLeNet({.batch_size = 16, .learning_rate = kLearningRate});
  c.devices = ProcessWorkers();
  c.placement = graph::Placement::AllOn(c.graph, graph::DeviceNames(c.devices), 0);
  for (const char* op : {"fc1", "relu3", "fc2", "loss"}) {
    c.placement.device_of_op[static_cast<size_t>(*c.graph.FindOp(op))] = 1;
  }
  c.parameters = runtime::InitializeParameters(c.graph, 31);
  c.batch = runtime::SyntheticBatch(c.graph, 32);
  return c;
}

// The one-device LeNet of the data-parallel case: its global batch and parameters.
inline Case DataParallelReference() {
  graph::Graph g = graph::BuildLeNet({.batch_size = 24, .learning_rate = kLearningRate});
  graph::Placement placement = graph::Placement::AllOn(g, {"cpu:0"}, 0);
  runtime::TensorMap parameters = runtime::InitializeParameters(g, 41);
  runtime::TensorMap batch = runtime::SyntheticBatch(g, 42);
  graph::DeviceSet one = {{"cpu:0", graph::DeviceType::kCpu, 0, 1, 0}};
  return {std::move(g), std::move(placement), std::move(parameters), std::move(batch),
          std::move(one)};
}

// A bucket size that cuts LeNet's gradients (about 520 KB) into three buckets.
inline constexpr int64_t kSmallBucketBytes = int64_t{64} << 10;

// `per_process` replicas of LeNet in each process, each on its share of the reference's batch;
// gradients are summed by the replicated graph's all-reduce, in buckets of `bucket_bytes`: each
// process sums its replicas', then c10d's allreduce sums across the processes.
// On GPUs (`devices`: ProcessGpus()), the buckets are all-reduced by NCCL.
inline Case DataParallel(int per_process = 1,
                         int64_t bucket_bytes = graph::AllReduceOptions{}.bucket_bytes,
                         graph::DeviceSet devices = {}) {
  Case reference = DataParallelReference();
  const int64_t batch_size = reference.batch.at("labels").size(0);
  if (devices.empty()) devices = ProcessWorkers(per_process);
  graph::DataParallelGraph dp = graph::BuildDataParallel(
      [](int64_t shard, int64_t normalizer) {
        return graph::BuildLeNet(
            {.batch_size = shard, .loss_normalizer = normalizer, .training_step = false});
      },
      batch_size, graph::DeviceNames(devices), std::vector<double>(devices.size(), 1.0),
      kLearningRate, {.bucket_bytes = bucket_bytes});
  Case c{std::move(dp.graph), std::move(dp.placement), {}, {}, std::move(devices)};
  int64_t offset = 0;
  for (int r = 0; r < static_cast<int>(c.devices.size()); ++r) {
    for (const auto& [name, value] : reference.parameters) {
      c.parameters[graph::ReplicaName(r, name)] = value;
    }
    for (const auto& [name, value] : reference.batch) {
      c.batch[graph::ReplicaName(r, name)] =
          value.narrow(0, offset, dp.shard_sizes[static_cast<size_t>(r)]);
    }
    offset += dp.shard_sizes[static_cast<size_t>(r)];
  }
  return c;
}

inline Case MakeCase(const std::string& name) {
  if (name == "split") return Split();
  if (name == "data_parallel") return DataParallel();
  if (name == "data_parallel_2x2") return DataParallel(2);
  if (name == "data_parallel_small_buckets") return DataParallel(1, kSmallBucketBytes);
  if (name == "data_parallel_gpus") return DataParallel(1, kSmallBucketBytes, ProcessGpus());
  throw std::invalid_argument("unknown case '" + name + "'");
}

inline void WriteParameters(const std::string& path, const runtime::TensorMap& parameters) {
  std::ofstream out(path, std::ios::binary);
  for (const auto& [name, value] : parameters) {
    at::Tensor v = value.contiguous().to(at::kFloat);
    out << name << '\n' << v.numel() << '\n';
    out.write(reinterpret_cast<const char*>(v.data_ptr<float>()),
              static_cast<std::streamsize>(v.numel() * sizeof(float)));
  }
  if (!out) throw std::runtime_error("cannot write " + path);
}

// Flat tensors by name.
inline runtime::TensorMap ReadParameters(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  runtime::TensorMap parameters;
  std::string name;
  while (std::getline(in, name)) {
    int64_t numel = 0;
    in >> numel;
    in.ignore(1);
    at::Tensor v = at::empty({numel}, at::kFloat);
    in.read(reinterpret_cast<char*>(v.data_ptr<float>()),
            static_cast<std::streamsize>(numel * sizeof(float)));
    if (!in) throw std::runtime_error("truncated parameters in " + path);
    parameters[name] = v;
  }
  return parameters;
}

}  // namespace placer::cross_process
