#include "placer/setup/portable_float.h"

#include <ATen/Version.h>
#include <fmt/format.h>

#include <cstdlib>
#include <string_view>

namespace placer::setup {
namespace {

constexpr const char* kAtenVariable = "ATEN_CPU_CAPABILITY";
constexpr const char* kAtenPortable = "avx2";
constexpr const char* kMklVariable = "MKL_CBWR";
constexpr const char* kMklPortable = "COMPATIBLE";

}  // namespace

void UsePortableFloatKernels() {
  setenv(kAtenVariable, kAtenPortable, 1);
  setenv(kMklVariable, kMklPortable, 1);
}

std::string PortableFloatKernelsNote() {
  const std::string aten = at::get_cpu_capability();  // what ATen chose at its first kernel
  const char* mkl = std::getenv(kMklVariable);
  const bool portable = aten == "AVX2" && mkl != nullptr && std::string_view(mkl) == kMklPortable;
  if (portable) return "";
  return fmt::format(
      "note: this process computes with ATen's {} kernels and MKL's {} branch, not the portable "
      "ones ({}={} {}={}, which `placer pretrain` sets): the network may differ from one "
      "trained on another host from the same seed",
      aten, mkl == nullptr ? "default" : mkl, kAtenVariable, kAtenPortable, kMklVariable,
      kMklPortable);
}

}  // namespace placer::setup
