// Every bad input, through the real `placer` binary: one clear message naming the file, key, line,
// op or device, and exit code 2, before any work starts.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/onnx_writer.h"
#include "tests/support.h"
#include "tests/temp_dir.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using Result = placer::test_support::CommandResult;
using placer::test_support::RunPlacer;

// A case: files to write into a fresh directory ($D stands for it in contents and arguments),
// the arguments, and what the message must contain.
struct Case {
  std::string name;
  std::vector<std::pair<std::string, std::string>> files;
  std::string args;
  std::vector<std::string> expected;
};

void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

const std::string kModel = "model:\n  builtin: lenet\n  batch_size: 16\n";
const std::string kTwoCpus = "devices: [cpu:0, cpu:1]\n";
const std::string kGood = kModel + kTwoCpus + "measurement:\n  warmup_steps: 0\n  timed_steps: 1\n";

std::string Replace(std::string text, const std::string& dir) {
  for (size_t at = text.find("$D"); at != std::string::npos; at = text.find("$D", at)) {
    text.replace(at, 2, dir);
  }
  return text;
}

namespace ox = placer::test_support::onnx;

std::string Truncated(const std::string& bytes) { return bytes.substr(0, bytes.size() / 2); }

ox::Model WithOp(ox::Model model, size_t node, const std::string& op_type) {
  model.nodes.at(node).op_type = op_type;
  return model;
}

ox::Model WithInput(ox::Model model, size_t node, const std::string& input) {
  model.nodes.at(node).inputs.at(0) = input;
  return model;
}

std::vector<Case> Cases() {
  const std::string validate = "validate --config $D/c.yaml";
  const std::string evaluate = "evaluate --config $D/c.yaml";
  auto config = [](std::string text) {
    return std::vector<std::pair<std::string, std::string>>{{"c.yaml", std::move(text)}};
  };
  auto onnx_model = [](std::string bytes) {
    return std::vector<std::pair<std::string, std::string>>{
        {"c.yaml", "model:\n  onnx: m.onnx\n  batch_size: 4\n"}, {"m.onnx", std::move(bytes)}};
  };
  auto with_placement = [](std::string placement) {
    return std::vector<std::pair<std::string, std::string>>{{"c.yaml", kGood},
                                                            {"p.yaml", std::move(placement)}};
  };
  return {
      // Configs.
      {"UnknownTopLevelKey", config(kModel + "colour: blue\n"), validate, {"c.yaml:4", "colour"}},
      {"UnknownNestedKey",
       config(kModel + "  lenet:\n    hiden: 3\n"),
       validate,
       {"c.yaml:5", "model.lenet.hiden"}},
      {"BatchIsText",
       config("model:\n  builtin: lenet\n  batch_size: many\n"),
       validate,
       {"c.yaml:3", "model.batch_size", "integer"}},
      {"NegativeBatch",
       config("model:\n  builtin: lenet\n  batch_size: -4\n"),
       validate,
       {"c.yaml:3", "model.batch_size", ">= 1"}},
      {"ZeroDevices", config(kModel + "devices: []\n"), validate, {"c.yaml:4", "devices"}},
      {"UnknownEditProposer",
       config(kModel + "search:\n  edit_proposer: clever\n"),
       validate,
       {"c.yaml:5", "search.edit_proposer", "clever"}},
      {"LearnedEditsWithoutAModel",
       config(kModel + "search:\n  edit_proposer: learned\n"),
       validate,
       {"c.yaml:5", "search.edit_proposer", "search.edit_model"}},
      {"EditModelThatIsNoModel",
       {{"c.yaml", kGood + "search:\n  edit_proposer: learned\n  edit_model: m.pt\n"},
        {"m.pt", "not a model"}},
       "search --config $D/c.yaml",
       {"search.edit_model", "$D/m.pt", "not an edit model file"}},
      {"PipelineReplicasNotSearched",
       config(kGood + "search:\n  replicas: [1, 2]\n  pipeline_replicas: [4]\n"),
       "search --config $D/c.yaml",
       {"$D/c.yaml", "search.pipeline_replicas", "4 replicas are not searched"}},
      {"TensorWaysOnACluster",
       config(kGood + "search:\n  tensor_ways: [2]\ncluster:\n  workers: 1\n  port: 0\n"),
       "search --config $D/c.yaml",
       {"$D/c.yaml", "search.tensor_ways", "a cluster's workers do not build tensor-parallel"}},
      {"TensorWaysNotDividingTheDevices",
       config(kGood + "search:\n  evaluator: simulated\n  tensor_ways: [3]\n"),
       "search --config $D/c.yaml",
       {"$D/c.yaml", "search.tensor_ways", "3 ways do not divide the 2 devices"}},
      {"PipelineReplicasEmpty",
       config(kModel + "search:\n  pipeline_replicas: []\n"),
       validate,
       {"c.yaml:5", "search.pipeline_replicas", "non-empty list"}},
      {"NegativePolicySteps",
       config(kModel + "search:\n  policy_steps: -1\n"),
       validate,
       {"c.yaml:5", "search.policy_steps"}},
      {"ZeroWallBudget",
       config(kModel + "search:\n  max_wall_seconds: 0\n"),
       validate,
       {"c.yaml:5", "search.max_wall_seconds", "> 0"}},
      {"ZeroEvaluations",
       config(kModel + "search:\n  max_evaluations: 0\n"),
       validate,
       {"c.yaml:5", "search.max_evaluations"}},
      // GPU kinds and precisions of the simulator (runtime/sim/gpu_kinds.h).
      {"UnknownGpuKind",
       config(kModel + "simulation:\n  gpu_kind: h100\n"),
       validate,
       {"c.yaml:5", "simulation.gpu_kind", "unknown GPU kind 'h100'",
        "a100-40gb-sxm, a100-80gb-sxm, a100-80gb-pcie, h100-sxm, h100-pcie, h200, l40s"}},
      {"UnknownDeviceGpuKind",
       config(kModel + "devices:\n  - {name: cuda:0, kind: v100}\n"),
       validate,
       {"c.yaml:5", "devices[0].kind", "unknown GPU kind 'v100'", "h100-sxm"}},
      {"GpuKindOfACpu",
       config(kModel + "devices:\n  - {name: cpu:0, kind: h200}\n"),
       validate,
       {"c.yaml:5", "devices[0].kind", "not a GPU"}},
      {"GpuKindWithoutNvlink",
       config(kModel + "simulation:\n  gpu_link: nvlink\n  gpu_kind: l40s\n"),
       validate,
       {"c.yaml:6", "simulation.gpu_kind", "'l40s' has no NVLink"}},
      {"UnknownPrecision",
       config(kModel + "simulation:\n  precision: fp8\n"),
       validate,
       {"c.yaml:5", "simulation.precision", "unknown precision 'fp8'",
        "'fp32', 'tf32', 'bf16' or 'fp16'"}},
      {"AbsentGpu",
       config(kModel + "devices: [cpu:0, cuda:0]\n"),
       validate,
       {"c.yaml:4", "devices[1]", "cuda:0", "not present"}},
      {"MoreGpusThanPresent",
       config(kModel + "devices:\n  - cpu:0\n  - cuda:3\n"),
       validate,
       {"c.yaml:6", "devices[1]", "cuda:3"}},
      {"MalformedDeviceName",
       config(kModel + "devices: [gpu:0]\n"),
       validate,
       {"c.yaml:4", "devices[0]", "gpu:0"}},
      {"DuplicateDevice",
       config(kModel + "devices: [cpu:0, cpu:0]\n"),
       validate,
       {"c.yaml:4", "duplicate device 'cpu:0'"}},
      {"ZeroThreads",
       config(kModel + "devices:\n  - name: cpu:0\n    threads: 0\n"),
       validate,
       {"c.yaml:6", "devices[0].threads"}},
      {"BadMemory",
       config(kModel + "devices:\n  - name: cpu:0\n    memory: lots\n"),
       validate,
       {"c.yaml:6", "devices[0].memory", "lots"}},
      {"EmptyFile", config(""), validate, {"c.yaml", "no settings"}},
      {"BinaryFile",
       config(std::string("\x7f"
                          "ELF\x02\x01\x01\0\0\0",
                          10)),
       validate,
       {"c.yaml"}},
      {"TopLevelList", config("- model\n- devices\n"), validate, {"c.yaml:1", "mapping"}},
      {"MissingModel", config(kTwoCpus), validate, {"c.yaml", "model"}},
      {"MissingBuiltin",
       config("model:\n  batch_size: 4\n"),
       validate,
       {"c.yaml:1", "model", "'builtin'"}},
      {"UnknownBuiltin",
       config("model:\n  builtin: alexnet\n"),
       validate,
       {"c.yaml:2", "model.builtin", "alexnet", "lenet"}},
      {"TooManyReplicas",
       config("model:\n  builtin: lenet\n  batch_size: 2\n  replicas: 3\n"),
       validate,
       {"c.yaml:4", "model.replicas"}},
      {"OddHiddenSize",
       config(kModel + "search:\n  hidden_size: 7\n"),
       validate,
       {"c.yaml:5", "search.hidden_size", "even"}},
      {"UnknownEvaluator",
       config(kModel + "search:\n  evaluator: oracle\n"),
       validate,
       {"c.yaml:5", "search.evaluator", "oracle"}},
      {"NegativeTimeLimit",
       config(kModel + "measurement:\n  time_limit_seconds: -1\n"),
       validate,
       {"c.yaml:5", "measurement.time_limit_seconds"}},
      {"ImageTooSmall",
       config(kModel + "  lenet:\n    image_size: 8\n"),
       validate,
       {"c.yaml:5", "model.lenet.image_size"}},
      {"AbsurdModelSize",
       config(kModel + "  lenet:\n    hidden: 2000000000000\n"),
       validate,
       {"fc1.weight", "elements"}},
      {"SyntaxError", config("model: {builtin: lenet\n"), validate, {"c.yaml:"}},
      {"StrayCommaAtDocumentStart", config(",\n"), validate, {"c.yaml:1"}},
      {"MissingConfigFile", {}, validate, {"$D/c.yaml", "cannot read"}},
      {"ConfigIsADirectory", {{"c.yaml/x", ""}}, validate, {"$D/c.yaml"}},
      // Placements given by the user.
      {"PlacementNamesUnknownOp",
       with_placement("default: cpu:0\nplacement:\n  conv9: cpu:1\n"),
       evaluate + " --placement $D/p.yaml",
       {"p.yaml:3", "conv9"}},
      {"PlacementNamesUnknownDevice",
       with_placement("default: cpu:0\nplacement:\n  fc1: cuda:7\n"),
       evaluate + " --placement $D/p.yaml",
       {"p.yaml:3", "placement.fc1", "cuda:7"}},
      {"PlacementMissesOps",
       with_placement("placement:\n  fc1: cpu:1\n"),
       evaluate + " --placement $D/p.yaml",
       {"p.yaml", "misses 10 forward ops", "conv1"}},
      {"PlacementUnknownDefault",
       with_placement("default: tpu:0\n"),
       evaluate + " --placement $D/p.yaml",
       {"p.yaml:1", "default", "tpu:0"}},
      {"PlacementIsNotYaml",
       with_placement("placement: [unclosed\n"),
       evaluate + " --placement $D/p.yaml",
       {"p.yaml"}},
      {"PlacementIsAList",
       with_placement("- conv1\n- fc1\n"),
       evaluate + " --placement $D/p.yaml",
       {"p.yaml", "mapping"}},
      {"PlacementUnknownKey",
       with_placement("default: cpu:0\nplacment: {}\n"),
       evaluate + " --placement $D/p.yaml",
       {"p.yaml:2", "placment"}},
      {"PlacementFileMissing",
       config(kGood),
       evaluate + " --placement $D/none.yaml",
       {"none.yaml", "cannot read"}},
      {"ProtobufTextPlacementDoesNotParse",
       {{"c.yaml", kGood}, {"p.pbtxt", "ops { op: \"conv1\" device: cpu:0 }\n"}},
       evaluate + " --placement $D/p.pbtxt",
       {"p.pbtxt:1:", "protobuf text format"}},
      {"ProtobufTextPlacementNamesUnknownDevice",
       {{"c.yaml", kGood}, {"p.pbtxt", "ops { op: \"conv1\" device: \"cuda:7\" }\n"}},
       evaluate + " --placement $D/p.pbtxt",
       {"p.pbtxt", "cuda:7"}},
      {"ProtobufTextPlacementMissesOps",
       {{"c.yaml", kGood}, {"p.pbtxt", "ops { op: \"conv1\" device: \"cpu:0\" }\n"}},
       evaluate + " --placement $D/p.pbtxt",
       {"p.pbtxt", "misses 10 forward ops", "relu1"}},
      {"ProtobufBinaryPlacementIsCorrupt",
       {{"c.yaml", kGood}, {"p.pb", std::string("\x1a\x7f\x0a\x05conv1", 9)}},
       evaluate + " --placement $D/p.pb",
       {"p.pb", "truncated or corrupt"}},
      {"UnknownDeviceFlag", config(kGood), evaluate + " --device cpu:5", {"--device", "cpu:5"}},
      {"PlacementAndDevice",
       with_placement("default: cpu:0\n"),
       evaluate + " --placement $D/p.yaml --device cpu:0",
       {"either --placement or --device"}},
      {"DataParallelWithPlacement",
       with_placement("default: cpu:0\n"),
       evaluate + " --placement $D/p.yaml --data-parallel",
       {"--data-parallel"}},
      // Cost profiles.
      {"ProfileMissing",
       config(kGood + "simulation:\n  profile: none.json\n"),
       validate,
       {"simulation.profile", "none.json"}},
      {"ProfileNotJson",
       {{"c.yaml", kGood + "simulation:\n  profile: p.json\n"}, {"p.json", "{ oops"}},
       validate,
       {"simulation.profile", "p.json"}},
      {"ProfileMissingField",
       {{"c.yaml", kGood + "simulation:\n  profile: p.json\n"}, {"p.json", "{\"version\": 1}"}},
       validate,
       {"p.json"}},
      {"ProfileOfAnotherModel",
       {{"c.yaml", kGood + "simulation:\n  profile: p.json\n"},
        {"p.json",
         R"({"version": 1, "model": "transformer", "libtorch_version": "2.11.0", "date": "",
             "devices": [{"name": "cpu:0", "type": "cpu, 1 thread"}],
             "ops": [{"op": "embed", "device": "cpu:0", "seconds": 0.001}], "links": []})"}},
       validate,
       {"$D/p.json", "model 'transformer' lacks op 'conv1' of this model (lenet)"}},
      // ONNX models (model.onnx).
      {"OnnxTruncated",
       onnx_model(Truncated(ox::Encode(ox::SmallClassifier()))),
       validate,
       {"$D/m.onnx", "truncated"}},
      {"OnnxUnknownOp",
       onnx_model(ox::Encode(WithOp(ox::SmallClassifier(), 1, "Frobnicate"))),
       validate,
       {"$D/m.onnx", "unsupported ONNX op types: Frobnicate (first: node 1 'relu')"}},
      {"OnnxMissingInput",
       onnx_model(ox::Encode(WithInput(ox::SmallClassifier(), 2, "nowhere"))),
       validate,
       {"$D/m.onnx", "node 2 'fc2' (Gemm)", "input 'nowhere'"}},
      {"OnnxFileMissing",
       config("model:\n  onnx: none.onnx\n"),
       validate,
       {"$D/none.onnx", "cannot read"}},
      {"OnnxAndBuiltin",
       config("model:\n  builtin: lenet\n  onnx: m.onnx\n"),
       validate,
       {"c.yaml:3", "model.onnx", "not both"}},
      {"OnnxWithLeNetSizes",
       {{"c.yaml", "model:\n  onnx: m.onnx\n  lenet:\n    hidden: 3\n"},
        {"m.onnx", ox::Encode(ox::SmallClassifier())}},
       validate,
       {"c.yaml:3", "model.lenet", "model.onnx"}},
      // Searches and training.
      {"ResumeWithoutCheckpoint",
       config(kGood + "output:\n  directory: run\n"),
       "search --resume --config $D/c.yaml",
       {"checkpoint"}},
      {"SearchIntoAnotherSearch",
       {{"c.yaml", kGood + "output:\n  directory: run\n"}, {"run/checkpoint.pt", "x"}},
       "search --config $D/c.yaml",
       {"--resume"}},
      // Devices this machine lacks, under the measured evaluator: refused before any work.
      {"MeasuredSearchOnAnAbsentGpu",
       config(kModel + "devices: [cpu:0, cuda:3]\n"),
       "search --config $D/c.yaml",
       {"c.yaml:4", "devices[1]", "cuda:3", "not present"}},
      {"MeasuredSearchOnACpuBeyondTheCores",
       config(kModel + "devices: [cpu:0, cpu:999]\n"),
       "search --config $D/c.yaml",
       {"$D/c.yaml", "cpu:999", "not present", "core"}},
      {"MeasuredCompareOnACpuBeyondTheCores",
       config(kModel + "devices: [cpu:0, cpu:999]\n"),
       "compare --config $D/c.yaml",
       {"$D/c.yaml", "cpu:999", "not present"}},
      {"ZeroEpochs", config(kGood), "train --epochs 0 --config $D/c.yaml", {"--epochs"}},
  };
}

class BadInputTest : public ::testing::TestWithParam<Case> {};

TEST_P(BadInputTest, ExitsWithTwoAndNamesTheCulprit) {
  const Case& c = GetParam();
  const placer::test_support::TempDir temp("placer_bad_input_" + c.name);
  const fs::path& dir = temp.path();
  for (const auto& [name, contents] : c.files) {
    fs::create_directories((dir / name).parent_path());
    std::ofstream(dir / name, std::ios::binary) << contents;
  }
  Result r = RunPlacer(Replace(c.args, dir.string()));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  for (const std::string& expected : c.expected) {
    EXPECT_THAT(r.output, HasSubstr(Replace(expected, dir.string())));
  }
  // One message, not a cascade or a stack trace.
  EXPECT_LE(std::count(r.output.begin(), r.output.end(), '\n'), 3) << r.output;
}

INSTANTIATE_TEST_SUITE_P(Table, BadInputTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BadInputTableTest, HasAtLeastFortyCases) { EXPECT_GE(Cases().size(), 40u); }

}  // namespace
