// Internal to runtime/: the table of forward kernels (kernels.h), filled by one function per op
// family, and the helpers the kernels share.
#pragma once

#include <ATen/ATen.h>

#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "graph/ir.h"

namespace placer::runtime {

struct KernelContext {
  at::Device device;
  uint64_t step = 0;
};

using Kernel = std::function<std::vector<at::Tensor>(
    const graph::Op&, const std::vector<at::Tensor>&, const KernelContext&)>;
using KernelTable = std::unordered_map<std::string, Kernel>;

// The kernel of `op`'s type, for callers that resolve it once and call it many times (the
// executor, per op when it is built). Throws graph::GraphError naming the op and type if none.
// The table lives for the whole program, so the reference never dangles.
const Kernel& FindKernel(const graph::Op& op);

void AddElementwiseKernels(KernelTable& table);
void AddTensorKernels(KernelTable& table);
void AddReduceKernels(KernelTable& table);
void AddNnKernels(KernelTable& table);

// A kernel of one input and one output.
template <typename F>
Kernel Unary(F f) {
  return [f](const graph::Op& op, const std::vector<at::Tensor>& in, const KernelContext&) {
    return std::vector<at::Tensor>{f(op.attrs, in[0])};
  };
}

// Mirrors the shape rules' axis handling (graph/ops.cc), so kernels and shapes cannot disagree.
inline int64_t Axis(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

inline double FloatOr(const graph::Attributes& a, const std::string& name, double fallback) {
  return a.Has(name) ? a.GetFloat(name) : fallback;
}
inline int64_t IntOr(const graph::Attributes& a, const std::string& name, int64_t fallback) {
  return a.Has(name) ? a.GetInt(name) : fallback;
}

// Negative indices count from the end of an axis of `extent` (ONNX's rule for Gather and
// Scatter).
inline at::Tensor WrapIndices(const at::Tensor& indices, int64_t extent) {
  return at::where(indices < 0, indices + extent, indices);
}

}  // namespace placer::runtime
