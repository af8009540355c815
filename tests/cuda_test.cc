// The CUDA paths of the executor, the measured evaluator and the profiler on a real GPU: under
// every placement over {cpu:0, cuda:0} the training step computes what it computes on one device,
// out of memory (configured or real) is an invalid placement naming cuda:0, and profiles time the
// GPU. Without a GPU (or in a build without PLACER_WITH_CUDA) every test is skipped, loudly.
// scripts/gpu_check.sh runs this suite on the device machine.
//
// Tolerances: the GPU runs the same float32 arithmetic as the CPU in another order (cuDNN and
// cuBLAS reduce differently from oneDNN/MKL), so results agree to float32 rounding, not bit for
// bit. The fixture turns TF32 off for cuDNN convolutions (PyTorch allows it there by default,
// which alone would cost ~1e-3 relative) and asks cuDNN for deterministic algorithms (its
// non-deterministic weight-gradient kernels add atomics-order noise). What remains is a few ulps
// per op, amplified over three SGD steps: relative 1e-4 (ExpectSameParameters' fixed rtol) and
// absolute 1e-5 on parameters of magnitude ~1e-2 leave an order of magnitude of headroom while
// still catching any real error (a stale copy, a missed event, a wrong stream: those are O(1e-2)).
#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdint>
#include <iostream>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#ifdef PLACER_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

#include "graph/models.h"
#include "graph/ops.h"
#include "graph/placement.h"
#include "graph/training_step.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/measured_evaluator.h"
#include "runtime/profiler.h"
#include "tests/support.h"
#include "tests/torch_support.h"

namespace placer::runtime {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr double kParameterAtol = 1e-5;  // with ExpectSameParameters' rtol 1e-4: see the top
constexpr double kLossRtol = 1e-4;
constexpr int64_t kGiB = int64_t{1} << 30;

// Why the CUDA tests cannot run in this process, or "" when they can.
std::string NoCudaReason() {
  if (!torch::cuda::is_available()) {
    return "torch::cuda::is_available() is false (no GPU or no driver)";
  }
  if (NumCudaDevicesPresent() == 0) {
    return "LibTorch sees a GPU but placer was built without PLACER_WITH_CUDA";
  }
  return "";
}

// Prints one banner before any test when the whole suite is going to skip.
class NoCudaBanner : public ::testing::Environment {
 public:
  void SetUp() override {
    const std::string reason = NoCudaReason();
    if (reason.empty()) {
      std::cerr << "cuda_test: running on " << NumCudaDevicesPresent() << " CUDA device(s)\n";
    } else {
      std::cerr << "\n*** no CUDA device: every cuda_test test is SKIPPED (" << reason
                << "); run scripts/gpu_check.sh on a GPU machine ***\n\n";
    }
  }
};
[[maybe_unused]] ::testing::Environment* const kBanner =
    ::testing::AddGlobalTestEnvironment(new NoCudaBanner);

// Every test needs cuda:0; the fixture skips without it and pins the numerics the comparisons
// rely on (see the top of the file).
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = NoCudaReason();
    if (!reason.empty()) {
      GTEST_SKIP() << "no CUDA device: "
                   << ::testing::UnitTest::GetInstance()->current_test_info()->name()
                   << " skipped (" << reason << ")";
    }
    at::globalContext().setAllowTF32CuDNN(false);
    at::globalContext().setAllowTF32CuBLAS(false);
    at::globalContext().setDeterministicCuDNN(true);
    at::globalContext().setBenchmarkCuDNN(false);
  }
};
using CudaExecutorTest = CudaTest;
using CudaMeasuredEvaluatorTest = CudaTest;
using CudaProfilerTest = CudaTest;

// cpu:0 (a worker of `cpu_threads` threads) and cuda:0; capacities 0 = unlimited.
graph::DeviceSet CpuAndCuda(int cpu_threads = 1, int64_t cuda_capacity = 0) {
  return {{"cpu:0", graph::DeviceType::kCpu, 0, cpu_threads, 0},
          {"cuda:0", graph::DeviceType::kCuda, 0, 1, cuda_capacity}};
}

graph::Placement RandomPlacement(const graph::Graph& g, const graph::DeviceSet& devices,
                                 std::mt19937& rng) {
  graph::Placement placement = graph::Placement::AllOn(g, graph::DeviceNames(devices), 0);
  std::uniform_int_distribution<int> pick(0, static_cast<int>(devices.size()) - 1);
  for (graph::OpId id : g.OpsInPhase(graph::Phase::kForward)) {
    placement.device_of_op[static_cast<size_t>(id)] = pick(rng);
  }
  return placement;
}

void ExpectSameParameters(const TensorMap& actual, const TensorMap& expected,
                          const std::string& context) {
  test_support::ExpectSameParameters(actual, expected, context, kParameterAtol);
}

void ExpectSameLoss(double actual, double expected, const std::string& context) {
  EXPECT_NEAR(actual, expected, kLossRtol * std::abs(expected) + kParameterAtol) << context;
}

const graph::TransferStats* FindTransfer(const StepResult& r, const std::string& from,
                                         const std::string& to) {
  for (const graph::TransferStats& t : r.transfers) {
    if (t.from == from && t.to == to) return &t;
  }
  return nullptr;
}

TensorMap Pinned(const TensorMap& batch) {
  TensorMap pinned;
  for (const auto& [name, value] : batch) pinned.emplace(name, value.pin_memory());
  return pinned;
}

// The caching allocator's view of cuda:0 and the driver's free memory (0 without CUDA code).
void EmptyCudaCache() {
#ifdef PLACER_WITH_CUDA
  c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}
int64_t FreeCudaBytes() {
#ifdef PLACER_WITH_CUDA
  EmptyCudaCache();
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) == cudaSuccess) return static_cast<int64_t>(free);
#endif
  return 0;
}
int64_t AllocatedCudaBytes() {
#ifdef PLACER_WITH_CUDA
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0)
      .allocated_bytes[static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE)]
      .current;
#else
  return 0;
#endif
}
int64_t CudaOutOfMemoryCount() {
#ifdef PLACER_WITH_CUDA
  return c10::cuda::CUDACachingAllocator::getDeviceStats(0).num_ooms;
#else
  return 0;
#endif
}

// (a) The same three LeNet steps all on cuda:0 and all on cpu:0.
TEST_F(CudaExecutorTest, LeNetThreeStepsAllOnCuda0MatchAllOnCpu0) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 64});
  const TensorMap initial = InitializeParameters(g, 7);
  const TensorMap batch = SyntheticBatch(g, 8);
  const graph::DeviceSet devices = CpuAndCuda();
  Executor on_cpu(g, devices, graph::Placement::AllOn(g, graph::DeviceNames(devices), 0), initial);
  Executor on_gpu(g, devices, graph::Placement::AllOn(g, graph::DeviceNames(devices), 1), initial);
  for (int step = 0; step < 3; ++step) {
    const StepResult cpu = on_cpu.RunStep(batch);
    const StepResult gpu = on_gpu.RunStep(batch);
    ExpectSameLoss(gpu.loss, cpu.loss, "loss of step " + std::to_string(step));
    EXPECT_GT(gpu.loss, 0.0);
    // The GPU really ran the step: the minibatch went to it and cpu:0 stayed idle.
    const graph::TransferStats* upload = FindTransfer(gpu, "host", "cuda:0");
    ASSERT_NE(upload, nullptr);
    EXPECT_EQ(upload->bytes, g.tensor(g.TensorByName("images")).bytes() +
                                 g.tensor(g.TensorByName("labels")).bytes());
    ASSERT_EQ(gpu.devices.size(), 2u);
    EXPECT_EQ(gpu.devices[0].busy_seconds, 0.0);
    EXPECT_GT(gpu.devices[1].busy_seconds, 0.0);
    EXPECT_GT(gpu.devices[1].peak_memory_bytes, 0);
  }
  ExpectSameParameters(on_gpu.Parameters(), on_cpu.Parameters(), "all on cuda:0 vs all on cpu:0");
}

// (b) Random placements over {cpu:0, cuda:0}: two steps give what two steps on cpu:0 alone give.
// Half of them read a pinned minibatch (as MeasuredEvaluator's), half a pageable one.
void CheckRandomPlacementsMatchOneDevice(const graph::Graph& g, int trials, uint32_t seed) {
  const TensorMap initial = InitializeParameters(g, seed);
  const TensorMap batch = SyntheticBatch(g, seed + 1);
  const TensorMap pinned = Pinned(batch);
  Executor one_device(g, test_support::CpuWorkers(1), graph::Placement::AllOn(g, {"cpu:0"}, 0),
                      initial);
  double reference_loss = 0;
  for (int step = 0; step < 2; ++step) reference_loss = one_device.RunStep(batch).loss;
  const TensorMap reference = one_device.Parameters();

  const graph::DeviceSet devices = CpuAndCuda();
  std::mt19937 rng(seed);
  int crossing_both_ways = 0;
  for (int trial = 0; trial < trials; ++trial) {
    const graph::Placement placement = RandomPlacement(g, devices, rng);
    const std::string context = "placement " + std::to_string(trial);
    Executor executor(g, devices, placement, initial);
    StepResult last;
    for (int step = 0; step < 2; ++step) {
      last = executor.RunStep(trial % 2 == 0 ? batch : pinned);
    }
    ExpectSameLoss(last.loss, reference_loss, context);
    ExpectSameParameters(executor.Parameters(), reference, context);
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << context << ":\n" << graph::PlacementToYaml(g, placement);
      return;
    }
    if (FindTransfer(last, "cpu:0", "cuda:0") && FindTransfer(last, "cuda:0", "cpu:0")) {
      ++crossing_both_ways;
    }
  }
  // Random placements of these graphs nearly always cut them both ways; else the test is vacuous.
  EXPECT_GE(crossing_both_ways, trials / 2);
}

TEST_F(CudaExecutorTest, TwentyFiveRandomLeNetPlacementsOverCpuAndCudaMatchOneDevice) {
  CheckRandomPlacementsMatchOneDevice(graph::BuildLeNet({.batch_size = 16, .image_size = 28}), 25,
                                      31);
}

TEST_F(CudaExecutorTest, TwentyFiveRandomBranchingPlacementsOverCpuAndCudaMatchOneDevice) {
  CheckRandomPlacementsMatchOneDevice(graph::BuildParallelMlp({.batch_size = 8,
                                                               .in_features = 12,
                                                               .width = 16,
                                                               .depth = 2,
                                                               .branches = 3,
                                                               .classes = 5}),
                                      25, 41);
}

TEST_F(CudaExecutorTest, CopiesBetweenCpuAndCudaAreCountedAndTraced) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 16});
  const graph::DeviceSet devices = CpuAndCuda();
  graph::Placement placement = graph::Placement::AllOn(g, graph::DeviceNames(devices), 0);
  placement.device_of_op[static_cast<size_t>(*g.FindOp("fc1"))] = 1;
  Executor executor(g, devices, placement, InitializeParameters(g, 0), {.record_trace = true});
  const StepResult r = executor.RunStep(SyntheticBatch(g, 0));
  // As runtime_test's CPU version: flatten's output and relu3's gradient go to fc1 on cuda:0;
  // fc1's output and flatten's gradient come back.
  const graph::TransferStats* to_gpu = FindTransfer(r, "cpu:0", "cuda:0");
  const graph::TransferStats* to_cpu = FindTransfer(r, "cuda:0", "cpu:0");
  ASSERT_TRUE(to_gpu && to_cpu);
  EXPECT_EQ(to_gpu->bytes, 16 * 800 * 4 + 16 * 128 * 4);
  EXPECT_EQ(to_cpu->bytes, 16 * 128 * 4 + 16 * 800 * 4);
  EXPECT_EQ(FindTransfer(r, "host", "cuda:0"), nullptr);  // no minibatch tensor is read there
  EXPECT_GE(r.devices[1].peak_memory_bytes, (800 * 128 + 128) * 4);
  std::set<std::string> lanes;
  for (const graph::TraceEvent& e : r.trace) lanes.insert(e.lane);
  EXPECT_TRUE(lanes.count("cpu:0") && lanes.count("cuda:0") && lanes.count("cpu:0->cuda:0") &&
              lanes.count("cuda:0->cpu:0"));
}

// (c) placer's own accounting: a placement over cuda:0's configured capacity is invalid.
TEST_F(CudaMeasuredEvaluatorTest, OverTheConfiguredCapacityOfCuda0IsInvalidNamingDeviceAndBytes) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 16});
  const graph::DeviceSet devices =
      CpuAndCuda(1, /*cuda_capacity=*/100 * 1024);  // fc1.weight: 400 KiB
  const std::vector<std::string> names = graph::DeviceNames(devices);
  MeasuredEvaluator evaluator(g, devices, {.warmup_steps = 1, .timed_steps = 1});

  graph::Placement too_big = graph::Placement::AllOn(g, names, 0);
  too_big.device_of_op[static_cast<size_t>(*g.FindOp("fc1"))] = 1;
  const graph::EvaluationResult r = evaluator.Evaluate(too_big);
  EXPECT_FALSE(r.valid);
  EXPECT_THAT(r.invalid_reason, AllOf(HasSubstr("out of memory on cuda:0"), HasSubstr("bytes"),
                                      HasSubstr("capacity is 102400 bytes")));

  // The same evaluator goes on: a placement that fits on cuda:0, and one without it.
  graph::Placement fits = graph::Placement::AllOn(g, names, 0);
  fits.device_of_op[static_cast<size_t>(*g.FindOp("relu3"))] = 1;
  fits.device_of_op[static_cast<size_t>(*g.FindOp("fc2"))] = 1;
  const graph::EvaluationResult ok = evaluator.Evaluate(fits);
  EXPECT_TRUE(ok.valid) << ok.invalid_reason;
  EXPECT_TRUE(evaluator.Evaluate(graph::Placement::AllOn(g, names, 0)).valid);
}

// (c) A real CUDA out-of-memory error: branches of [2^20 x W] Linear outputs (W ~ 1900: under 2^31
// elements and 7.5 GiB each, sizes every kernel handles), all alive until they are summed, 25%
// more than the GPU's free memory in all; the host side stays a few MB. Plain cudaMalloc through
// LibTorch's caching allocator, no managed memory. Sized from the free memory the driver reports.
// The step fails after more than a hundred GiB are allocated, with autograd state saved for every
// branch: all of it must be released.
TEST_F(CudaMeasuredEvaluatorTest, ARealCudaOutOfMemoryIsInvalidNamingCuda0AndNothingLeaks) {
  const int64_t free = FreeCudaBytes();
  ASSERT_GT(free, 0);
  const int64_t rows = int64_t{1} << 20;
  const int64_t branch_bytes = std::min(free / 8, 15 * kGiB / 2);
  const int64_t width = branch_bytes / (rows * 4);
  const int64_t branches = (free + free / 4) / (rows * width * 4) + 1;
  graph::Graph g;
  graph::ModelBuilder b(g);
  const graph::TensorId x = b.Input("x", {rows, 1});
  std::vector<graph::TensorId> outputs;
  for (int64_t i = 0; i < branches; ++i) {  // ops run in creation order: every branch, then sums
    outputs.push_back(b.Linear("branch" + std::to_string(i), x, width, 0.01));
  }
  graph::TensorId sum = outputs[0];
  for (int64_t i = 1; i < branches; ++i) {
    sum = b.Apply("sum" + std::to_string(i), graph::op_types::kAdd,
                  {sum, outputs[static_cast<size_t>(i)]});
  }
  b.SoftmaxCrossEntropy("loss", b.Linear("head", sum, 2, 0.01),
                        b.Input("labels", {rows}, graph::DType::kInt64, graph::TensorKind::kLabel));
  graph::AppendBackwardAndUpdate(g, 0.1);
  std::cerr << "cuda:0 has " << free / kGiB << " GiB free; " << branches << " branches of "
            << rows * width * 4 / (kGiB / 10) / 10.0 << " GiB\n";

  const graph::DeviceSet devices = CpuAndCuda();  // capacity 0: only the GPU's real memory limits
  const std::vector<std::string> names = graph::DeviceNames(devices);
  const int64_t allocated_before = AllocatedCudaBytes();
  const int64_t ooms_before = CudaOutOfMemoryCount();
  {
    MeasuredEvaluator evaluator(g, devices, {.warmup_steps = 1, .timed_steps = 1});
    const graph::EvaluationResult r = evaluator.Evaluate(graph::Placement::AllOn(g, names, 1));
    EXPECT_FALSE(r.valid);
    EXPECT_THAT(r.invalid_reason, HasSubstr("out of memory on cuda:0"));
    std::cerr << "invalid_reason: " << r.invalid_reason.substr(0, 300) << "\n";
  }
  EXPECT_GT(CudaOutOfMemoryCount(), ooms_before) << "not a real CUDA out-of-memory error";
  // Everything the failed step allocated is back (cuBLAS keeps a workspace: some slack).
  EXPECT_LE(AllocatedCudaBytes(), allocated_before + kGiB);
  EXPECT_GT(FreeCudaBytes(), free - 2 * kGiB);

  // A normal placement evaluates validly afterwards, on cuda:0 alone and split with cpu:0.
  graph::Graph lenet = graph::BuildLeNet({.batch_size = 64});
  MeasuredEvaluator evaluator(lenet, devices, {.warmup_steps = 1, .timed_steps = 2});
  const graph::EvaluationResult on_gpu =
      evaluator.Evaluate(graph::Placement::AllOn(lenet, names, 1));
  ASSERT_TRUE(on_gpu.valid) << on_gpu.invalid_reason;
  EXPECT_GT(on_gpu.final_loss, 0.0);
  EXPECT_GT(on_gpu.step_seconds, 0.0);
  graph::Placement split = graph::Placement::AllOn(lenet, names, 0);
  split.device_of_op[static_cast<size_t>(*lenet.FindOp("fc1"))] = 1;
  const graph::EvaluationResult mixed = evaluator.Evaluate(split);
  ASSERT_TRUE(mixed.valid) << mixed.invalid_reason;
}

// A real out-of-memory error in a copy to the GPU: the copy runs on the sending worker's thread
// (cpu:0 here), but it is cuda:0 that is out of memory, and the reason must say so. A blocker
// takes all but 1 GiB of cuda:0; the op on cpu:0 makes a 2 GiB tensor that cuda:0 consumes.
TEST_F(CudaExecutorTest, ARealOutOfMemoryInACopyToTheGpuNamesTheGpu) {
  graph::Graph g;
  graph::ModelBuilder b(g);
  const int64_t rows = int64_t{1} << 16;
  const int64_t width = 2 * kGiB / (rows * 4);
  const graph::TensorId wide = b.Linear("wide", b.Input("x", {rows, 1}), width, 0.01);
  b.SoftmaxCrossEntropy("loss", b.Linear("head", wide, 2, 0.01),
                        b.Input("labels", {rows}, graph::DType::kInt64, graph::TensorKind::kLabel));
  const graph::DeviceSet devices = CpuAndCuda(/*cpu_threads=*/4);
  graph::Placement placement = graph::Placement::AllOn(g, graph::DeviceNames(devices), 1);
  placement.device_of_op[static_cast<size_t>(*g.FindOp("wide"))] = 0;
  Executor executor(g, devices, placement, InitializeParameters(g, 0), {.forward_only = true});
  const TensorMap batch = SyntheticBatch(g, 1);
  {
    const int64_t free = FreeCudaBytes();
    ASSERT_GT(free, 2 * kGiB);
    const at::Tensor blocker =
        at::empty({free - kGiB}, at::TensorOptions(at::kByte).device(at::kCUDA, 0));
    try {
      executor.RunStep(batch);
      ADD_FAILURE() << "expected an out-of-memory failure with " << FreeCudaBytes() / (1 << 20)
                    << " MiB free on cuda:0";
    } catch (const StepFailure& failure) {
      EXPECT_THAT(failure.what(), AllOf(HasSubstr("out of memory on cuda:0"),
                                        Not(HasSubstr("out of memory on cpu:0"))));
    }
  }
  // With the memory back, the same executor runs the step.
  EmptyCudaCache();
  const StepResult r = executor.RunStep(batch);
  EXPECT_GT(r.loss, 0.0);
}

// (d) Profiles of cuda:0: every op timed there, and the links from host memory and cpu:0 fitted.
TEST_F(CudaProfilerTest, ProfileDevicesTimesEveryOpOnCuda0AndFitsItsLinks) {
  graph::Graph g = graph::BuildLeNet({.batch_size = 64});
  const graph::DeviceSet devices = CpuAndCuda(/*cpu_threads=*/2);
  const sim::ProfiledCostModel profile =
      ProfileDevices(g, devices, {.warmup_steps = 2, .timed_steps = 5, .model_name = "lenet"});
  double gpu_op_seconds = 0;
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    const std::string& op = g.op(id).name;
    const std::optional<double> gpu = profile.FindOpSeconds(op, "cuda:0");
    const std::optional<double> cpu = profile.FindOpSeconds(op, "cpu:0");
    ASSERT_TRUE(gpu.has_value()) << op;
    ASSERT_TRUE(cpu.has_value()) << op;
    EXPECT_GT(*gpu, 0.0) << op;
    EXPECT_GT(*cpu, 0.0) << op;
    gpu_op_seconds += *gpu;
  }
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {"host", "cuda:0"}, {"cpu:0", "cuda:0"}, {"cuda:0", "cpu:0"}}) {
    const std::optional<sim::LinkSpec> link = profile.FindLink(from, to);
    ASSERT_TRUE(link.has_value()) << from << "->" << to;
    const double seconds_16mib = link->Seconds(16 << 20);
    EXPECT_GT(seconds_16mib, 0.0) << from << "->" << to;
    EXPECT_LT(seconds_16mib, 0.1) << from << "->" << to << ": under 160 MB/s";
    std::cerr << from << "->" << to << ": " << link->latency_seconds * 1e6 << " us + "
              << (link->seconds_per_byte > 0 ? 1e-9 / link->seconds_per_byte : 0.0)
              << " GB/s; 16 MiB in " << seconds_16mib * 1e3 << " ms\n";
  }
  ASSERT_EQ(profile.metadata().devices.size(), 2u);
  EXPECT_EQ(profile.metadata().devices[1].name, "cuda:0");
  EXPECT_THAT(profile.metadata().devices[1].type, Not(StartsWith("cpu")));

  // For the record (no assertion): ops on a GPU are timed on the host around their launch, so
  // their sum can fall far below the step's time; the step's wall time is the GPU's real one.
  MeasuredEvaluator evaluator(g, devices, {.warmup_steps = 2, .timed_steps = 5});
  const graph::EvaluationResult step =
      evaluator.Evaluate(graph::Placement::AllOn(g, graph::DeviceNames(devices), 1));
  ASSERT_TRUE(step.valid) << step.invalid_reason;
  std::cerr << profile.metadata().devices[1].type << ": profiled ops sum to "
            << gpu_op_seconds * 1e3 << " ms, the measured step takes " << step.step_seconds * 1e3
            << " ms\n";
}

}  // namespace
}  // namespace placer::runtime
