// Runtime benchmarks, measured side by side in one run and repeated; medians are reported.
//   overhead:     the executor with every op on one 1-thread worker vs the plain LibTorch LeNet
//                 step (same thread budget)                           target <= 1.10x
//   concurrency:  two independent heavy branches split over cpu:0 and cpu:1 (1 thread each) vs
//                 all on cpu:0                                         target >= 1.6x faster
//   data parallel: LeNet, batch 256, on 2 one-thread workers vs 1
//   overhead on cuda:0, where a GPU is: the executor vs the plain step there  target <= 1.10x
// Usage: runtime_bench [rounds=5]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <fmt/format.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "graph/data_parallel.h"
#include "graph/models.h"
#include "runtime/executor.h"
#include "runtime/measured_evaluator.h"

namespace {

using namespace placer;
using placer::bench::Clock;
using placer::bench::Median;

graph::DeviceSet Workers(int count) {
  graph::DeviceSet devices;
  for (int i = 0; i < count; ++i) {
    devices.push_back({"cpu:" + std::to_string(i), graph::DeviceType::kCpu, i, 1, 0});
  }
  return devices;
}

// The d2l LeNet step written directly in LibTorch, on one thread (CPU) or on `device`: median
// seconds of `steps`. On a GPU the minibatch starts in pinned host memory and is copied in, and
// the step ends with the device synchronised, as the executor's timed step does.
double PlainLeNetStepSeconds(const graph::Graph& g, int warmup, int steps,
                             at::Device device = at::kCPU) {
  runtime::TensorMap p = runtime::InitializeParameters(g, 0);
  runtime::TensorMap batch = runtime::SyntheticBatch(g, 1);
  if (device.is_cuda()) {
    for (auto& [name, tensor] : batch) tensor = tensor.pin_memory();
  }
  std::vector<std::string> names = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                                    "fc1.weight",   "fc1.bias",   "fc2.weight",   "fc2.bias"};
  std::vector<at::Tensor> params;
  for (const auto& name : names) params.push_back(p.at(name).to(device).requires_grad_(true));
  std::vector<double> times;
  for (int step = 0; step < warmup + steps; ++step) {
    auto begin = Clock::now();
    at::Tensor images = batch.at("images").to(device, /*non_blocking=*/true);
    at::Tensor labels = batch.at("labels").to(device, /*non_blocking=*/true);
    at::Tensor h = at::conv2d(images, params[0], params[1]);
    h = at::avg_pool2d(at::relu(h), {2, 2}, {2, 2});
    h = at::conv2d(h, params[2], params[3]);
    h = at::avg_pool2d(at::relu(h), {2, 2}, {2, 2});
    h = at::relu(at::linear(h.flatten(1), params[4], params[5]));
    at::Tensor loss = at::cross_entropy_loss(at::linear(h, params[6], params[7]), labels);
    std::vector<at::Tensor> grads = torch::autograd::grad({loss}, params);
    {
      at::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) params[i].sub_(grads[i], 0.2);
    }
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
    if (step >= warmup)
      times.push_back(std::chrono::duration<double>(Clock::now() - begin).count());
  }
  return Median(times);
}

double Measure(const graph::Graph& g, const graph::DeviceSet& devices,
               const graph::Placement& placement, int steps) {
  runtime::MeasuredEvaluator evaluator(g, devices, {.warmup_steps = 3, .timed_steps = steps});
  graph::EvaluationResult r = evaluator.Evaluate(placement);
  if (!r.valid) throw std::runtime_error(r.invalid_reason);
  return r.step_seconds;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::stoi(argv[1]) : 5;
  at::set_num_threads(1);  // the plain step gets the same one-thread budget as a worker

  graph::Graph lenet = graph::BuildLeNet({});
  graph::ParallelMlpOptions mlp_options{.batch_size = 256,
                                        .in_features = 1024,
                                        .width = 1024,
                                        .depth = 4,
                                        .branches = 2,
                                        .classes = 10};
  graph::Graph mlp = graph::BuildParallelMlp(mlp_options);
  graph::Placement mlp_split = graph::Placement::AllOn(mlp, {"cpu:0", "cpu:1"}, 0);
  for (graph::OpId id : mlp.OpsInPhase(graph::Phase::kForward)) {
    if (mlp.op(id).name.starts_with("tower1.")) mlp_split.device_of_op[static_cast<size_t>(id)] = 1;
  }
  auto lenet_forward = [](int64_t batch, int64_t normalizer) {
    return graph::BuildLeNet(
        {.batch_size = batch, .loss_normalizer = normalizer, .training_step = false});
  };
  graph::DataParallelGraph dp2 =
      graph::BuildDataParallel(lenet_forward, 256, {"cpu:0", "cpu:1"}, {1, 1}, 0.2);
  graph::DataParallelGraph dp1 = graph::BuildDataParallel(lenet_forward, 256, {"cpu:0"}, {1}, 0.2);

  std::vector<double> plain, executor, split, together, data2, data1;
  for (int round = 0; round < rounds; ++round) {
    plain.push_back(PlainLeNetStepSeconds(lenet, 3, 5));
    executor.push_back(Measure(lenet, Workers(1), graph::Placement::AllOn(lenet, {"cpu:0"}, 0), 5));
    together.push_back(
        Measure(mlp, Workers(2), graph::Placement::AllOn(mlp, {"cpu:0", "cpu:1"}, 0), 5));
    split.push_back(Measure(mlp, Workers(2), mlp_split, 5));
    data1.push_back(Measure(dp1.graph, Workers(1), dp1.placement, 5));
    data2.push_back(Measure(dp2.graph, Workers(2), dp2.placement, 5));
  }
  std::vector<double> overhead, speedup, dp_speedup;
  for (int r = 0; r < rounds; ++r) {
    overhead.push_back(executor[static_cast<size_t>(r)] / plain[static_cast<size_t>(r)]);
    speedup.push_back(together[static_cast<size_t>(r)] / split[static_cast<size_t>(r)]);
    dp_speedup.push_back(data1[static_cast<size_t>(r)] / data2[static_cast<size_t>(r)]);
  }
  fmt::print("runtime_bench: {} rounds, medians (ms)\n", rounds);
  fmt::print("{:<58} {:>10} {:>10} {:>8}\n", "comparison", "A", "B", "A/B");
  auto row = [](const std::string& what, const std::vector<double>& a, const std::vector<double>& b,
                const std::vector<double>& ratio) {
    fmt::print("{:<58} {:>10.2f} {:>10.2f} {:>8.3f}\n", what, Median(a) * 1e3, Median(b) * 1e3,
               Median(ratio));
  };
  row("overhead: executor 1 worker (A) / plain LibTorch (B)", executor, plain, overhead);
  row("concurrency: MLP all on cpu:0 (A) / split over 2 (B)", together, split, speedup);
  row("data parallel: LeNet 1 worker (A) / 2 workers (B)", data1, data2, dp_speedup);

  // The overhead on a GPU, where there is one: every op on cuda:0 against the plain step there.
  if (!torch::cuda::is_available()) {
    fmt::print("overhead on cuda:0: not measured, no GPU\n");
    return 0;
  }
  const graph::DeviceSet gpu = {{"cuda:0", graph::DeviceType::kCuda, 0, 1, 0}};
  std::vector<double> gpu_plain, gpu_executor, gpu_overhead;
  for (int round = 0; round < rounds; ++round) {
    gpu_plain.push_back(PlainLeNetStepSeconds(lenet, 3, 5, at::Device(at::kCUDA, 0)));
    gpu_executor.push_back(Measure(lenet, gpu, graph::Placement::AllOn(lenet, {"cuda:0"}, 0), 5));
    gpu_overhead.push_back(gpu_executor.back() / gpu_plain.back());
  }
  row("overhead: executor on cuda:0 (A) / plain LibTorch there (B)", gpu_executor, gpu_plain,
      gpu_overhead);
  return 0;
}
