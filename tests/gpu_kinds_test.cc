// The GPU kinds of the roofline model: each preset against its data sheet (the figures written
// out here, so that a typo in the table fails), the default that keeps the H200 at its FP32 peak
// bit for bit, and a GEMM's predicted time on an H100 SXM in bf16 and fp32, computed by hand.
#include "runtime/sim/gpu_kinds.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "graph/autocast.h"
#include "graph/ir.h"
#include "graph/models.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "graph/training_step.h"
#include "graph/zoo.h"
#include "runtime/sim/cost_model.h"
#include "runtime/sim/gemms.h"
#include "runtime/sim/simulator.h"

namespace placer::sim {
namespace {

using graph::Device;
using graph::DeviceType;
using graph::Graph;
using graph::ModelBuilder;
using graph::OpId;
using graph::TensorId;
using ::testing::HasSubstr;

Device Cuda(int index) {
  return {.name = "cuda:" + std::to_string(index), .type = DeviceType::kCuda, .index = index};
}

// A data sheet's row: TFLOP/s dense, GB/s, GB, NVLink GB/s bidirectional (0: none).
struct DataSheet {
  const char* name;
  double fp32_tflops, tf32_tflops, bf16_tflops, fp16_tflops;
  double memory_gb_per_s;
  double memory_gb;
  int nvlink_generation;
  double nvlink_bidirectional_gb_per_s;
  int pcie_generation;
  bool nvswitch;
  int streaming_multiprocessors;  // the architecture white papers
};

// Dense figures; where a data sheet gives only the sparse one (H100, H200), half of it.
constexpr DataSheet kDataSheets[] = {
    {"a100-40gb-sxm", 19.5, 156, 312, 312, 1555, 40, 3, 600, 4, true, 108},
    {"a100-80gb-sxm", 19.5, 156, 312, 312, 2039, 80, 3, 600, 4, true, 108},
    {"a100-80gb-pcie", 19.5, 156, 312, 312, 1935, 80, 3, 600, 4, false, 108},
    {"h100-sxm", 67, 494.5, 989.5, 989.5, 3350, 80, 4, 900, 5, true, 132},
    {"h100-pcie", 51, 378, 756.5, 756.5, 2000, 80, 4, 600, 5, false, 114},
    {"h200", 67, 494.5, 989.5, 989.5, 4800, 141, 4, 900, 5, true, 132},
    {"l40s", 91.6, 183, 362.05, 362.05, 864, 48, 0, 0, 4, false, 142},
};

TEST(GpuKindsTest, EveryPresetHasItsDataSheetsNumbers) {
  ASSERT_EQ(GpuKinds().size(), std::size(kDataSheets));
  for (const DataSheet& sheet : kDataSheets) {
    SCOPED_TRACE(sheet.name);
    const GpuKind* kind = FindGpuKind(sheet.name);
    ASSERT_NE(kind, nullptr);
    EXPECT_EQ(kind->name, sheet.name);
    EXPECT_DOUBLE_EQ(kind->fp32_flops, sheet.fp32_tflops * 1e12);
    EXPECT_DOUBLE_EQ(kind->tf32_flops, sheet.tf32_tflops * 1e12);
    EXPECT_DOUBLE_EQ(kind->bf16_flops, sheet.bf16_tflops * 1e12);
    EXPECT_DOUBLE_EQ(kind->fp16_flops, sheet.fp16_tflops * 1e12);
    EXPECT_DOUBLE_EQ(kind->memory_bandwidth, sheet.memory_gb_per_s * 1e9);
    EXPECT_EQ(kind->memory_bytes, static_cast<int64_t>(sheet.memory_gb * 1e9));
    EXPECT_EQ(kind->nvlink_generation, sheet.nvlink_generation);
    EXPECT_DOUBLE_EQ(kind->nvlink_bytes_per_second, sheet.nvlink_bidirectional_gb_per_s * 1e9 / 2);
    EXPECT_EQ(kind->pcie_generation, sheet.pcie_generation);
    EXPECT_EQ(kind->nvswitch, sheet.nvswitch);
    EXPECT_EQ(kind->streaming_multiprocessors, sheet.streaming_multiprocessors);
    EXPECT_DOUBLE_EQ(kind->MatmulFlops(Precision::kFp32), sheet.fp32_tflops * 1e12);
    EXPECT_DOUBLE_EQ(kind->MatmulFlops(Precision::kTf32), sheet.tf32_tflops * 1e12);
    EXPECT_DOUBLE_EQ(kind->MatmulFlops(Precision::kBf16), sheet.bf16_tflops * 1e12);
    EXPECT_DOUBLE_EQ(kind->MatmulFlops(Precision::kFp16), sheet.fp16_tflops * 1e12);
  }
}

TEST(GpuKindsTest, AnUnknownNameIsAnErrorListingTheKnownOnes) {
  EXPECT_EQ(FindGpuKind("h100"), nullptr);
  EXPECT_THAT([] { GpuKindNamed("h100"); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  HasSubstr("unknown GPU kind 'h100'; known kinds: a100-40gb-sxm, a100-80gb-sxm, "
                            "a100-80gb-pcie, h100-sxm, h100-pcie, h200, l40s")));
  EXPECT_THROW(NvlinkOf(GpuKindNamed("l40s")), std::invalid_argument);
}

TEST(GpuKindsTest, PrecisionsRoundTripThroughTheirNames) {
  EXPECT_THAT(PrecisionNames(), ::testing::ElementsAre("fp32", "tf32", "bf16", "fp16"));
  for (std::string_view name : PrecisionNames()) EXPECT_EQ(ToString(*ParsePrecision(name)), name);
  EXPECT_EQ(ParsePrecision("fp64"), std::nullopt);
}

// The contract that keeps every earlier figure: no kind and no precision simulate the H200 at
// its FP32 peak, exactly as RooflineCostModel's defaults did before kinds existed.
TEST(GpuKindsTest, TheDefaultIsTheH200AtItsFp32PeakBitForBit) {
  const RooflineCostModel before;
  const RooflineCostModel defaults = RooflineForGpuKinds({}, {});
  Graph g = graph::BuildInceptionV3({.batch_size = 2, .image_size = 75, .width_multiplier = 0.25});
  const Device gpu = Cuda(0);
  for (OpId op = 0; op < g.num_ops(); ++op) {
    ASSERT_EQ(defaults.OpSeconds(g, op, gpu), before.OpSeconds(g, op, gpu)) << g.op(op).name;
  }
  RooflineOptions nvlink_before;
  nvlink_before.gpu_to_gpu = LinkPresets::Nvlink();
  const Device gpu1 = Cuda(1);
  EXPECT_EQ(RooflineForGpuKinds({}, {.nvlink = true}).LinkOf(&gpu, gpu1),
            RooflineCostModel(nvlink_before).LinkOf(&gpu, gpu1));
  EXPECT_EQ(GpuKindNamed(kDefaultGpuKind).memory_bytes, int64_t{141} * 1000 * 1000 * 1000);
}

// x [1024, 1024] -> fc (Linear to 1024, no bias) -> relu: one 1024^3 GEMM.
Graph Gemm() {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {1024, 1024});
  b.Relu("relu", b.Linear("fc", x, 1024, 0.1, /*bias=*/false));
  return g;
}

TEST(GpuKindsTest, AGemmOnAnH100SxmRunsAtTheTensorCorePeakOfItsPrecision) {
  Graph g = Gemm();
  const OpId fc = *g.FindOp("fc");
  const OpId relu = *g.FindOp("relu");
  const Device gpu = Cuda(0);
  const double flops = 2.0 * 1024 * 1024 * 1024;  // a multiply-add per (row, column, inner) is 2
  const double tensor_bytes = 1024.0 * 1024 * 4;  // x, the weight and the output, fp32
  const double bandwidth = 3.35e12;               // H100 SXM, bytes/s
  const double overhead = 5.7e-6;

  const RooflineCostModel fp32 =
      RooflineForGpuKinds({}, {.default_kind = "h100-sxm", .precision = Precision::kFp32});
  // 2^31 / 67e12 + 3 * 4 MiB / 3.35e12 + 5.7 us = 32.052 + 3.756 + 5.7 = 41.508 us.
  EXPECT_DOUBLE_EQ(fp32.OpSeconds(g, fc, gpu),
                   flops / 67e12 + 3 * tensor_bytes / bandwidth + overhead);
  EXPECT_NEAR(fp32.OpSeconds(g, fc, gpu), 41.508e-6, 1e-9);

  const RooflineCostModel bf16 =
      RooflineForGpuKinds({}, {.default_kind = "h100-sxm", .precision = Precision::kBf16});
  // The tensor cores' dense 989.5 TFLOP/s; x and the output in 16 bits, the fp32 master weight
  // whole: 2^31 / 989.5e12 + (2 MiB + 4 MiB + 2 MiB) / 3.35e12 + 5.7 us
  // = 2.170 + 2.504 + 5.7 = 10.374 us.
  EXPECT_DOUBLE_EQ(bf16.OpSeconds(g, fc, gpu),
                   flops / 989.5e12 + 2 * tensor_bytes / bandwidth + overhead);
  EXPECT_NEAR(bf16.OpSeconds(g, fc, gpu), 10.374e-6, 1e-9);

  // The ReLU is no tensor-core op: the FP32 peak and fp32 bytes under either precision.
  const double relu_seconds = 1024.0 * 1024 / 67e12 + 2 * tensor_bytes / bandwidth + overhead;
  EXPECT_DOUBLE_EQ(fp32.OpSeconds(g, relu, gpu), relu_seconds);
  EXPECT_DOUBLE_EQ(bf16.OpSeconds(g, relu, gpu), relu_seconds);
}

// simulation.gpu_efficiency: achieved, by hand, where the fit chose no GEMM shapes (fp32). On an
// H200 the 1024^3 GEMM runs on the CUDA cores at 73% of 67 TFLOP/s plus 15.6 us of launch, fill
// and drain; the ReLU is memory-bound at 87.15% of 4.8 TB/s plus 3.17 us; and an op too small for
// either waits for the host's 7.12 us of issue.
TEST(GpuKindsTest, AchievedEfficiencyRunsAGemmAtItsFittedFractionOfThePeak) {
  Graph g = Gemm();
  const OpId fc = *g.FindOp("fc");
  const OpId relu = *g.FindOp("relu");
  const Device gpu = Cuda(0);
  const RooflineCostModel fp32 = RooflineForGpuKinds({}, {.efficiency = GpuEfficiency::kAchieved});
  // Compute 2^31 / (67e12 * 0.73) = 43.907 us; memory 3 x 4 MiB / (4.8e12 * 0.8715) = 3.008 us;
  // the larger plus 15.6 us = 59.507 us.
  EXPECT_DOUBLE_EQ(fp32.OpSeconds(g, fc, gpu), 2.0 * 1024 * 1024 * 1024 / (67e12 * 0.73) + 15.6e-6);
  EXPECT_NEAR(fp32.OpSeconds(g, fc, gpu), 59.507e-6, 1e-9);
  // The ReLU reads and writes 4 MiB each: 8 MiB / (4.8e12 * 0.8715) + 3.17 us = 5.175 us, under
  // the 7.12 us issue floor.
  const double relu_memory = 2 * 1024.0 * 1024 * 4 / (4.8e12 * 0.8715) + 3.17e-6;
  EXPECT_NEAR(relu_memory, 5.175e-6, 1e-9);
  EXPECT_DOUBLE_EQ(fp32.OpSeconds(g, relu, gpu), 7.12e-6);
  // Achieved is never faster than the peak model's kernel (its overhead aside).
  const RooflineCostModel peak = RooflineForGpuKinds({}, {});
  EXPECT_GT(fp32.OpSeconds(g, fc, gpu), peak.OpSeconds(g, fc, gpu));
}

// Where the fit chose GEMM shapes (tf32; bf16 and fp16 too). BERT-large's FFN GEMM (12288 tokens
// x 1024, inner 4096): 96 x 8 = 768 tiles of 128 x 128, more than the 132 SMs, so no split-K; 6
// waves, 768 / 792 = 0.9697 of them busy; an inner 4096 keeps 4096 / (4096 + 262) = 0.9399;
// 0.9114 in all. A skinny 32 x 1024 (inner 1024) has 8 tiles and splits its k in 4 slices of 256
// (not 16: a slice is at least 256 deep): 32 of 132 SMs busy.
TEST(GpuKindsTest, WithGemmShapesAGemmLosesWhatItsTilesWavesAndInnerDimensionCost) {
  EXPECT_NEAR(GemmShapeEfficiency({.m = 12288, .n = 1024, .k = 4096}, 132, 262), 0.91140, 1e-5);
  EXPECT_NEAR(GemmShapeEfficiency({.m = 32, .n = 1024, .k = 1024}, 132, 0), 32.0 / 132, 1e-12);

  Graph g;
  ModelBuilder b(g);
  b.Linear("fc", b.Input("x", {12288, 4096}), 1024, 0.1, /*bias=*/false);
  const OpId fc = *g.FindOp("fc");
  const std::vector<sim::Gemm> gemms = GemmsOf(g, g.op(fc));
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0].m, 12288);
  EXPECT_EQ(gemms[0].n, 1024);
  EXPECT_EQ(gemms[0].k, 4096);
  // FLOP 2 x 12288 x 1024 x 4096 = 103.08 G at 494.5e12 x 0.8693 x 0.9114 = 391.8 TFLOP/s:
  // 263.10 us, compute-bound (x 192 MiB, the weight 16 MiB and the output 48 MiB, fp32, at
  // 0.8715 x 4.8 TB/s: 64.2 us), plus 9.52 us: 272.62 us.
  const RooflineCostModel tf32 = RooflineForGpuKinds(
      {}, {.precision = Precision::kTf32, .efficiency = GpuEfficiency::kAchieved});
  const double flops = 2.0 * 12288 * 1024 * 4096;
  const double rate = 494.5e12 * 0.8693 * (768.0 / 792) * (4096.0 / (4096 + 262));
  EXPECT_DOUBLE_EQ(tf32.OpSeconds(g, fc, Cuda(0)), flops / rate + 9.52e-6);
  EXPECT_NEAR(tf32.OpSeconds(g, fc, Cuda(0)), 272.62e-6, 0.01e-6);
  // On an A100 (108 SMs) the same GEMM's 768 tiles take 8 waves: 768 / 864 of them busy.
  const RooflineCostModel a100 = RooflineForGpuKinds({}, {.default_kind = "a100-80gb-sxm",
                                                          .precision = Precision::kTf32,
                                                          .efficiency = GpuEfficiency::kAchieved});
  const double a100_rate = 156e12 * 0.8693 * (768.0 / 864) * (4096.0 / (4096 + 262));
  EXPECT_DOUBLE_EQ(a100.OpSeconds(g, fc, Cuda(0)), flops / a100_rate + 9.52e-6);
}

// A backward op runs the forward GEMM's two gradients; a convolution is its implicit GEMM.
TEST(GpuKindsTest, BackwardOpsAndConvolutionsHaveTheirGemms) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {8, 3, 32, 32});
  TensorId labels = b.Input("labels", {8}, graph::DType::kInt64, graph::TensorKind::kLabel);
  TensorId conv = b.Relu("relu", b.Conv2d("conv", x, 16, 3, 0.1));  // 30 x 30 out, no padding
  TensorId flat = b.Reshape("flat", conv, {8, 16 * 30 * 30});
  b.SoftmaxCrossEntropy("loss", b.Linear("fc", flat, 10, 0.1), labels);
  graph::AppendBackwardAndUpdate(g, 0.1);
  const std::vector<sim::Gemm> forward = GemmsOf(g, g.op(*g.FindOp("conv")));
  ASSERT_EQ(forward.size(), 1u);
  EXPECT_EQ(forward[0].m, 8 * 30 * 30);
  EXPECT_EQ(forward[0].n, 16);
  EXPECT_EQ(forward[0].k, 3 * 3 * 3);
  for (const graph::Op& op : g.ops()) {
    if (op.phase != graph::Phase::kBackward || op.forward_op == graph::kNoOp) continue;
    if (g.op(op.forward_op).name != "fc") continue;
    const std::vector<sim::Gemm> backward = GemmsOf(g, op);
    ASSERT_EQ(backward.size(), 2u);
    // fc: m 8, n 10, k 14400. The input's gradient 8 x 14400 (inner 10), the weight's 10 x 14400
    // (inner 8).
    EXPECT_EQ(backward[0].m, 8);
    EXPECT_EQ(backward[0].n, 14400);
    EXPECT_EQ(backward[0].k, 10);
    EXPECT_EQ(backward[1].m, 10);
    EXPECT_EQ(backward[1].n, 14400);
    EXPECT_EQ(backward[1].k, 8);
  }
  EXPECT_TRUE(GemmsOf(g, g.op(*g.FindOp("relu"))).empty());
}

TEST(GpuKindsTest, AchievedFractionsAreFractionsAndTheNamesRoundTrip) {
  for (Precision precision :
       {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp16}) {
    const AchievedEfficiency a = AchievedEfficiencyAt(precision);
    EXPECT_GT(a.matmul_fraction, 0.5) << ToString(precision);
    EXPECT_LE(a.matmul_fraction, 1) << ToString(precision);
    EXPECT_GT(a.bandwidth_fraction, 0.5);
    EXPECT_LE(a.bandwidth_fraction, 1);
  }
  EXPECT_EQ(AchievedEfficiencyAt(Precision::kFp16), AchievedEfficiencyAt(Precision::kBf16));
  EXPECT_EQ(GpuEfficiencyNames(), (std::vector<std::string_view>{"peak", "achieved"}));
  EXPECT_EQ(ToString(GpuEfficiency::kAchieved), "achieved");
  // The spec's check refuses a fraction above 1.
  DeviceSpec spec = GpuDeviceSpec(GpuKindNamed("h200"), Precision::kBf16, GpuEfficiency::kAchieved);
  spec.achieved->matmul_fraction = 1.5;
  RooflineCostModel model;
  EXPECT_THAT([&] { model.SetDeviceSpec("cuda:0", spec); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("in (0, 1]")));
}

TEST(GpuKindsTest, MatmulsConvolutionsAndTheirBackwardOpsRunOnTensorCores) {
  Graph g;
  ModelBuilder b(g);
  TensorId x = b.Input("x", {2, 1, 8, 8});
  TensorId labels = b.Input("labels", {2}, graph::DType::kInt64, graph::TensorKind::kLabel);
  TensorId conv = b.Relu("relu", b.Conv2d("conv", x, 2, 3, 0.1));
  TensorId flat = b.Reshape("flat", conv, {2, 2 * 6 * 6});
  b.SoftmaxCrossEntropy("loss", b.Linear("fc", flat, 3, 0.1), labels);
  graph::AppendBackwardAndUpdate(g, 0.1);
  for (const graph::Op& op : g.ops()) {
    const graph::Op& forward = op.forward_op == graph::kNoOp ? op : g.op(op.forward_op);
    const bool matmul_class =
        op.phase != graph::Phase::kUpdate && (forward.name == "conv" || forward.name == "fc");
    EXPECT_EQ(RunsOnTensorCores(g, op), matmul_class) << op.name;
  }
}

// Automatic mixed precision stores what autocast keeps in 16 bits at half its fp32 bytes: a
// Linear's output and a ReLU of it, not a LayerNorm's (autocast runs it in fp32), the loss, the
// input, a weight or a weight's gradient; a value's gradient as the value. Simulated on two GPUs
// under bf16, the copies between them (the ReLU's output forward, its gradient backward) move
// half the bytes they move under fp32, and each GPU's peak memory is lower.
TEST(GpuKindsTest, UnderAutocastTheSixteenBitValuesTakeAndMoveHalfTheirBytes) {
  Graph g;
  ModelBuilder b(g);
  const TensorId x = b.Input("x", {8, 64});
  const TensorId labels = b.Input("labels", {8}, graph::DType::kInt64, graph::TensorKind::kLabel);
  const TensorId fc1 = b.Linear("fc1", x, 64, 0.1);
  const TensorId relu = b.Relu("relu", fc1);
  const TensorId norm = b.LayerNorm("norm", relu, 1e-5);
  const TensorId fc2 = b.Linear("fc2", norm, 10, 0.1);
  // A forward sum of two 16-bit values (a tensor-parallel all-reduce's hop) stays 16-bit.
  const TensorId sum = b.Apply("sum", graph::op_types::kAddN, {fc2, fc2});
  const TensorId loss = b.SoftmaxCrossEntropy("loss", sum, labels);
  graph::AppendBackwardAndUpdate(g, 0.1);
  const std::vector<bool> half = graph::AutocastHalfWidth(g);
  auto is_half = [&](TensorId t) { return static_cast<bool>(half[static_cast<size_t>(t)]); };
  EXPECT_TRUE(is_half(fc1));
  EXPECT_TRUE(is_half(relu));
  EXPECT_TRUE(is_half(fc2));
  EXPECT_TRUE(is_half(sum));
  for (TensorId t : {x, norm, loss}) EXPECT_FALSE(is_half(t)) << g.tensor(t).name;
  EXPECT_TRUE(is_half(g.TensorByName(g.tensor(relu).name + ".grad@norm")));
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const std::string& name = g.tensor(t).name;
    if (name.starts_with("fc1.weight") || name.starts_with("fc2.weight")) {
      EXPECT_FALSE(is_half(t)) << name;  // the master weight and its gradients stay fp32
    }
  }

  const graph::DeviceSet gpus = {Cuda(0), Cuda(1)};
  graph::Placement placement = graph::Placement::AllOn(g, {"cuda:0", "cuda:1"}, 0);
  for (const char* op : {"norm", "fc2", "sum", "loss"}) {
    placement.device_of_op[static_cast<size_t>(*g.FindOp(op))] = 1;
  }
  auto simulate = [&](Precision precision) {
    const RooflineCostModel costs =
        RooflineForGpuKinds({}, {.default_kind = "h100-sxm", .precision = precision});
    const SimulationResult r = Simulator(g, gpus, costs).Simulate(placement);
    EXPECT_TRUE(r.valid) << r.invalid_reason;
    return r;
  };
  const SimulationResult fp32 = simulate(Precision::kFp32), bf16 = simulate(Precision::kBf16);
  auto bytes = [](const SimulationResult& r, int from, int to) {
    for (const ChannelStats& c : r.transfers) {
      if (c.from == from && c.to == to) return c.bytes;
    }
    return int64_t{-1};
  };
  EXPECT_EQ(bytes(fp32, 0, 1), 8 * 64 * 4);
  EXPECT_EQ(bytes(bf16, 0, 1), 8 * 64 * 2);
  EXPECT_EQ(bytes(fp32, 1, 0), 8 * 64 * 4);
  EXPECT_EQ(bytes(bf16, 1, 0), 8 * 64 * 2);
  for (size_t d = 0; d < 2; ++d) {
    EXPECT_LT(bf16.peak_memory_bytes[d], fp32.peak_memory_bytes[d]) << "cuda:" << d;
  }
}

TEST(GpuKindsTest, EachGpuTakesItsOwnKindAndNvlinkRunsAtTheSlowerEnd) {
  const RooflineCostModel model = RooflineForGpuKinds(
      {}, {.default_kind = "h100-sxm",
           .device_kinds = {{"cuda:0", "h100-sxm"}, {"cuda:1", "a100-80gb-sxm"}},
           .precision = Precision::kTf32,
           .nvlink = true});
  const Device gpu0 = Cuda(0), gpu1 = Cuda(1), gpu2 = Cuda(2);
  EXPECT_DOUBLE_EQ(model.SpecOf(gpu0).matmul_flops, 494.5e12);
  EXPECT_DOUBLE_EQ(model.SpecOf(gpu1).matmul_flops, 156e12);
  EXPECT_DOUBLE_EQ(model.SpecOf(gpu1).memory_bandwidth, 2039e9);
  EXPECT_DOUBLE_EQ(model.SpecOf(gpu2).matmul_flops, 494.5e12);  // the default kind
  EXPECT_DOUBLE_EQ(model.LinkOf(&gpu0, gpu1).seconds_per_byte, 1 / 300e9);
  EXPECT_DOUBLE_EQ(model.LinkOf(&gpu1, gpu0).seconds_per_byte, 1 / 300e9);
  EXPECT_DOUBLE_EQ(model.LinkOf(&gpu2, gpu0).seconds_per_byte, 1 / 450e9);
  // Between hosts the network stays, whatever the kinds.
  RooflineOptions two_hosts;
  two_hosts.gpus_per_host = 1;
  const RooflineCostModel apart = RooflineForGpuKinds(
      two_hosts, {.device_kinds = {{"cuda:0", "h200"}, {"cuda:1", "h200"}}, .nvlink = true});
  EXPECT_EQ(apart.LinkOf(&gpu0, gpu1), two_hosts.between_hosts);
  EXPECT_THROW(RooflineForGpuKinds({}, {.device_kinds = {{"cpu:0", "h200"}}}),
               std::invalid_argument);
  EXPECT_THROW(RooflineForGpuKinds({}, {.device_kinds = {{"cuda:0", "v100"}}}),
               std::invalid_argument);
  EXPECT_THROW(RooflineForGpuKinds({}, {.default_kind = "l40s", .nvlink = true}),
               std::invalid_argument);
}

}  // namespace
}  // namespace placer::sim
