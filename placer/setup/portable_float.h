// Pretraining gives the same network from the same seed on every x86-64 host, or the shipped
// networks (configs/edit_model.pt) could not be checked against what the commands make. By
// default ATen picks its kernels by the host's widest vectors (AVX-512 or AVX2) and MKL its GEMM
// by the processor, and the rounding of those paths differs: an AVX-512 host and an AVX2 host
// train networks apart from the first hundred steps (Spearman 0.80 between their edit models).
// Pinning ATen to AVX2, which every x86-64 host in service has, and MKL to its compatible branch
// makes the hosts agree at no measured cost (the edit model's pretraining, 20 s either way).
#pragma once

#include <string>

namespace placer::setup {

// Pins the process's float kernels to the portable ones. Both libraries read their choice once,
// at the first kernel they run: call it before any tensor op (the pretrain command does so while
// it parses its arguments, the pretraining tests before main).
void UsePortableFloatKernels();

// Whether the process computes with the portable kernels; empty when it does, else a note that
// says what differs and how to get them.
std::string PortableFloatKernelsNote();

}  // namespace placer::setup
