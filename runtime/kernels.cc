#include "runtime/kernels.h"

#include <fmt/format.h>

#include "runtime/kernel_table.h"

namespace placer::runtime {
namespace {

const KernelTable& Kernels() {
  static const KernelTable* table = [] {
    auto* kernels = new KernelTable;
    AddElementwiseKernels(*kernels);
    AddTensorKernels(*kernels);
    AddReduceKernels(*kernels);
    AddNnKernels(*kernels);
    return kernels;
  }();
  return *table;
}

}  // namespace

const Kernel& FindKernel(const graph::Op& op) {
  auto it = Kernels().find(op.type);
  if (it == Kernels().end()) {
    throw graph::GraphError(fmt::format("op '{}': no kernel for op type '{}'", op.name, op.type));
  }
  return it->second;
}

std::vector<at::Tensor> RunForwardKernel(const graph::Op& op, const std::vector<at::Tensor>& inputs,
                                         at::Device device, uint64_t step) {
  return FindKernel(op)(op, inputs, KernelContext{device, step});
}

bool HasKernel(const std::string& type) { return Kernels().count(type) != 0; }

}  // namespace placer::runtime
