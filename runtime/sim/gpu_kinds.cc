#include "runtime/sim/gpu_kinds.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <stdexcept>

#include "graph/device.h"

namespace placer::sim {

namespace {

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;
constexpr int64_t kGigabyte = 1000 * 1000 * 1000;
// Placeto's simulator defaults (p2.8xlarge), as DevicePresets and LinkPresets charge them.
constexpr double kPlacetoOpOverheadSeconds = 5.7e-6;
constexpr double kPlacetoTransferLatencySeconds = 25e-6;

// SM counts: the NVIDIA A100 Tensor Core GPU Architecture white paper (A100: 108 SMs), the NVIDIA
// H100 Tensor Core GPU Architecture white paper (H100 SXM5: 132; H100 PCIe: 114; the H200 is the
// H100 SXM's GH100 with 141 GB, 132), the NVIDIA Ada GPU Architecture white paper (L40S's AD102
// configuration: 142).
// Where a data sheet gives tensor-core figures "with sparsity" only, the dense figure is half of
// it, as its footnote says; that halving is written out below.
const std::array kGpuKinds = {
    // NVIDIA A100 Tensor Core GPU data sheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web):
    // A100 40GB SXM: FP32 19.5, TF32 156, BF16 312, FP16 312 TFLOPS (dense); 40GB HBM2 at
    // 1,555GB/s; NVLink (3rd generation) 600GB/s; PCIe Gen4; HGX A100 boards have NVSwitch.
    GpuKind{.name = "a100-40gb-sxm",
            .fp32_flops = 19.5 * kTera,
            .tf32_flops = 156 * kTera,
            .bf16_flops = 312 * kTera,
            .fp16_flops = 312 * kTera,
            .memory_bandwidth = 1555 * kGiga,
            .memory_bytes = 40 * kGigabyte,
            .nvlink_generation = 3,
            .nvlink_bytes_per_second = 600 * kGiga / 2,
            .pcie_generation = 4,
            .nvswitch = true,
            .streaming_multiprocessors = 108,
            .source = "NVIDIA A100 Tensor Core GPU data sheet"},
    // The same data sheet, A100 80GB SXM: the 40GB's compute; 80GB HBM2e at 2,039GB/s.
    GpuKind{.name = "a100-80gb-sxm",
            .fp32_flops = 19.5 * kTera,
            .tf32_flops = 156 * kTera,
            .bf16_flops = 312 * kTera,
            .fp16_flops = 312 * kTera,
            .memory_bandwidth = 2039 * kGiga,
            .memory_bytes = 80 * kGigabyte,
            .nvlink_generation = 3,
            .nvlink_bytes_per_second = 600 * kGiga / 2,
            .pcie_generation = 4,
            .nvswitch = true,
            .streaming_multiprocessors = 108,
            .source = "NVIDIA A100 Tensor Core GPU data sheet"},
    // The same data sheet, A100 80GB PCIe: the SXM's peak compute; 80GB HBM2e at 1,935GB/s;
    // "NVIDIA NVLink Bridge for 2 GPUs: 600GB/s", PCIe Gen4 64GB/s; no NVSwitch.
    GpuKind{.name = "a100-80gb-pcie",
            .fp32_flops = 19.5 * kTera,
            .tf32_flops = 156 * kTera,
            .bf16_flops = 312 * kTera,
            .fp16_flops = 312 * kTera,
            .memory_bandwidth = 1935 * kGiga,
            .memory_bytes = 80 * kGigabyte,
            .nvlink_generation = 3,
            .nvlink_bytes_per_second = 600 * kGiga / 2,
            .pcie_generation = 4,
            .nvswitch = false,
            .streaming_multiprocessors = 108,
            .source = "NVIDIA A100 Tensor Core GPU data sheet"},
    // NVIDIA H100 Tensor Core GPU data sheet, H100 SXM: FP32 67 TFLOPS; TF32 989, BF16 1,979,
    // FP16 1,979 TFLOPS with sparsity (halved here); 80GB at 3.35TB/s; NVLink 900GB/s (4th
    // generation); PCIe Gen5 128GB/s; HGX H100 boards have NVSwitch.
    GpuKind{.name = "h100-sxm",
            .fp32_flops = 67 * kTera,
            .tf32_flops = 989 * kTera / 2,
            .bf16_flops = 1979 * kTera / 2,
            .fp16_flops = 1979 * kTera / 2,
            .memory_bandwidth = 3.35 * kTera,
            .memory_bytes = 80 * kGigabyte,
            .nvlink_generation = 4,
            .nvlink_bytes_per_second = 900 * kGiga / 2,
            .pcie_generation = 5,
            .nvswitch = true,
            .streaming_multiprocessors = 132,
            .source = "NVIDIA H100 Tensor Core GPU data sheet"},
    // The same data sheet, H100 PCIe: FP32 51 TFLOPS; TF32 756, BF16 1,513, FP16 1,513 TFLOPS
    // with sparsity (halved here); 80GB at 2TB/s; NVLink (bridge) 600GB/s; PCIe Gen5 128GB/s.
    GpuKind{.name = "h100-pcie",
            .fp32_flops = 51 * kTera,
            .tf32_flops = 756 * kTera / 2,
            .bf16_flops = 1513 * kTera / 2,
            .fp16_flops = 1513 * kTera / 2,
            .memory_bandwidth = 2 * kTera,
            .memory_bytes = 80 * kGigabyte,
            .nvlink_generation = 4,
            .nvlink_bytes_per_second = 600 * kGiga / 2,
            .pcie_generation = 5,
            .nvswitch = false,
            .streaming_multiprocessors = 114,
            .source = "NVIDIA H100 Tensor Core GPU data sheet"},
    // NVIDIA H200 Tensor Core GPU data sheet, H200 SXM: the H100 SXM's compute (FP32 67 TFLOPS;
    // TF32 989, BF16 1,979, FP16 1,979 TFLOPS with sparsity, halved here); 141GB HBM3e at
    // 4.8TB/s; NVLink 900GB/s; PCIe Gen5 128GB/s; HGX H200 boards have NVSwitch.
    GpuKind{.name = "h200",
            .fp32_flops = 67 * kTera,
            .tf32_flops = 989 * kTera / 2,
            .bf16_flops = 1979 * kTera / 2,
            .fp16_flops = 1979 * kTera / 2,
            .memory_bandwidth = 4.8 * kTera,
            .memory_bytes = 141 * kGigabyte,
            .nvlink_generation = 4,
            .nvlink_bytes_per_second = 900 * kGiga / 2,
            .pcie_generation = 5,
            .nvswitch = true,
            .streaming_multiprocessors = 132,
            .source = "NVIDIA H200 Tensor Core GPU data sheet"},
    // NVIDIA L40S GPU data sheet: FP32 91.6 TFLOPS; TF32 183, BF16 362.05, FP16 362.05 TFLOPS
    // dense (366, 733 and 733 with sparsity); 48GB GDDR6 at 864GB/s; PCIe Gen4 x16; no NVLink.
    GpuKind{.name = "l40s",
            .fp32_flops = 91.6 * kTera,
            .tf32_flops = 183 * kTera,
            .bf16_flops = 362.05 * kTera,
            .fp16_flops = 362.05 * kTera,
            .memory_bandwidth = 864 * kGiga,
            .memory_bytes = 48 * kGigabyte,
            .nvlink_generation = 0,
            .nvlink_bytes_per_second = 0,
            .pcie_generation = 4,
            .nvswitch = false,
            .streaming_multiprocessors = 142,
            .source = "NVIDIA L40S GPU data sheet"},
};

constexpr std::array<std::pair<Precision, std::string_view>, 4> kPrecisionNames = {{
    {Precision::kFp32, "fp32"},
    {Precision::kTf32, "tf32"},
    {Precision::kBf16, "bf16"},
    {Precision::kFp16, "fp16"},
}};

constexpr std::array<std::pair<GpuEfficiency, std::string_view>, 2> kGpuEfficiencyNames = {{
    {GpuEfficiency::kPeak, "peak"},
    {GpuEfficiency::kAchieved, "achieved"},
}};

// Measured on an NVIDIA H200 SXM (PyTorch 2.11, CUDA 13.0, cuDNN 9.19) by bench/gpu_models.py in
// the GPU check of 2026-12-04; fitted by `python3 bench/fit_gpu_efficiency.py` (bench/RESULTS.md,
// "Achieved GPU efficiency"). The memory fraction and fixed time: a line through the add, relu
// and copy rows above the issue floor (median error 1.0%). The issue time: a one-element add
// issued back to back, the host's rate. The matmul fraction and fixed time: the best of a grid
// over 18 GEMM and 9 convolution rows of each precision, without GEMM shapes ("flat") and with
// them ("shaped": tiles, split-K, waves, the inner dimension's fill), each precision taking the
// one of the lower error: shaped for tf32 and bf16, flat for fp32. fp16 was not measured; its
// tensor-core peak and kernels are bf16's, so it takes bf16's constants.
constexpr int kH200StreamingMultiprocessors = 132;
constexpr double kIssueSeconds = 7.12e-6;
constexpr double kBandwidthFraction = 0.8715;
constexpr double kMemoryFixedSeconds = 3.17e-6;

}  // namespace

std::string_view ToString(GpuEfficiency efficiency) {
  for (const auto& [value, name] : kGpuEfficiencyNames) {
    if (value == efficiency) return name;
  }
  return "?";
}

std::vector<std::string_view> GpuEfficiencyNames() {
  std::vector<std::string_view> names;
  for (const auto& entry : kGpuEfficiencyNames) names.push_back(entry.second);
  return names;
}

AchievedEfficiency AchievedEfficiencyAt(Precision precision) {
  AchievedEfficiency achieved{.bandwidth_fraction = kBandwidthFraction,
                              .memory_fixed_seconds = kMemoryFixedSeconds,
                              .issue_seconds = kIssueSeconds};
  switch (precision) {
    case Precision::kFp32:
      achieved.matmul_fraction = 0.730;
      achieved.matmul_fixed_seconds = 15.6e-6;
      break;
    case Precision::kTf32:
      achieved.matmul_fraction = 0.8693;
      achieved.matmul_fixed_seconds = 9.52e-6;
      achieved.streaming_multiprocessors = kH200StreamingMultiprocessors;
      achieved.inner_fill_steps = 262;
      break;
    case Precision::kBf16:
    case Precision::kFp16:
      achieved.matmul_fraction = 0.8387;
      achieved.matmul_fixed_seconds = 10.05e-6;
      achieved.streaming_multiprocessors = kH200StreamingMultiprocessors;
      achieved.inner_fill_steps = 205;
      break;
  }
  return achieved;
}

std::string_view ToString(Precision precision) {
  for (const auto& [value, name] : kPrecisionNames) {
    if (value == precision) return name;
  }
  return "?";
}

std::optional<Precision> ParsePrecision(std::string_view name) {
  for (const auto& [value, known] : kPrecisionNames) {
    if (known == name) return value;
  }
  return std::nullopt;
}

std::vector<std::string_view> PrecisionNames() {
  std::vector<std::string_view> names;
  for (const auto& entry : kPrecisionNames) names.push_back(entry.second);
  return names;
}

double GpuKind::MatmulFlops(Precision precision) const {
  switch (precision) {
    case Precision::kFp32:
      return fp32_flops;
    case Precision::kTf32:
      return tf32_flops;
    case Precision::kBf16:
      return bf16_flops;
    case Precision::kFp16:
      return fp16_flops;
  }
  return fp32_flops;
}

std::span<const GpuKind> GpuKinds() { return kGpuKinds; }

const GpuKind* FindGpuKind(std::string_view name) {
  for (const GpuKind& kind : kGpuKinds) {
    if (kind.name == name) return &kind;
  }
  return nullptr;
}

std::string GpuKindNameList() {
  std::vector<std::string_view> names;
  for (const GpuKind& kind : kGpuKinds) names.push_back(kind.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

const GpuKind& GpuKindNamed(std::string_view name) {
  if (const GpuKind* kind = FindGpuKind(name)) return *kind;
  throw std::invalid_argument(
      fmt::format("unknown GPU kind '{}'; known kinds: {}", name, GpuKindNameList()));
}

DeviceSpec GpuDeviceSpec(const GpuKind& kind, Precision precision, GpuEfficiency efficiency) {
  const bool half_width = precision == Precision::kBf16 || precision == Precision::kFp16;
  DeviceSpec spec{.peak_flops = kind.fp32_flops,
                  .memory_bandwidth = kind.memory_bandwidth,
                  .op_overhead_seconds = kPlacetoOpOverheadSeconds,
                  .matmul_flops = kind.MatmulFlops(precision),
                  .matmul_activation_byte_scale = half_width ? 0.5 : 1.0};
  if (efficiency == GpuEfficiency::kAchieved) {
    spec.achieved = AchievedEfficiencyAt(precision);
    if (spec.achieved->streaming_multiprocessors > 0) {
      spec.achieved->streaming_multiprocessors = kind.streaming_multiprocessors;
    }
  }
  return spec;
}

LinkSpec NvlinkOf(const GpuKind& kind) {
  if (kind.nvlink_bytes_per_second <= 0) {
    throw std::invalid_argument(fmt::format("GPU kind '{}' has no NVLink", kind.name));
  }
  return {.seconds_per_byte = 1.0 / kind.nvlink_bytes_per_second,
          .latency_seconds = kPlacetoTransferLatencySeconds,
          .collective_step_seconds = LinkPresets::Nvlink().collective_step_seconds};
}

RooflineCostModel RooflineForGpuKinds(RooflineOptions options, const GpuKindOptions& gpus) {
  const GpuKind& default_kind = GpuKindNamed(gpus.default_kind);
  options.gpu = GpuDeviceSpec(default_kind, gpus.precision, gpus.efficiency);
  if (gpus.nvlink) options.gpu_to_gpu = NvlinkOf(default_kind);
  RooflineCostModel model(options);
  std::map<std::string, const GpuKind*> kind_of;
  for (const auto& [name, kind_name] : gpus.device_kinds) {
    if (graph::DeviceFromName(name).type != graph::DeviceType::kCuda) {
      throw std::invalid_argument(
          fmt::format("GPU kind '{}' given to '{}', which is not a GPU", kind_name, name));
    }
    const GpuKind& kind = GpuKindNamed(kind_name);
    kind_of[name] = &kind;
    model.SetDeviceSpec(name, GpuDeviceSpec(kind, gpus.precision, gpus.efficiency));
  }
  if (!gpus.nvlink) return model;
  // A pair's NVLink runs at its slower end's rate. Links set for a pair override the hosts, so
  // only pairs within a host get one; between hosts the network stays.
  for (const auto& [from, from_kind] : kind_of) {
    for (const auto& [to, to_kind] : kind_of) {
      if (from == to) continue;
      if (model.HostOf(graph::DeviceFromName(from)) != model.HostOf(graph::DeviceFromName(to))) {
        continue;
      }
      const bool from_slower =
          from_kind->nvlink_bytes_per_second <= to_kind->nvlink_bytes_per_second;
      model.SetLink(from, to, NvlinkOf(from_slower ? *from_kind : *to_kind));
    }
  }
  return model;
}

}  // namespace placer::sim
