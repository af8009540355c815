// One training step of a loaded ONNX model against PyTorch's own autograd step on the same
// weights and minibatch (<model>.reference.onnx, written by scripts/onnx_suite.py's
// write_reference): the model suite (onnx_suite_test.cc) and the training fixtures of
// scripts/export_onnx.py (onnx_models_test.cc) are judged alike.
//
// Tolerances (float32 on both sides, the same math in another order): the loss within
// 1e-4 x max(1, |loss|); each parameter's gradient, at up to 2048 positions, within 2e-3 x (its
// largest reference value there) + 1e-5 x G, and its L2 norm within 2e-3 relative + 1e-5 x G x
// sqrt(elements), where G is the largest reference gradient value of the whole model: gradients
// that are 0 in exact arithmetic (a bias followed by a BatchNorm) are float32 noise of that order
// on both sides. The gradient is read off the step as (before - after) with SGD's learning rate 1.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "graph/onnx_loader.h"
#include "graph/placement.h"
#include "runtime/executor.h"
#include "tests/support.h"

namespace placer::test_support {

inline at::Tensor OnnxToTorch(const graph::OnnxTensor& t) {
  if (t.dtype == graph::DType::kFloat32) {
    return at::from_blob(const_cast<float*>(t.floats.data()), t.shape, at::kFloat).clone();
  }
  return at::from_blob(const_cast<int64_t*>(t.ints.data()), t.shape, at::kLong).clone();
}

struct PyTorchStep {
  runtime::TensorMap batch;  // inputs and labels
  double loss = 0;
  struct Parameter {
    std::vector<float> head;
    std::vector<int64_t> at;
    std::vector<float> grad;
    double norm = 0;
  };
  std::map<std::string, Parameter> parameters;  // by PyTorch's name
};

inline PyTorchStep ReadPyTorchStep(const std::filesystem::path& file) {
  PyTorchStep ref;
  for (const graph::OnnxTensor& t : graph::ReadOnnxInitializers(file)) {
    const std::string& name = t.name;
    auto field = [&](const std::string& prefix, const std::string& suffix) -> std::string {
      if (name.rfind(prefix, 0) != 0 || name.size() < prefix.size() + suffix.size() ||
          name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
        return "";
      }
      return name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    };
    if (name.rfind("input:", 0) == 0) {
      ref.batch.emplace(name.substr(6), OnnxToTorch(t));
    } else if (name == "labels") {
      ref.batch.emplace("labels", OnnxToTorch(t));
    } else if (name == "loss") {
      ref.loss = t.floats.at(0);
    } else if (std::string p = field("param:", ":head"); !p.empty()) {
      ref.parameters[p].head = t.floats;
    } else if (std::string p = field("grad:", ":at"); !p.empty()) {
      ref.parameters[p].at = t.ints;
    } else if (std::string p = field("grad:", ":values"); !p.empty()) {
      ref.parameters[p].grad = t.floats;
    } else if (std::string p = field("grad:", ":norm"); !p.empty()) {
      ref.parameters[p].norm = t.floats.at(0);
    }
  }
  return ref;
}

struct StepComparison {
  int64_t ops = 0, parameter_count = 0;
  double loss = 0, reference_loss = 0;
  double worst = 0;  // the largest gradient difference relative to its tolerance
  std::string worst_name;
  double load_seconds = 0, step_seconds = 0;
};

// Loads `model` with the reference's batch, runs one step under a random placement (seeded by
// `name`) over two CPU workers and expects the loss and every gradient to be PyTorch's, within
// the tolerances above; failures name `name`.
inline StepComparison ExpectStepMatchesPyTorch(const std::string& name,
                                               const std::filesystem::path& model,
                                               const std::filesystem::path& reference_file) {
  using Clock = std::chrono::steady_clock;
  auto seconds = [](Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
  };
  StepComparison c;
  const PyTorchStep ref = ReadPyTorchStep(reference_file);
  const int64_t batch = ref.batch.at("labels").size(0);

  auto start = Clock::now();
  const graph::Graph g =
      graph::LoadOnnx(model, {.batch_size = batch, .learning_rate = 1.0, .dropout = false});
  c.load_seconds = seconds(start);
  const runtime::TensorMap before = runtime::InitializeParameters(g, 0);

  std::mt19937 rng(std::hash<std::string>{}(name));
  graph::Placement placement = graph::Placement::AllOn(g, {"cpu:0", "cpu:1"}, 0);
  for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
    placement.device_of_op[static_cast<size_t>(id)] = static_cast<int>(rng() % 2);
  }
  runtime::Executor executor(g, CpuWorkers(2), placement, before);
  start = Clock::now();
  const runtime::StepResult step = executor.RunStep(ref.batch);
  c.step_seconds = seconds(start);
  const runtime::TensorMap after = executor.Parameters();
  c.ops = g.num_ops();
  c.parameter_count = g.ParameterCount();
  c.loss = step.loss;
  c.reference_loss = ref.loss;

  EXPECT_LE(std::abs(step.loss - ref.loss), 1e-4 * std::max(1.0, std::abs(ref.loss)))
      << name << ": loss " << step.loss << ", PyTorch's " << ref.loss;

  // PyTorch's parameters are placer's, found by their values (placer names a reordered LSTM
  // weight or a split bias after the file's initializer, not after PyTorch's parameter).
  std::map<std::string, std::string> ours_of;  // PyTorch name -> placer name
  for (graph::TensorId id : g.Parameters()) {
    const graph::Tensor& p = g.tensor(id);
    EXPECT_EQ(p.init.kind, graph::Initializer::Kind::kValues) << p.name;
    if (p.init.kind != graph::Initializer::Kind::kValues) return c;
    for (const auto& [theirs, r] : ref.parameters) {
      if (r.head.size() <= p.init.values->size() &&
          std::equal(r.head.begin(), r.head.end(), p.init.values->begin()) &&
          static_cast<int64_t>(p.init.values->size()) > r.at.back()) {
        EXPECT_EQ(ours_of.count(theirs), 0u) << theirs << " matches two parameters";
        ours_of[theirs] = p.name;
      }
    }
  }
  EXPECT_EQ(ours_of.size(), ref.parameters.size()) << name << ": parameters without a match";
  EXPECT_EQ(g.Parameters().size(), ref.parameters.size()) << name;

  double largest = 0;  // G above
  for (const auto& [theirs, r] : ref.parameters) {
    for (float v : r.grad) largest = std::max(largest, static_cast<double>(std::abs(v)));
  }
  for (const auto& [theirs, r] : ref.parameters) {
    auto found = ours_of.find(theirs);
    if (found == ours_of.end()) {
      ADD_FAILURE() << name << ": PyTorch's parameter " << theirs << " has no counterpart";
      continue;
    }
    const at::Tensor grad = (before.at(found->second) - after.at(found->second)).reshape({-1});
    const at::Tensor at = at::tensor(r.at, at::kLong);
    const at::Tensor expected = at::tensor(r.grad, at::kFloat);
    const at::Tensor actual = grad.index_select(0, at);
    const double scale = expected.abs().max().item<double>();
    const double difference = (actual - expected).abs().max().item<double>();
    const double tolerance = 2e-3 * scale + 1e-5 * largest;
    const double norm = grad.to(at::kDouble).norm().item<double>();
    const double norm_tolerance =
        2e-3 * r.norm + 1e-5 * largest * std::sqrt(static_cast<double>(grad.numel()));
    EXPECT_LE(difference, tolerance)
        << name << ": " << theirs << " (" << found->second << "): gradient differs by "
        << difference << " (values up to " << scale << ")";
    EXPECT_LE(std::abs(norm - r.norm), norm_tolerance)
        << name << ": " << theirs << ": gradient norm " << norm << ", PyTorch's " << r.norm;
    if (difference / tolerance > c.worst) {
      c.worst = difference / tolerance;
      c.worst_name = theirs;
    }
  }
  return c;
}

}  // namespace placer::test_support
