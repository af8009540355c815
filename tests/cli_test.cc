// The real `placer` binary: subcommands, exit codes and messages a user sees.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "tests/support.h"
#include "tests/temp_dir.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using Result = placer::test_support::CommandResult;
using placer::test_support::RunPlacer;

std::string DefaultConfig() { return std::string(PLACER_SOURCE_DIR) + "/configs/lenet.yaml"; }

// This suite's files: a directory of its own, removed when the suite exits.
const placer::test_support::TempDir& SuiteDir() {
  static const placer::test_support::TempDir dir("placer_cli_test");
  return dir;
}

std::string WriteTemp(const std::string& name, const std::string& text) {
  return SuiteDir().Write(name, text).string();
}

TEST(CliTest, HelpListsTheSubcommands) {
  Result r = RunPlacer("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.output, AllOf(HasSubstr("inspect"), HasSubstr("validate")));
}

TEST(CliTest, InspectPrintsTheLeNetTable) {
  std::string path = WriteTemp("lenet.yaml", "model:\n  builtin: lenet\n");
  Result r = RunPlacer("inspect --config " + path);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("[256x20x26x26]"));
  EXPECT_THAT(r.output, HasSubstr("parameters: 129068 in 8 tensors"));
  EXPECT_THAT(r.output, HasSubstr("conv2.backward"));
  EXPECT_THAT(r.output, HasSubstr("fc1.weight.update"));
}

TEST(CliTest, InspectShowsTheReplicasOfAReplicatedModel) {
  Result r = RunPlacer("inspect --config " +
                       WriteTemp("replicated.yaml", "model:\n  builtin: lenet\n  replicas: 2\n"));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  // Two replicas on shards of 128: each replica's update reads both replicas' gradients.
  EXPECT_THAT(r.output, HasSubstr("[128x20x26x26]"));
  EXPECT_THAT(r.output, HasSubstr("parameters: 258136 in 16 tensors"));
  EXPECT_THAT(r.output, HasSubstr("r1/conv2.backward"));
}

TEST(CliTest, SimulatedSearchWritesItsOutputsAndRefusesToOverwriteThem) {
  auto dir = SuiteDir() / "search";
  std::string path =
      WriteTemp("search.yaml",
                "model:\n  builtin: lenet\ndevices: [cpu:0, cpu:1]\n"
                "search:\n  evaluator: simulated\n  policy_steps: 6\n  samples_per_step: 16\n"
                "  refinement_rounds: 20\n  checkpoint_every: 2\n"
                "output:\n  directory: " +
                    dir.string() + "\n");
  Result r = RunPlacer("search --config " + path);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("learned: "), HasSubstr("data parallel (128/128)")));
  // The closing side-by-side of a simulator: one round, ratios without intervals, and the answer
  // against data parallelism in words.
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\nanswer: [^\n]*1 round\\)"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "\nanswer vs data parallelism: [0-9.]+: (faster|tied|slower)\n"));
  // The run's own footprint, for a user planning a large model: LeNet's search stays well under
  // a gigabyte (and a resident process holds at least a megabyte).
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\npeak memory: [0-9]+ MB resident"));
  for (const char* file : {"best_placement.yaml", "best_placement.pb", "best_placement.pbtxt",
                           "search.csv", "summary.md", "checkpoint.pt"}) {
    EXPECT_TRUE(std::filesystem::exists(dir / file)) << file;
  }
  // The exported placement evaluates through the real runtime.
  Result evaluated = RunPlacer("evaluate --config " + path + " --placement " +
                               (dir / "best_placement.yaml").string());
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_THAT(evaluated.output, HasSubstr("step time"));
  // A second fresh search into the same directory is refused (exit 2) instead of overwriting.
  EXPECT_EQ(RunPlacer("search --config " + path).exit_code, 2);
}

TEST(CliTest, ValidateAcceptsTheDefaultConfig) {
  Result r = RunPlacer("validate --config " + DefaultConfig());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("valid"));
}

TEST(CliTest, BadConfigExitsWithTwoAndNamesFileKeyAndLine) {
  std::string path = WriteTemp("bad.yaml", "model:\n  builtin: lenet\n  batch_sise: 4\n");
  Result r = RunPlacer("validate --config " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr(path + ":3"), HasSubstr("model.batch_sise")));
}

TEST(CliTest, InconsistentModelSizesExitWithTwo) {
  std::string path =
      WriteTemp("tiny.yaml", "model:\n  builtin: lenet\n  lenet:\n    image_size: 15\n");
  Result r = RunPlacer("validate --config " + path);
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("image_size"));
}

TEST(CliTest, MissingConfigFileExitsWithTwo) {
  Result r = RunPlacer("inspect --config /nonexistent/placer.yaml");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/placer.yaml"));
}

TEST(CliTest, UnknownSubcommandIsAUsageError) {
  Result r = RunPlacer("frobnicate");
  EXPECT_NE(r.exit_code, 0);
}

TEST(CliTest, CompareEvaluatesEveryMethodAndWritesTheReports) {
  auto dir = SuiteDir() / "compare";
  // Simulated GPUs the machine does not have, and the shipped expert placement.
  std::string config = WriteTemp("compare.yaml",
                                 "model:\n  builtin: lenet\n"
                                 "devices: [cuda:0, cuda:1, cpu:0]\n"
                                 "search:\n  evaluator: simulated\n"
                                 "  policy_steps: 5\noutput:\n  directory: " +
                                     dir.string() + "\n");
  std::filesystem::create_directories(std::filesystem::path(config).parent_path() / "experts");
  std::filesystem::copy_file(std::string(PLACER_SOURCE_DIR) + "/configs/experts/lenet.yaml",
                             std::filesystem::path(config).parent_path() / "experts/lenet.yaml",
                             std::filesystem::copy_options::overwrite_existing);
  Result r = RunPlacer("compare --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\npeak memory: [0-9]+ MB resident"));
  for (const char* method :
       {"single device cuda:0", "data parallel", "expert (lenet.yaml)", "m-TOPO", "m-ETF", "m-SCT",
        "HEFT", "CPOP", "METIS", "Scotch", "learned (", "random search (", "lower bound"}) {
    EXPECT_THAT(r.output, HasSubstr(method));
  }
  // What the learning adds is visible: the policy before the run (its greedy answer, judged once),
  // the policy alone, refinement alone and the learned search, each with its evaluations.
  EXPECT_THAT(r.output,
              ::testing::ContainsRegex("\npolicy zero-shot [^\n]* 1 +[0-9.]+ / [^\n]*MiB\n"));
  EXPECT_THAT(r.output,
              ::testing::ContainsRegex("\nrefinement alone [^\n]* [0-9]+ +[0-9.]+ / [^\n]*MiB\n"));
  EXPECT_THAT(r.output, HasSubstr("\npolicy alone "));
  std::ifstream html(dir / "report.html");
  std::string text((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, AllOf(HasSubstr("<svg"), HasSubstr("lower bound"), HasSubstr("m-SCT")));
  EXPECT_TRUE(std::filesystem::exists(dir / "report.md"));
}

// `placer pretrain` writes a scorer that `compare` uses for its learned edits, beside
// refinement alone with uniform edits, so that what the learning adds is a row of the table.
TEST(CliTest, PretrainWritesTheScorerThatCompareRefinesWith) {
  auto pretrained = SuiteDir() / "pretrain";
  Result trained = RunPlacer("pretrain --output " + pretrained.string() +
                             " --iterations 1 --problems 3 --rounds 2");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  EXPECT_THAT(trained.output, HasSubstr("iteration 1: "));
  ASSERT_TRUE(std::filesystem::exists(pretrained / "edit_model.pt")) << trained.output;
  auto dir = SuiteDir() / "compare_learned_edits";
  std::string config = WriteTemp("compare_learned_edits.yaml",
                                 "model:\n  builtin: lenet\n"
                                 "devices: [cuda:0, cuda:1, cuda:2, cuda:3]\n"
                                 "search:\n  evaluator: simulated\n  policy_steps: 3\n"
                                 "  max_wall_seconds: 4\n  edit_proposer: learned\n"
                                 "  edit_model: " +
                                     (pretrained / "edit_model.pt").string() +
                                     "\noutput:\n  directory: " + dir.string() + "\n");
  Result r = RunPlacer("compare --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("refinement alone, learned edits"),
                              HasSubstr("refinement alone"), HasSubstr("policy alone")));
  // The same directory under other options: refused as bad input.
  Result refused = RunPlacer("pretrain --output " + pretrained.string() +
                             " --iterations 2 --problems 4 --rounds 2");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("options differ"));
}

TEST(CliTest, ProfileFeedsTheSimulatorThatEvaluateCompares) {
  auto dir = SuiteDir() / "profile";
  std::filesystem::create_directories(dir);
  std::string profile = (dir / "profile.json").string();
  std::string path =
      WriteTemp("profile.yaml",
                "model:\n  builtin: lenet\n  batch_size: 32\ndevices: [cpu:0, cpu:1]\n"
                "measurement:\n  warmup_steps: 1\n  timed_steps: 2\n"
                "simulation:\n  profile: " +
                    profile + "\n");
  Result r = RunPlacer("profile --config " + path + " --output " + profile);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // 30 ops of the training step, timed on each of the two devices.
  EXPECT_THAT(r.output, HasSubstr("60 op timings"));
  Result evaluated = RunPlacer("evaluate --config " + path + " --simulate");
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_THAT(evaluated.output, AllOf(HasSubstr("simulated (" + profile), HasSubstr("lower bound"),
                                      HasSubstr("simulated / measured")));
  EXPECT_THAT(evaluated.output, Not(HasSubstr("no timing")));
  // The data-parallel step has its own ops, which a profile of the model alone does not time:
  // the roofline stands in, and evaluate says so and how to profile them; profiled, it is quiet.
  Result unprofiled = RunPlacer("evaluate --config " + path + " --simulate --data-parallel");
  EXPECT_EQ(unprofiled.exit_code, 0) << unprofiled.output;
  EXPECT_THAT(unprofiled.output,
              AllOf(HasSubstr(profile + " has no timing for"),
                    HasSubstr("placer profile --config " + path + " --data-parallel")));
  Result replicas = RunPlacer("profile --config " + path + " --data-parallel --output " + profile);
  ASSERT_EQ(replicas.exit_code, 0) << replicas.output;
  Result profiled = RunPlacer("evaluate --config " + path + " --simulate --data-parallel");
  EXPECT_EQ(profiled.exit_code, 0) << profiled.output;
  EXPECT_THAT(profiled.output,
              AllOf(HasSubstr("simulated / measured"), Not(HasSubstr("no timing"))));
  // A broken profile is bad input, named.
  std::ofstream(profile) << "{ not json";
  Result broken = RunPlacer("evaluate --config " + path + " --simulate");
  EXPECT_EQ(broken.exit_code, 2) << broken.output;
  EXPECT_THAT(broken.output, HasSubstr(profile));
}

}  // namespace

namespace {

// Whether the machine has a second GPU (its device node), which would make cuda:1 real.
bool HasSecondGpu() { return std::filesystem::exists("/dev/nvidia1"); }

// A cluster larger than the machine: two GPUs that exist only in the simulator.
std::string SimulatedOnlyConfig() {
  return WriteTemp("sim_only.yaml",
                   "model: {builtin: lenet, batch_size: 32}\n"
                   "devices: [cuda:0, cuda:1, cpu:0]\n"
                   "search: {evaluator: simulated}\n");
}

TEST(CliTest, EvaluateSimulatesAClusterLargerThanTheMachineAndWritesItsTrace) {
  if (HasSecondGpu()) GTEST_SKIP() << "the GPUs are real here";
  const auto trace = SuiteDir() / "sim_trace.json";
  Result r = RunPlacer("evaluate --config " + SimulatedOnlyConfig() + " --simulate --trace " +
                       trace.string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("simulated (roofline model)"), HasSubstr("lower bound"),
                              HasSubstr("cuda:1")));
  // Without a profile the roofline model says it is uncalibrated, and how to calibrate it.
  EXPECT_THAT(r.output, AllOf(HasSubstr("the roofline model is uncalibrated"),
                              HasSubstr("placer profile --config " + SimulatedOnlyConfig())));
  std::ifstream in(trace);
  const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(json, AllOf(HasSubstr("traceEvents"), HasSubstr("conv1"), HasSubstr("cuda:0")));
}

// The default micro-batch counts reach the device count where it is above 8, so that a pipeline
// over 16 simulated GPUs can have 16 micro-batches (ActionSpace::DefaultMaxMicroBatches); two
// replicated pipelines over 8 devices each keep to 8; 8 devices keep 1, 2, 4, 8.
TEST(CliTest, SixteenSimulatedGpusSearchSixteenMicroBatches) {
  auto search_on = [](int devices) {
    std::string names;
    for (int d = 0; d < devices; ++d) names += fmt::format("{}cuda:{}", d ? ", " : "", d);
    const auto dir = SuiteDir() / fmt::format("micro_batches_{}", devices);
    return RunPlacer("search --config " +
                     WriteTemp(fmt::format("micro_batches_{}.yaml", devices),
                               "model: {builtin: lenet, batch_size: 64}\n"
                               "devices: [" +
                                   names +
                                   "]\n"
                                   "search: {evaluator: simulated, max_evaluations: 200}\n"
                                   "output: {directory: " +
                                   dir.string() + "}\n"));
  };
  const Result sixteen = search_on(16);
  ASSERT_EQ(sixteen.exit_code, 0) << sixteen.output;
  EXPECT_THAT(sixteen.output, AllOf(HasSubstr("micro-batch counts 1/2/4/8/16,"),
                                    HasSubstr("of 1 replica in 2/4/8/16 micro-batches"),
                                    HasSubstr("replicated pipelines 2x2/2x4/2x8/4x2/")));
  const Result eight = search_on(8);
  ASSERT_EQ(eight.exit_code, 0) << eight.output;
  EXPECT_THAT(eight.output, HasSubstr("micro-batch counts 1/2/4/8,"));
}

// `placer predict`: the simulator's numbers for GPUs of any kind, without measuring: the same
// prediction `evaluate --simulate` prints, on GPUs the machine lacks even where the config's
// evaluator measures, with a throughput; a bad kind or precision is answered with the valid ones.
std::string PredictConfig(const std::string& name, const std::string& evaluator,
                          const std::string& simulation) {
  return WriteTemp(name,
                   "model: {builtin: transformer, batch_size: 32, transformer: {layers: 2}}\n"
                   "devices: [{name: cuda:0, kind: a100-80gb-sxm}, cuda:1, cuda:2, cuda:3]\n"
                   "search: {evaluator: " +
                       evaluator + "}\nsimulation: " + simulation + "\n");
}

double Milliseconds(const std::string& output, const std::string& pattern) {
  std::smatch match;
  EXPECT_TRUE(std::regex_search(output, match, std::regex(pattern))) << pattern << "\n" << output;
  return match.empty() ? -1 : std::stod(match[1].str());
}

TEST(CliTest, PredictGivesTheSimulatorsStepOnAnyGpuKindWithoutMeasuring) {
  if (HasSecondGpu()) GTEST_SKIP() << "the GPUs are real here";
  const std::string simulation = "{gpu_link: nvlink, gpu_kind: h100-sxm, precision: bf16}";
  const std::string simulated = PredictConfig("predict_sim.yaml", "simulated", simulation);
  Result predicted = RunPlacer("predict --config " + simulated + " --data-parallel");
  ASSERT_EQ(predicted.exit_code, 0) << predicted.output;
  EXPECT_THAT(predicted.output,
              AllOf(HasSubstr("throughput"), HasSubstr("cuda:3"),
                    Not(HasSubstr("simulated / measured")), Not(HasSubstr("median of"))));
  const double ms = Milliseconds(predicted.output, "predicted step time: ([0-9.]+) ms");
  // Throughput is the batch over the step time.
  const double throughput = Milliseconds(predicted.output, "throughput ([0-9.]+) samples/s");
  EXPECT_NEAR(throughput, 32 / (ms * 1e-3), 0.01 * throughput);
  Result evaluated = RunPlacer("evaluate --config " + simulated + " --simulate --data-parallel");
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_EQ(ms, Milliseconds(evaluated.output, "simulated \\(roofline model\\): ([0-9.]+) ms"));
  // Another precision is another prediction: the kinds and precision reach the simulator.
  Result fp32 = RunPlacer(
      "predict --config " +
      PredictConfig("predict_fp32.yaml", "simulated", "{gpu_link: nvlink, gpu_kind: h100-sxm}") +
      " --data-parallel");
  ASSERT_EQ(fp32.exit_code, 0) << fp32.output;
  EXPECT_GT(Milliseconds(fp32.output, "predicted step time: ([0-9.]+) ms"), ms);
  // Achieved efficiency reaches the simulator (another step: on this small model not a slower
  // one, since the peak model adds compute, memory and 5.7 us per op where achieved takes the
  // larger of the first two), and says so instead of "uncalibrated".
  Result achieved =
      RunPlacer("predict --config " +
                PredictConfig("predict_achieved.yaml", "simulated",
                              "{gpu_link: nvlink, gpu_kind: h100-sxm, precision: bf16, "
                              "gpu_efficiency: achieved}") +
                " --data-parallel");
  ASSERT_EQ(achieved.exit_code, 0) << achieved.output;
  EXPECT_NE(Milliseconds(achieved.output, "predicted step time: ([0-9.]+) ms"), ms);
  EXPECT_THAT(achieved.output, AllOf(HasSubstr("fractions of their peaks that an H200's kernels"),
                                     Not(HasSubstr("uncalibrated"))));
  // A measuring config: evaluate refuses the absent GPUs, predict does not need them.
  const std::string measured = PredictConfig("predict_measured.yaml", "measured", simulation);
  EXPECT_EQ(RunPlacer("evaluate --config " + measured + " --simulate --data-parallel").exit_code,
            2);
  Result absent = RunPlacer("predict --config " + measured + " --device cuda:1");
  ASSERT_EQ(absent.exit_code, 0) << absent.output;
  EXPECT_THAT(absent.output, HasSubstr("predicted step time: "));
  for (const auto& [bad, valid] :
       {std::pair<std::string, std::string>{"{gpu_kind: h300}", "known kinds: a100-40gb-sxm"},
        {"{precision: fp8}", "expected 'fp32', 'tf32', 'bf16' or 'fp16'"},
        {"{gpu_efficiency: fast}", "expected 'peak' or 'achieved'"}}) {
    Result refused =
        RunPlacer("predict --config " + PredictConfig("predict_bad.yaml", "simulated", bad));
    EXPECT_EQ(refused.exit_code, 2) << refused.output;
    EXPECT_THAT(refused.output, HasSubstr(valid));
  }
}

// Devices of two processes ("w0/", "w1/"): without torchrun's variables, --simulate predicts the
// data-parallel step with the processes on two hosts, and compare judges every method by it.
std::string TwoProcessConfig(const std::filesystem::path& output) {
  return WriteTemp("two_processes_sim.yaml",
                   "model: {builtin: lenet, batch_size: 32}\n"
                   "devices: [w0/cpu:0, w1/cpu:0]\n"
                   "search: {evaluator: simulated, policy_steps: 3, max_wall_seconds: 20}\n"
                   "simulation: {host_link_gbps: 100}\n"
                   "output: {directory: " +
                       output.string() + "}\n");
}

TEST(CliTest, EvaluateAndCompareSimulateDevicesOfTwoProcesses) {
  const auto dir = SuiteDir() / "two_processes";
  const std::string config = TwoProcessConfig(dir);
  Result evaluated = RunPlacer("evaluate --config " + config + " --simulate --data-parallel");
  ASSERT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_THAT(evaluated.output,
              AllOf(HasSubstr("simulated (roofline model)"), HasSubstr("simulated, not measured"),
                    Not(HasSubstr("joining the Gloo group"))));
  Result compared = RunPlacer("compare --config " + config);
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  EXPECT_THAT(compared.output, AllOf(HasSubstr("w0/cpu:0, w1/cpu:0"), HasSubstr("data parallel"),
                                     HasSubstr("learned (")));
  EXPECT_TRUE(std::filesystem::exists(dir / "report.md"));
}

TEST(CliTest, EvaluateWithoutSimulateRefusesAbsentGpusWithExitTwo) {
  if (HasSecondGpu()) GTEST_SKIP() << "the GPUs are real here";
  Result r = RunPlacer("evaluate --config " + SimulatedOnlyConfig());
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("sim_only.yaml"), HasSubstr("--simulate")));
}

TEST(CliTest, EvaluateSimulateWritesTheSimulatedTraceNextToTheMeasuredOne) {
  const auto dir = SuiteDir() / "both_traces";
  std::filesystem::create_directories(dir);
  const std::string config = WriteTemp("both.yaml",
                                       "model: {builtin: lenet, batch_size: 16}\n"
                                       "devices: [cpu:0, cpu:1]\n"
                                       "measurement: {warmup_steps: 1, timed_steps: 2}\n");
  Result r = RunPlacer("evaluate --config " + config + " --simulate --trace " +
                       (dir / "step.json").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("simulated / measured"));
  EXPECT_TRUE(std::filesystem::exists(dir / "step.json"));
  EXPECT_TRUE(std::filesystem::exists(dir / "step.simulated.json"));
}

// A placement file with micro_batches and schedule: evaluate builds the micro-batched step (op
// names "m<k>/<op>") and runs and simulates that schedule; with replicas too, the replicated
// pipelines ("r<r>/m<k>/<op>").
TEST(CliTest, EvaluateRunsAPipelinedPlacementFromItsFile) {
  const auto dir = SuiteDir() / "pipelined";
  std::filesystem::create_directories(dir);
  const std::string config = WriteTemp("pipelined.yaml",
                                       "model: {builtin: lenet, batch_size: 16}\n"
                                       "devices: [cpu:0, cpu:1]\n"
                                       "measurement: {warmup_steps: 1, timed_steps: 2}\n");
  const std::string placement = WriteTemp("pipelined_placement.yaml",
                                          "micro_batches: 4\nschedule: 1f1b\ndefault: cpu:0\n"
                                          "rules:\n  - {match: \"m*/fc*\", device: cpu:1}\n");
  Result r = RunPlacer("evaluate --config " + config + " --placement " + placement +
                       " --simulate --trace " + (dir / "step.json").string());
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, AllOf(HasSubstr("4 micro-batches of 4 rows, 1f1b"),
                              HasSubstr("simulated / measured"), HasSubstr("cpu:1")));
  for (const char* trace : {"step.json", "step.simulated.json"}) {
    std::ifstream in(dir / trace);
    const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(json, AllOf(HasSubstr("m0/conv1"), HasSubstr("m3/fc1"))) << trace;
  }

  // Two replicated pipelines of 4 micro-batches, replica r on cpu:r: the step of 2 x 4 copies.
  const std::string both =
      WriteTemp("pipelined_replicated.yaml",
                "replicas: 2\nmicro_batches: 4\nschedule: 1f1b\ndefault: cpu:0\n"
                "rules:\n  - {match: \"r1/*\", device: cpu:1}\n");
  Result replicated = RunPlacer("evaluate --config " + config + " --placement " + both +
                                " --simulate --trace " + (dir / "replicated.json").string());
  EXPECT_EQ(replicated.exit_code, 0) << replicated.output;
  EXPECT_THAT(replicated.output, AllOf(HasSubstr("2 replicas x 4 micro-batches of 2 rows, 1f1b"),
                                       HasSubstr("simulated / measured")));
  {
    std::ifstream in(dir / "replicated.json");
    const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(json, AllOf(HasSubstr("r0/m0/conv1"), HasSubstr("r1/m3/fc1")));
  }
  const std::string three = WriteTemp("pipelined_three.yaml", "micro_batches: 3\ndefault: 0\n");
  Result undivided =
      RunPlacer("evaluate --config " + config + " --placement " + three + " --simulate");
  EXPECT_EQ(undivided.exit_code, 2) << undivided.output;
  EXPECT_THAT(undivided.output, AllOf(HasSubstr("pipelined_three.yaml"),
                                      HasSubstr("micro_batches: 3 does not divide")));
}

// LeNet (batch 32) on two 1-thread CPU workers that hold 2.7 MB each: 40% of the plain step's
// measured peak on one device (6.44 MiB, `placer evaluate --device cpu:0`), so that neither
// device alone nor the baselines' placements fit, and pipelines over both workers do (the
// pipeline baseline's contiguous stages fit under 1F1B with 8 micro-batches, not under GPipe).
constexpr const char* kPipelineOnlyDevices =
    "model: {builtin: lenet, batch_size: 32}\n"
    "devices:\n  - {name: cpu:0, threads: 1, memory: 2700000}\n"
    "  - {name: cpu:1, threads: 1, memory: 2700000}\n"
    "measurement: {warmup_steps: 1, timed_steps: 2}\n";

// A measured search proposes pipelines, measures them, and exports its pipelined answer with M
// and the schedule: `placer evaluate --placement` of the file runs the same shape.
TEST(CliTest, AMeasuredSearchMeasuresPipelinesAndExportsOne) {
  const auto dir = SuiteDir() / "measured_pipelines";
  const std::string config =
      WriteTemp("measured_pipelines.yaml",
                std::string(kPipelineOnlyDevices) +
                    "search:\n  evaluator: measured\n  policy_steps: 3\n  samples_per_step: 8\n"
                    "  refinement_rounds: 20\n  verify_candidates: 2\n  replicas: [1]\n"
                    "  micro_batches: [1, 4, 8]\noutput:\n  directory: " +
                    dir.string() + "\n");
  Result r = RunPlacer("search --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Measured: 3 rounds of every placement, more (up to 10) while the fastest is tied; nothing but
  // pipelines fits, so there is no data-parallel row to compare with.
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\nanswer: [^\n]*(\\(|; )([3-9]|10) rounds\\)"));
  EXPECT_THAT(r.output, HasSubstr("answer vs data parallelism: - (no valid data-parallel row)"));
  EXPECT_THAT(r.output, AllOf(HasSubstr("micro-batch counts 1/4/8"),
                              HasSubstr("profiling the training step with 8 micro-batches of 4"),
                              HasSubstr("warm start: pipeline (contiguous stages), M = 8, 1f1b")));
  std::ifstream in(dir / "best_placement.yaml");
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_THAT(file, AllOf(HasSubstr("(measured)"), HasSubstr("schedule: 1f1b")));
  const auto m = file.find("micro_batches: ");
  ASSERT_NE(m, std::string::npos) << file;
  const int micro_batches = std::stoi(file.substr(m + 15));
  EXPECT_GT(micro_batches, 1);
  Result evaluated = RunPlacer("evaluate --config " + config + " --placement " +
                               (dir / "best_placement.yaml").string());
  EXPECT_EQ(evaluated.exit_code, 0) << evaluated.output;
  EXPECT_THAT(evaluated.output,
              AllOf(HasSubstr(std::to_string(micro_batches) + " micro-batches of " +
                              std::to_string(32 / micro_batches) + " rows, 1f1b"),
                    HasSubstr("step time")));
}

// A measured search with tensor_ways named: the split step is profiled for the search's simulator
// and measured on the workers in the closing side-by-side, as every other shape is.
TEST(CliTest, AMeasuredSearchMeasuresTensorParallelSteps) {
  const auto dir = SuiteDir() / "measured_tensor_parallel";
  const std::string config = WriteTemp(
      "measured_tensor_parallel.yaml",
      "model: {builtin: lenet, batch_size: 16}\n"
      "devices:\n  - {name: cpu:0, threads: 1}\n  - {name: cpu:1, threads: 1}\n"
      "measurement: {warmup_steps: 1, timed_steps: 2}\n"
      "search:\n  evaluator: measured\n  policy_steps: 2\n  samples_per_step: 8\n"
      "  refinement_rounds: 10\n  verify_candidates: 2\n  replicas: [2]\n  micro_batches: [1]\n"
      "  tensor_ways: [2]\noutput:\n  directory: " +
          dir.string() + "\n");
  Result r = RunPlacer("search --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(HasSubstr("tensor-parallel 1x2 (replicas x shards"),
                    HasSubstr("profiling the training step with 1 replica of 2 tensor-parallel "
                              "shards on cpu:0, cpu:1")));
  // Its row: measured in rounds like the others (a step time and the rounds' range).
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "\\| warm start: tensor parallel 2 x data parallel 1 \\| +[0-9.]+ ms "
                            "\\| +[0-9.]+-[0-9.]+ \\|"));
}

// `placer compare` where only pipelines fit: the learned row and the pipeline baseline's row show
// M, the schedule and the peak memory of each device; the timeline of the pipelined answer
// numbers its micro-batches.
TEST(CliTest, CompareShowsThePipelinesOfTheLearnedAndPipelineRows) {
  const auto dir = SuiteDir() / "compare_pipelines";
  const std::string config =
      WriteTemp("compare_pipelines.yaml",
                std::string(kPipelineOnlyDevices) +
                    "search:\n  evaluator: simulated\n  policy_steps: 4\n  samples_per_step: 8\n"
                    "  refinement_rounds: 20\n  replicas: [1]\n  micro_batches: [1, 2, 4, 8]\n"
                    "output:\n  directory: " +
                    dir.string() + "\n");
  Result r = RunPlacer("compare --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // The rows: method, step time, ratios, time to produce, then the peak memory of both devices.
  EXPECT_THAT(r.output,
              ::testing::ContainsRegex("\nlearned[^\n]* ms [^\n]*[0-9.]+ / [0-9.]+ MiB\n"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "\npipeline \\(M = [0-9]+, 1f1b\\)[^\n]* [0-9.]+ / [0-9.]+ MiB\n"));
  // Their placements: the learned answer is a pipeline (nothing else fits).
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\nlearned[^\n]*: 1 replica[^\n]*, [248] "
                                                 "micro-batches, (gpipe|1f1b): "));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "\npipeline \\(M = [0-9]+, 1f1b\\): [0-9]+ contiguous stages, "));
  std::ifstream html(dir / "report.html");
  const std::string text((std::istreambuf_iterator<char>(html)), std::istreambuf_iterator<char>());
  // The learned placement's timeline: bars of micro-batch 1 (drawn on their own, numbered).
  const auto learned = text.find("<h3>learned</h3>");
  ASSERT_NE(learned, std::string::npos);
  const std::string picture = text.substr(learned, text.find("<h3>", learned + 1) - learned);
  EXPECT_THAT(picture, ::testing::ContainsRegex("<title>([0-9]+ ops: )?m1/"));
  EXPECT_THAT(picture, HasSubstr(R"(font-size="9">1</text>)"));
}

// `placer compare` on simulated GPUs has a Megatron-style row: the fastest of tensor-parallel
// sizes 1, 2 and 4 (every shape in the log, with its row-parallel sums) times data parallelism,
// its shape in the method and its placement described; T = 1 is the data-parallel step.
TEST(CliTest, CompareHasAMegatronStyleRowOverTheTensorTimesDataParallelGrid) {
  const auto dir = SuiteDir() / "compare_megatron";
  const std::string config = WriteTemp(
      "compare_megatron.yaml",
      "model: {builtin: transformer, batch_size: 8, transformer: {layers: 2, hidden: 64, heads: 4, "
      "ffn: 128, seq_length: 16, vocab: 100, max_positions: 16}}\n"
      "devices: [cuda:0, cuda:1, cuda:2, cuda:3]\n"
      "search: {evaluator: simulated, policy_steps: 2, samples_per_step: 4, "
      "refinement_rounds: 10}\n"
      "simulation: {gpu_link: nvlink}\noutput: {directory: " +
          dir.string() + "}\n");
  Result r = RunPlacer("compare --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output,
              AllOf(::testing::ContainsRegex(
                        "Megatron-style: TP 1 x DP 4 \\(0 sums per replica\\): [0-9.]+ ms"),
                    ::testing::ContainsRegex(
                        "Megatron-style: TP 2 x DP 2 \\(5 sums per replica\\): [0-9.]+ ms"),
                    ::testing::ContainsRegex(
                        "Megatron-style: TP 4 x DP 1 \\(5 sums per replica\\): [0-9.]+ ms")));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "\nMegatron-style \\(TP [124] x DP [124]\\)[^\n]* ms [^\n]*MiB\n"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "\nMegatron-style \\(TP [124] x DP [124]\\): (no layer split "
                            "\\(data parallelism over 4 devices\\)|attention and MLP "
                            "blocks split [24] ways)"));
}

// A grid row outside the search's space that beats the answer is said beside the verdict: here
// the search may not replicate (search.replicas: [1]), and the Megatron grid's data-parallel
// shape is faster than any single-replica placement of this compute-heavy encoder.
TEST(CliTest, CompareSaysWhenAGridRowOutsideTheSearchsSpaceBeatsTheAnswer) {
  const auto dir = SuiteDir() / "compare_megatron_faster";
  const std::string config = WriteTemp(
      "compare_megatron_faster.yaml",
      "model: {builtin: transformer, batch_size: 64, transformer: {layers: 2, hidden: 1024, "
      "heads: 8, ffn: 4096, seq_length: 128, vocab: 100, max_positions: 128}}\n"
      "devices: [cuda:0, cuda:1, cuda:2, cuda:3]\n"
      "search: {evaluator: simulated, max_evaluations: 4, policy: false, refinement_rounds: 1, "
      "replicas: [1]}\n"
      "simulation: {gpu_link: nvlink}\noutput: {directory: " +
          dir.string() + "}\n");
  Result r = RunPlacer("compare --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex(
                            "\nfaster than the answer, outside the search's space \\(not judged "
                            "side by side\\): Megatron-style \\(TP 1 x DP 4\\), [0-9.]+ ms "
                            "against [0-9.]+ ms \\(0\\.[0-9]+\\)\n"))
      << r.output;
  std::ifstream md(dir / "report.md");
  const std::string text((std::istreambuf_iterator<char>(md)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("faster than the answer, outside the search's space"));
}

// Under a measured judge the pipeline baseline has its row too: its contiguous stages at the
// search's micro-batch count and schedule that measured fastest side by side, with each device's
// peak memory (only pipelines fit these devices, and of them only 1F1B with 8 micro-batches).
TEST(CliTest, AMeasuredCompareHasThePipelineRow) {
  const auto dir = SuiteDir() / "measured_compare_pipelines";
  const std::string config =
      WriteTemp("measured_compare_pipelines.yaml",
                std::string(kPipelineOnlyDevices) +
                    "search:\n  evaluator: measured\n  policy_steps: 3\n  samples_per_step: 8\n"
                    "  refinement_rounds: 20\n  verify_candidates: 2\n  replicas: [1]\n"
                    "  micro_batches: [1, 4, 8]\noutput:\n  directory: " +
                    dir.string() + "\n");
  Result r = RunPlacer("compare --config " + config);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\npipeline \\(M = 8, 1f1b, measured\\) +[0-9.]+ "
                                                 "ms [^\n]* [0-9.]+ / [0-9.]+ MiB\n"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("\npipeline \\(M = 8, 1f1b, measured\\): 1 "
                                                 "replica[^\n]*, 8 micro-batches, 1f1b: "));
}

}  // namespace
