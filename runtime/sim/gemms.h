// The GEMMs a matmul-class op runs, and what a GEMM's shape costs it on a GPU, for the roofline
// model's achieved efficiency (cost_model.h, AchievedEfficiency). Torch-free.
#pragma once

#include <vector>

#include "graph/ir.h"

namespace placer::sim {

// One GEMM of a matmul-class op: `batch` independent products of m x k by k x n.
struct Gemm {
  double batch = 1, m = 0, n = 0, k = 0;
};
// The GEMMs `op` runs: a Linear's rows x out features (inner: in features); a MatMul's batch of
// products; a convolution's implicit GEMM per group (m = batch x output pixels, n = output
// channels, k = input channels x kernel area); a recurrent cell's gate GEMM (batch x gates x
// hidden, inner: input + hidden); the backward op of one of these two, the input's gradient
// (m x k, inner n) and the weight's (n x k, inner m). Empty for any other op (an einsum too).
std::vector<Gemm> GemmsOf(const graph::Graph& graph, const graph::Op& op);
// What a GEMM keeps of the peak for its shape. Its 128 x 128 output tiles, when fewer than the
// SMs, split k into up to sms / tiles slices of at least 256 (split-K, as cuBLAS and CUTLASS do
// for skinny products); tiles x slices fill ceil(tiles x slices / sms) waves, the last maybe
// part-empty; and each slice of depth d keeps d / (d + inner_fill_steps) (its pipeline's fill and
// drain). The model of NVIDIA's GEMM performance guide and Habitat (ATC'21), simplified.
double GemmShapeEfficiency(const Gemm& gemm, int sms, double inner_fill_steps);

}  // namespace placer::sim
