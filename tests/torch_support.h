// Helpers shared by the test suites that link LibTorch (tests/support.h stays torch-free).
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <string>

#include "runtime/executor.h"

namespace placer::test_support {

// Every parameter of `expected` is in `actual` and equal to tolerance (relative 1e-4, absolute
// `atol`); a failure names `context`, the parameter, the largest difference and the magnitude.
inline void ExpectSameParameters(const runtime::TensorMap& actual,
                                 const runtime::TensorMap& expected, const std::string& context,
                                 double atol) {
  ASSERT_EQ(actual.size(), expected.size());
  for (const auto& [name, value] : expected) {
    ASSERT_TRUE(actual.count(name)) << name;
    EXPECT_TRUE(at::allclose(actual.at(name), value, 1e-4, atol))
        << context << ": parameter " << name << " differs by "
        << (actual.at(name) - value).abs().max().item<double>() << " (values up to "
        << value.abs().max().item<double>() << ")";
  }
}

}  // namespace placer::test_support
