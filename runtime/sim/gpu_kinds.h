// GPU kinds for the roofline model: NVIDIA data-center GPUs as their data sheets give them, and
// the device spec and links the roofline model takes from a kind at a training precision.
// Torch-free, like the rest of the simulator.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sim/cost_model.h"

namespace placer::sim {

// The arithmetic of a training step's matmul- and convolution-class ops (simulation.precision):
// fp32 on the CUDA cores; tf32 on the tensor cores with fp32 storage (PyTorch's
// allow_tf32); bf16 and fp16 as automatic mixed precision (torch.autocast): those ops read and
// write 16-bit activations, the master weights and the optimizer stay fp32.
enum class Precision {
  kFp32,
  kTf32,
  kBf16,
  kFp16,
};
std::string_view ToString(Precision precision);
std::optional<Precision> ParsePrecision(std::string_view name);
// "fp32", "tf32", "bf16", "fp16", in that order.
std::vector<std::string_view> PrecisionNames();

// How the roofline model runs a GPU's ops (simulation.gpu_efficiency): kPeak, every op at the
// data sheet's peaks plus a fixed overhead (a lower bound, and every figure before achieved rates
// existed); kAchieved, at the fractions of the peaks that measured kernels reach
// (AchievedEfficiencyAt).
enum class GpuEfficiency {
  kPeak,
  kAchieved,
};
std::string_view ToString(GpuEfficiency efficiency);
// "peak", "achieved", in that order.
std::vector<std::string_view> GpuEfficiencyNames();

// What a GPU's kernels reach at `precision`: fitted by bench/fit_gpu_efficiency.py to the kernel
// table an H200 measured (bench/measured/h200_2026-12-04/gpu_kernels.csv) and taken as fractions
// of every kind's peaks, so for the other kinds they are an assumption, not a measurement. Where
// the fit chose GEMM shapes (tf32, bf16, fp16), streaming_multiprocessors is the H200's 132;
// GpuDeviceSpec puts the kind's own there.
AchievedEfficiency AchievedEfficiencyAt(Precision precision);

// One GPU model, as its data sheet gives it.
struct GpuKind {
  std::string_view name;  // as a config names it: "h100-sxm"
  // Peak dense FLOP/s (the data sheets' figures without 2:4 structured sparsity, which doubles
  // them): FP32 on the CUDA cores; TF32, BF16 and FP16 on the tensor cores.
  double fp32_flops = 0;
  double tf32_flops = 0;
  double bf16_flops = 0;
  double fp16_flops = 0;
  double memory_bandwidth = 0;  // bytes/s, the HBM (or GDDR) peak
  int64_t memory_bytes = 0;     // capacity, in the data sheet's decimal gigabytes
  // NVLink: its generation and bandwidth per direction, half the data sheet's bidirectional
  // figure; 0 and 0 for a GPU without NVLink.
  int nvlink_generation = 0;
  double nvlink_bytes_per_second = 0;
  int pcie_generation = 0;  // the host interface, x16
  // true: the kind's 8-GPU baseboard (HGX) joins every GPU pair through NVSwitch at the full
  // NVLink bandwidth; false: NVLink, where the card has it, is a bridge between two cards.
  bool nvswitch = false;
  // Streaming multiprocessors: the waves a GEMM's tiles fill (the architecture white papers).
  int streaming_multiprocessors = 0;
  std::string_view source;  // the data sheet its figures come from (SCHEMA.md's table says it)

  // The FLOP/s of a matmul- or convolution-class op at `precision`.
  double MatmulFlops(Precision precision) const;
};

// The registry: every kind a config may name, in the order SCHEMA.md lists them.
std::span<const GpuKind> GpuKinds();
// The kind named `name`, or nullptr.
const GpuKind* FindGpuKind(std::string_view name);
// The kind named `name`; throws std::invalid_argument listing the valid names.
const GpuKind& GpuKindNamed(std::string_view name);
// "a100-40gb-sxm, a100-80gb-sxm, ...": every kind's name, for error messages.
std::string GpuKindNameList();

// The kind of a GPU whose config names none: the H200 this project targets. At fp32 its spec is
// DevicePresets::H200() and its NVLink LinkPresets::Nvlink(), so a config that names neither kind
// nor precision simulates exactly what it did before kinds existed.
inline constexpr std::string_view kDefaultGpuKind = "h200";

// The roofline spec of one GPU of `kind` running at `precision`: matmul- and convolution-class
// ops at the kind's peak for the precision, every other op at its FP32 peak; under bf16 and fp16
// the activations those ops read and write count at half their fp32 bytes. Every op runs at its
// peak under kPeak, so predicted compute is a lower bound (overhead: Placeto's 5.7 us per op, as
// the presets); under kAchieved at AchievedEfficiencyAt(precision) of the peaks.
DeviceSpec GpuDeviceSpec(const GpuKind& kind, Precision precision,
                         GpuEfficiency efficiency = GpuEfficiency::kPeak);
// The NVLink between two GPUs of `kind` (Placeto's 25 us per transfer, as the presets); throws
// std::invalid_argument for a kind without NVLink.
LinkSpec NvlinkOf(const GpuKind& kind);

// Which kind each GPU is, for RooflineForGpuKinds.
struct GpuKindOptions {
  std::string_view default_kind = kDefaultGpuKind;  // GPUs without their own
  // Device name ("cuda:3") -> its kind. A pair of GPUs named here talks over the NVLink of the
  // slower end; any other pair over the default kind's, so a cluster of mixed kinds names every
  // GPU here.
  std::map<std::string, std::string> device_kinds;
  Precision precision = Precision::kFp32;
  GpuEfficiency efficiency = GpuEfficiency::kPeak;
  // Between GPUs of one host: NVLink (as above), not `options.gpu_to_gpu`. Every pair is joined
  // (NVSwitch); a kind with NVLink bridges only is simulated as though its every pair were
  // bridged.
  bool nvlink = false;
};

// The roofline model of `options` with its GPUs of these kinds: the default kind's spec for GPUs
// without their own (options.gpu), each named GPU's own, and with `nvlink` the kinds' NVLink
// between GPUs of one host. Host and network links stay `options`' (PCIe 4.0 to the host, whatever
// the kind's PCIe generation). Throws std::invalid_argument for an unknown kind, a device name that
// is not a GPU's, or `nvlink` with a kind that has none.
RooflineCostModel RooflineForGpuKinds(RooflineOptions options, const GpuKindOptions& gpus);

}  // namespace placer::sim
