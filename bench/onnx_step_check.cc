// One training step of an ONNX model under a random placement over two CPU workers, compared with
// PyTorch's own step on the same weights and minibatch (<model>.reference.onnx, written by
// scripts/onnx_suite.py's write_reference), for bench/model_sweep.py:
//
//   onnx_step_check MODEL.onnx REFERENCE.onnx [NAME]
//
// The comparison and its tolerances are the model suite's, tests/pytorch_step.h's, shared rather
// than copied: that header reports mismatches through GoogleTest's EXPECT macros, which this
// program intercepts (gtest-spi's ScopedFakeTestPartResultReporter) instead of running a test.
// NAME seeds the random placement (default: the model file's stem), as the test's name does.
//
// Exit codes: 0 the loss and every gradient are PyTorch's within the tolerances; 1 they are not
// (the worst gradient, relative to its tolerance, and every mismatch are printed); 2 the model or
// the reference could not be loaded or the step failed (the error is printed).
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <exception>
#include <filesystem>
#include <iostream>
#include <string>

// tests/support.h (which pytorch_step.h includes) runs the placer program in a helper this file
// does not call; the tests' build names that program, this one need not.
#ifndef PLACER_BINARY
#define PLACER_BINARY "placer"
#endif
#include "tests/pytorch_step.h"

int main(int argc, char** argv) {
  if (argc < 3 || argc > 4) {
    std::cerr << "usage: onnx_step_check MODEL.onnx REFERENCE.onnx [NAME]\n";
    return 2;
  }
  const std::filesystem::path model = argv[1], reference = argv[2];
  const std::string name = argc == 4 ? argv[3] : model.stem().string();
  testing::TestPartResultArray failures;
  placer::test_support::StepComparison c;
  try {
    const testing::ScopedFakeTestPartResultReporter intercept(
        testing::ScopedFakeTestPartResultReporter::INTERCEPT_ALL_THREADS, &failures);
    c = placer::test_support::ExpectStepMatchesPyTorch(name, model, reference);
  } catch (const std::exception& error) {
    std::cout << "error: " << error.what() << '\n';
    return 2;
  }
  std::cout << name << ": " << c.ops << " ops, " << c.parameter_count << " parameters, loss "
            << c.loss << " (PyTorch " << c.reference_loss << "), worst gradient "
            << (c.worst_name.empty() ? "-" : c.worst_name) << " at " << c.worst
            << " of its tolerance, load " << c.load_seconds << " s, step " << c.step_seconds
            << " s\n";
  if (failures.size() == 0) return 0;
  std::cout << "not equal: " << failures.size() << " mismatches\n";
  constexpr int kShown = 20;  // a model whose parameters do not match fails once per parameter
  for (int i = 0; i < std::min(failures.size(), kShown); ++i) {
    // The header's own message (the model, the parameter, the values) is the last line; the lines
    // before it are GoogleTest's restatement of the failed expression.
    const std::string message = failures.GetTestPartResult(i).message();
    std::cout << "mismatch: " << message.substr(message.rfind('\n') + 1) << '\n';
  }
  if (failures.size() > kShown) std::cout << "and " << failures.size() - kShown << " more\n";
  return 1;
}
