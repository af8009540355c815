#include "runtime/micro_batches.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "graph/micro_batches.h"

namespace placer::runtime {

TensorMap SplitIntoMicroBatches(const TensorMap& batch, int micro_batches) {
  TensorMap split;
  for (const auto& [name, value] : batch) {
    const int64_t rows = value.dim() > 0 ? value.size(0) : 0;
    if (micro_batches < 1 || rows % micro_batches != 0) {
      throw StepFailure(fmt::format("micro_batches: {} does not divide the {} rows of '{}'",
                                    micro_batches, rows, name));
    }
    const int64_t size = rows / micro_batches;
    for (int k = 0; k < micro_batches; ++k) {
      split.emplace(graph::MicroBatchName(k, name), value.narrow(0, k * size, size));
    }
  }
  return split;
}

}  // namespace placer::runtime
