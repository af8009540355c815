#include "placer/config/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>

#include "graph/builtin_models.h"
#include "graph/models.h"
#include "runtime/sim/gpu_kinds.h"

namespace placer::config {
namespace {

namespace fs = std::filesystem;

// The smallest valid config; bad cases below append to it, so their line numbers start at 3.
constexpr char kMinimal[] = "model:\n  builtin: lenet\n";

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A temporary file that removes itself; LoadConfig needs a real path.
class TempFile {
 public:
  TempFile(const std::string& name, const std::string& contents)
      : path_(fs::temp_directory_path() /
              ("placer_config_test_" + std::to_string(::getpid()) + "_" + name)) {
    std::ofstream(path_, std::ios::binary) << contents;
  }
  ~TempFile() { fs::remove(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

TEST(ConfigTest, DefaultLeNetConfigLoads) {
  const fs::path file = fs::path(PLACER_SOURCE_DIR) / "configs" / "lenet.yaml";
  const Config config = LoadConfig(file);
  EXPECT_EQ(config.source, file);
  EXPECT_EQ(config.model.builtin, "lenet");
  EXPECT_EQ(config.model.batch_size, 256);
  EXPECT_DOUBLE_EQ(config.model.learning_rate, 0.2);
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().image_size, 28);
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().conv1_channels, 20);
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().conv2_channels, 50);
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().hidden, 128);
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().classes, 10);
  ASSERT_FALSE(config.devices.automatic);
  ASSERT_EQ(config.devices.devices.size(), 2u);
  EXPECT_EQ(config.devices.devices[0].name, "cpu:0");
  EXPECT_EQ(config.devices.devices[1].name, "cpu:1");
  for (const DeviceConfig& device : config.devices.devices) {
    EXPECT_EQ(device.threads, 1);
    EXPECT_FALSE(device.memory_bytes.has_value());
    EXPECT_GT(device.line, 0);
  }
  EXPECT_LT(config.devices.devices[0].line, config.devices.devices[1].line);
  EXPECT_EQ(config.measurement.warmup_steps, 5);
  EXPECT_EQ(config.measurement.timed_steps, 5);
  EXPECT_EQ(config.search.evaluator, graph::EvaluatorKind::kMeasured);
  EXPECT_EQ(config.search.replicas, (std::vector<int>{1, 2}));
  EXPECT_EQ(config.search.options.learner.samples_per_step, 64);
  EXPECT_DOUBLE_EQ(config.search.options.max_wall_seconds, 60.0);
  EXPECT_EQ(config.search.verify_candidates, 5);
  EXPECT_EQ(config.search.options.seed, 1u);
  EXPECT_EQ(config.search.options.checkpoint_every, 10);
  // "../runs/lenet" is relative to configs/, not to the working directory.
  EXPECT_EQ(config.output.directory, fs::path(PLACER_SOURCE_DIR) / "runs" / "lenet");
}

TEST(ConfigTest, OmittedSectionsKeepDefaults) {
  const Config config = ParseConfig(kMinimal, "minimal.yaml");
  const Config defaults;
  EXPECT_EQ(config.source, "minimal.yaml");
  EXPECT_EQ(config.model.batch_size, defaults.model.batch_size);
  EXPECT_DOUBLE_EQ(config.model.learning_rate, defaults.model.learning_rate);
  EXPECT_EQ(config.model.init_seed, defaults.model.init_seed);
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().image_size,
            defaults.model.options_as<graph::LeNetOptions>().image_size);
  EXPECT_TRUE(config.devices.automatic);
  EXPECT_TRUE(config.devices.devices.empty());
  EXPECT_EQ(config.measurement.warmup_steps, defaults.measurement.warmup_steps);
  EXPECT_EQ(config.measurement.timed_steps, defaults.measurement.timed_steps);
  EXPECT_DOUBLE_EQ(config.measurement.time_limit_seconds, defaults.measurement.time_limit_seconds);
  EXPECT_EQ(config.search.options.policy_steps, defaults.search.options.policy_steps);
  EXPECT_EQ(config.search.options.max_evaluations, defaults.search.options.max_evaluations);
  EXPECT_EQ(config.search.options.seed, defaults.search.options.seed);
  EXPECT_EQ(config.search.options.checkpoint_every, defaults.search.options.checkpoint_every);
  EXPECT_EQ(config.output.directory, defaults.output.directory);
}

TEST(ConfigTest, PartialSectionsAndEmptySections) {
  const Config config = ParseConfig(std::string(kMinimal) +
                                        "  lenet:\n    hidden: 64\n"
                                        "measurement:\n"
                                        "search:\n  seed: 18446744073709551615\n",
                                    "partial.yaml");
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().hidden, 64);
  EXPECT_EQ(config.model.options_as<graph::LeNetOptions>().classes, 10);
  EXPECT_EQ(config.measurement.timed_steps, MeasurementConfig{}.timed_steps);
  EXPECT_EQ(config.search.options.seed, UINT64_MAX);
  EXPECT_EQ(config.search.options.policy_steps, SearchConfig{}.options.policy_steps);
}

TEST(ConfigTest, GroupingDefaultsToCoarseningTo256Groups) {
  const Config defaults = ParseConfig(kMinimal, "defaults.yaml");
  EXPECT_EQ(defaults.search.grouping, graph::GroupingMethod::kCoarsen);
  EXPECT_EQ(defaults.search.max_groups, 256);
  const Config config = ParseConfig(
      std::string(kMinimal) + "search:\n  grouping: colocate\n  max_groups: 64\n", "g.yaml");
  EXPECT_EQ(config.search.grouping, graph::GroupingMethod::kColocate);
  EXPECT_EQ(config.search.max_groups, 64);
}

// The policy's network: the LSTM by default; a pretrained file only for the graph policy.
TEST(ConfigTest, PolicyNetworkDefaultsToTheLstmAndOnlyTheGraphPolicyReadsAFile) {
  EXPECT_EQ(ParseConfig(kMinimal, "d.yaml").search.options.policy.kind, search::PolicyKind::kLstm);
  const Config graph = ParseConfig(
      std::string(kMinimal) + "search:\n  policy_network: graph\n  policy_file: p.pt\n", "g.yaml");
  EXPECT_EQ(graph.search.options.policy.kind, search::PolicyKind::kGraph);
  EXPECT_EQ(graph.search.options.policy.pretrained_file, "p.pt");
  try {
    ParseConfig(std::string(kMinimal) + "search:\n  policy_file: p.pt\n", "lstm.yaml");
    FAIL() << "an LSTM policy took a pretrained file";
  } catch (const ConfigError& error) {
    EXPECT_NE(std::string(error.what()).find("policy_file"), std::string::npos) << error.what();
    EXPECT_NE(std::string(error.what()).find("lstm.yaml"), std::string::npos) << error.what();
  }
  EXPECT_THROW(ParseConfig(std::string(kMinimal) + "search:\n  policy_network: gnn\n", "x.yaml"),
               ConfigError);
}

// The closing side-by-side's rounds: 3, up to 10 while tied; a minimum above the default budget
// raises the budget with it.
TEST(ConfigTest, VerifyRoundsDefaultToThreeUpToTenAndTheBudgetFollowsTheMinimum) {
  const Config defaults = ParseConfig(kMinimal, "defaults.yaml");
  EXPECT_EQ(defaults.search.verify_rounds, 3);
  EXPECT_EQ(defaults.search.verify_max_rounds, 10);
  const Config raised =
      ParseConfig(std::string(kMinimal) + "search:\n  verify_rounds: 12\n", "raised.yaml");
  EXPECT_EQ(raised.search.verify_rounds, 12);
  EXPECT_EQ(raised.search.verify_max_rounds, 12);
}

TEST(ConfigTest, AutoDevices) {
  const Config config = ParseConfig(std::string(kMinimal) + "devices: auto\n", "auto.yaml");
  EXPECT_TRUE(config.devices.automatic);
  EXPECT_TRUE(config.devices.devices.empty());
}

TEST(ConfigTest, DeviceListMixesNamesAndMappings) {
  const Config config = ParseConfig(std::string(kMinimal) +
                                        "devices:\n"
                                        "  - cpu:0\n"
                                        "  - name: cuda:1\n"
                                        "    memory: 1.5GiB\n"
                                        "  - {name: cpu:7, threads: 4, memory: 1000000}\n",
                                    "devices.yaml");
  ASSERT_FALSE(config.devices.automatic);
  const std::vector<DeviceConfig>& devices = config.devices.devices;
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].name, "cpu:0");
  EXPECT_EQ(devices[0].threads, 1);
  EXPECT_EQ(devices[0].line, 4);
  EXPECT_EQ(devices[1].name, "cuda:1");
  EXPECT_EQ(devices[1].memory_bytes, int64_t{3} << 29);
  EXPECT_EQ(devices[1].line, 5);
  EXPECT_EQ(devices[2].name, "cpu:7");
  EXPECT_EQ(devices[2].threads, 4);
  EXPECT_EQ(devices[2].memory_bytes, 1000000);
  EXPECT_EQ(devices[2].line, 7);
}

TEST(ConfigTest, GpusTakeTheirOwnKindOrTheSimulationsAndOnePrecision) {
  const Config defaults = ParseConfig(kMinimal, "defaults.yaml");
  EXPECT_EQ(defaults.simulation.gpu_kind, "h200");
  EXPECT_EQ(defaults.simulation.precision, sim::Precision::kFp32);
  const Config config = ParseConfig(std::string(kMinimal) +
                                        "devices:\n"
                                        "  - {name: cuda:0, kind: h100-sxm}\n"
                                        "  - cuda:1\n"
                                        "  - cpu:0\n"
                                        "simulation:\n"
                                        "  gpu_link: nvlink\n"
                                        "  gpu_kind: a100-80gb-sxm\n"
                                        "  precision: bf16\n",
                                    "kinds.yaml");
  const std::vector<DeviceConfig>& devices = config.devices.devices;
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].gpu_kind, "h100-sxm");
  EXPECT_EQ(devices[1].gpu_kind, "");  // simulation.gpu_kind's
  EXPECT_EQ(devices[2].gpu_kind, "");
  EXPECT_EQ(config.simulation.gpu_kind, "a100-80gb-sxm");
  EXPECT_EQ(config.simulation.precision, sim::Precision::kBf16);
  EXPECT_EQ(defaults.simulation.gpu_efficiency, sim::GpuEfficiency::kPeak);
  EXPECT_EQ(ParseConfig(std::string(kMinimal) + "simulation:\n  gpu_efficiency: achieved\n",
                        "achieved.yaml")
                .simulation.gpu_efficiency,
            sim::GpuEfficiency::kAchieved);
  for (const char* precision : {"fp32", "tf32", "bf16", "fp16"}) {
    EXPECT_EQ(sim::ToString(ParseConfig(std::string(kMinimal) +
                                            "simulation:\n  precision: " + precision + "\n",
                                        "precision.yaml")
                                .simulation.precision),
              precision);
  }
}

TEST(ConfigTest, RelativeOutputDirectoryFollowsTheConfigFile) {
  const TempFile file("output.yaml", std::string(kMinimal) + "output:\n  directory: out/x\n");
  EXPECT_EQ(LoadConfig(file.path()).output.directory, file.path().parent_path() / "out" / "x");
  const TempFile absolute("absolute.yaml",
                          std::string(kMinimal) + "output:\n  directory: /srv/runs\n");
  EXPECT_EQ(LoadConfig(absolute.path()).output.directory, "/srv/runs");
}

TEST(ConfigTest, ClusterKeyFileFollowsTheConfigFileAndTheStoreItsAddress) {
  const TempFile file("cluster.yaml",
                      std::string(kMinimal) +
                          "cluster:\n  workers: 2\n  address: host0\n  key_file: keys/c.key\n"
                          "  listen_address: 0.0.0.0\n");
  const Config config = LoadConfig(file.path());
  EXPECT_EQ(config.cluster.key_file, file.path().parent_path() / "keys" / "c.key");
  EXPECT_EQ(config.cluster.listen_address, "0.0.0.0");
  EXPECT_EQ(config.cluster.address, "host0");
  EXPECT_TRUE(LoadConfig(TempFile("plain.yaml", kMinimal).path()).cluster.key_file.empty());
}

TEST(ParseByteSizeTest, AcceptsCountsAndUnits) {
  EXPECT_EQ(ParseByteSize("0"), 0);
  EXPECT_EQ(ParseByteSize("1000000"), 1000000);
  EXPECT_EQ(ParseByteSize("512B"), 512);
  EXPECT_EQ(ParseByteSize("2KB"), 2000);
  EXPECT_EQ(ParseByteSize("3MB"), 3000000);
  EXPECT_EQ(ParseByteSize("1.5GB"), 1500000000);
  EXPECT_EQ(ParseByteSize("1KiB"), 1024);
  EXPECT_EQ(ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(ParseByteSize("4GiB"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("4 GiB"), int64_t{4} << 30);
  EXPECT_EQ(ParseByteSize("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(ParseByteSize("2TiB"), int64_t{2} << 40);
  EXPECT_EQ(ParseByteSize("9223372036854775807"), INT64_MAX);
}

TEST(ParseByteSizeTest, RejectsMalformedSizes) {
  for (const char* bad :
       {"", "GiB", "lots", "-1", "-1GiB", "4gib", "4 ", "4  GiB", "4GiBs", "1.5", "1.5B", "1..5GiB",
        ".5GiB", "5.GiB", "1e9", "0x10", "9223372036854775808", "8388608TiB", "10000000000GB"}) {
    EXPECT_EQ(ParseByteSize(bad), std::nullopt) << "'" << bad << "'";
  }
}

// A config that must be rejected, and what the message must say.
struct BadCase {
  const char* name;
  std::string yaml;
  int line;
  const char* key_path;
  const char* message;
};

class BadConfigTest : public testing::TestWithParam<BadCase> {};

TEST_P(BadConfigTest, ReportsFileLineKeyAndReason) {
  const BadCase& bad = GetParam();
  try {
    ParseConfig(bad.yaml, "bad.yaml");
    FAIL() << "accepted:\n" << bad.yaml;
  } catch (const ConfigError& error) {
    const std::string what = error.what();
    EXPECT_EQ(error.file(), "bad.yaml");
    EXPECT_EQ(error.line(), bad.line) << what;
    EXPECT_EQ(error.key_path(), bad.key_path) << what;
    EXPECT_TRUE(Contains(what, "bad.yaml:" + std::to_string(bad.line) + ":")) << what;
    if (*bad.key_path != '\0') {
      EXPECT_TRUE(Contains(what, std::string(": ") + bad.key_path + ": ")) << what;
    }
    EXPECT_TRUE(Contains(what, bad.message)) << what;
  }
}

const std::string kM = kMinimal;

INSTANTIATE_TEST_SUITE_P(
    Cases, BadConfigTest,
    testing::Values(
        BadCase{
            "UnknownTopLevelKey", kM + "foo: 1\n", 3, "foo",
            "unknown key 'foo'; expected one of: model, devices, measurement, search, simulation, "
            "cluster, output"},
        BadCase{"ClusterPortOutOfRange", kM + "cluster:\n  port: 70000\n", 4, "cluster.port",
                "70000 is not a TCP port (0 to 65535)"},
        BadCase{"ClusterNegativeWorkers", kM + "cluster:\n  workers: -1\n", 4, "cluster.workers",
                "must be >= 0, got -1"},
        BadCase{"HostsNegativeGpus", kM + "simulation:\n  gpus_per_host: -8\n", 4,
                "simulation.gpus_per_host", "must be >= 0, got -8"},
        BadCase{"UnknownNestedKey", kM + "  lenet:\n    hiden: 3\n", 4, "model.lenet.hiden",
                "unknown key 'hiden'; expected one of: image_size, conv1_channels"},
        BadCase{"DuplicateKey", kM + "  builtin: lenet\n", 3, "model.builtin",
                "duplicate key; first given on line 2"},
        BadCase{"IntegerIsText", kM + "  batch_size: abc\n", 3, "model.batch_size",
                "expected an integer, got 'abc'"},
        BadCase{"IntegerIsFraction", kM + "measurement:\n  warmup_steps: 2.5\n", 4,
                "measurement.warmup_steps", "expected an integer, got '2.5'"},
        BadCase{"IntegerIsMissing", kM + "  batch_size:\n", 3, "model.batch_size",
                "expected an integer, got nothing"},
        BadCase{"IntegerOverflows", kM + "search:\n  policy_steps: 99999999999\n", 4,
                "search.policy_steps", "'99999999999' is out of range"},
        BadCase{"NegativeSeed", kM + "search:\n  seed: -1\n", 4, "search.seed",
                "expected a non-negative integer, got '-1'"},
        BadCase{"NumberIsText", kM + "  learning_rate: fast\n", 3, "model.learning_rate",
                "expected a number, got 'fast'"},
        BadCase{"NumberIsNaN", kM + "search:\n  max_wall_seconds: nan\n", 4,
                "search.max_wall_seconds", "expected a number, got 'nan'"},
        BadCase{"SectionIsScalar", "model: lenet\n", 1, "model", "expected a mapping, got 'lenet'"},
        BadCase{"SectionIsList", kM + "search:\n  - 1\n", 3, "search",
                "expected a mapping, got a list"},
        BadCase{"MissingModel", "# no model\nsearch:\n  seed: 3\n", 2, "",
                "missing required key 'model'"},
        BadCase{"MissingBuiltin", "search:\n  seed: 3\nmodel:\n  batch_size: 8\n", 3, "model",
                "missing required key 'builtin'"},
        BadCase{"UnknownBuiltin", "model:\n  builtin: resnet\n", 2, "model.builtin",
                "unknown model 'resnet'; known models: lenet"},
        BadCase{"UnknownEvaluator", kM + "search:\n  evaluator: guess\n", 4, "search.evaluator",
                "unknown evaluator 'guess'"},
        BadCase{"OddHiddenSize", kM + "search:\n  hidden_size: 63\n", 4, "search.hidden_size",
                "must be even"},
        BadCase{"PolicyIsNotABool", kM + "search:\n  policy: maybe\n", 4, "search.policy",
                "expected true or false"},
        BadCase{"NeitherPolicyNorRefinement",
                kM + "search:\n  policy: false\n  refinement: false\n", 4, "search.policy",
                "the search needs the policy or refinement (or both)"},
        BadCase{"ReplicasNotAList", kM + "search:\n  replicas: 4\n", 4, "search.replicas",
                "expected a non-empty list of replica counts"},
        BadCase{"ZeroReplicas", kM + "search:\n  replicas: [1, 0]\n", 4, "search.replicas[1]",
                "must be in [1, 4096], got 0"},
        BadCase{"UnknownGrouping", kM + "search:\n  grouping: learned\n", 4, "search.grouping",
                "unknown grouping 'learned'; expected 'op', 'colocate' or 'coarsen'"},
        BadCase{"ZeroMaxGroups", kM + "search:\n  max_groups: 0\n", 4, "search.max_groups",
                "must be >= 1, got 0"},
        BadCase{"ZeroPpoEpochs", kM + "search:\n  ppo_epochs: 0\n", 4, "search.ppo_epochs",
                "must be >= 1, got 0"},
        BadCase{"NegativeBatch", kM + "  batch_size: -5\n", 3, "model.batch_size",
                "must be >= 1, got -5"},
        BadCase{"ZeroLearningRate", kM + "  learning_rate: 0\n", 3, "model.learning_rate",
                "must be > 0, got 0"},
        BadCase{"NegativeWarmup", kM + "measurement:\n  warmup_steps: -1\n", 4,
                "measurement.warmup_steps", "must be >= 0, got -1"},
        BadCase{"ZeroTimedSteps", kM + "measurement:\n  timed_steps: 0\n", 4,
                "measurement.timed_steps", "must be >= 1, got 0"},
        BadCase{"NegativeTimeLimit", kM + "measurement:\n  time_limit_seconds: -2\n", 4,
                "measurement.time_limit_seconds", "must be > 0, got -2"},
        BadCase{"OneVerifyRound", kM + "search:\n  verify_rounds: 1\n", 4, "search.verify_rounds",
                "must be >= 2, got 1"},
        BadCase{"FewerMaxRoundsThanRounds",
                kM + "search:\n  verify_rounds: 5\n  verify_max_rounds: 4\n", 5,
                "search.verify_max_rounds", "must be >= 5, got 4"},
        BadCase{"ZeroCheckpointEvery", kM + "search:\n  seed: 2\n  checkpoint_every: 0\n", 5,
                "search.checkpoint_every", "must be >= 1, got 0"},
        BadCase{"TinyImage", kM + "  lenet:\n    image_size: 8\n", 4, "model.lenet.image_size",
                "must be >= 16, got 8"},
        BadCase{"ZeroHidden", kM + "  lenet:\n    hidden: 0\n", 4, "model.lenet.hidden",
                "must be >= 1, got 0"},
        BadCase{"EmptyOutputDirectory", kM + "output:\n  directory: ''\n", 4, "output.directory",
                "must not be empty"},
        BadCase{"BadDeviceName", kM + "devices:\n  - cpu:0\n  - gpu:1\n", 5, "devices[1]",
                "invalid device name 'gpu:1'; expected 'cpu:N' or 'cuda:N'"},
        BadCase{"BadDeviceNameInMapping", kM + "devices:\n  - name: cuda:x\n", 4, "devices[0].name",
                "invalid device name 'cuda:x'"},
        BadCase{"DuplicateDevice", kM + "devices:\n  - cpu:0\n  - name: cpu:0\n    threads: 2\n", 5,
                "devices[1].name", "duplicate device 'cpu:0' on line 5; first declared on line 4"},
        BadCase{"EmptyDeviceList", kM + "devices: []\n", 3, "devices", "at least one device"},
        BadCase{"DevicesIsOtherWord", kM + "devices: all\n", 3, "devices",
                "expected a list of devices or 'auto', got 'all'"},
        BadCase{"DeviceIsList", kM + "devices:\n  - [cpu:0]\n", 4, "devices[0]",
                "expected a device name like 'cpu:0' or a mapping with 'name', got a list"},
        BadCase{"DeviceWithoutName", kM + "devices:\n  - threads: 2\n", 4, "devices[0]",
                "missing required key 'name'"},
        BadCase{"UnknownDeviceKey", kM + "devices:\n  - name: cpu:0\n    cores: 2\n", 5,
                "devices[0].cores", "unknown key 'cores'; expected one of: name, threads, memory"},
        BadCase{"ZeroThreads", kM + "devices:\n  - name: cpu:0\n    threads: 0\n", 5,
                "devices[0].threads", "must be >= 1, got 0"},
        BadCase{"BadMemory", kM + "devices:\n  - name: cuda:0\n    memory: lots\n", 5,
                "devices[0].memory", "expected a byte size like '4GiB', '512MiB' or a byte count"},
        BadCase{"ZeroMemory", kM + "devices:\n  - name: cuda:0\n    memory: 0GiB\n", 5,
                "devices[0].memory", "must be > 0, got 0"},
        BadCase{"UnknownGpuKind", kM + "simulation:\n  gpu_kind: h100\n", 4, "simulation.gpu_kind",
                "unknown GPU kind 'h100'; known kinds: a100-40gb-sxm, a100-80gb-sxm, "
                "a100-80gb-pcie, h100-sxm, h100-pcie, h200, l40s"},
        BadCase{"UnknownDeviceGpuKind", kM + "devices:\n  - {name: cuda:0, kind: v100}\n", 4,
                "devices[0].kind", "unknown GPU kind 'v100'; known kinds: a100-40gb-sxm"},
        BadCase{"GpuKindOfACpu", kM + "devices:\n  - name: cpu:0\n    kind: h200\n", 5,
                "devices[0].kind", "a GPU kind for 'cpu:0', which is not a GPU (cuda:N)"},
        BadCase{"DeviceGpuKindWithoutNvlink",
                kM + "devices:\n  - {name: cuda:0, kind: l40s}\nsimulation:\n  gpu_link: nvlink\n",
                4, "devices[0].kind",
                "GPU kind 'l40s' has no NVLink, but simulation.gpu_link is 'nvlink'"},
        BadCase{"UnknownPrecision", kM + "simulation:\n  precision: fp64\n", 4,
                "simulation.precision",
                "unknown precision 'fp64'; expected 'fp32', 'tf32', 'bf16' or 'fp16'"},
        BadCase{"UnknownGpuEfficiency", kM + "simulation:\n  gpu_efficiency: measured\n", 4,
                "simulation.gpu_efficiency",
                "unknown GPU efficiency 'measured'; expected 'peak' or 'achieved'"},
        BadCase{"SyntaxError", kM + "  batch_size: [1, 2\nsearch: {}\n", 4, "", "invalid YAML"},
        BadCase{"TabIndentation", kM + "search:\n\tseed: 1\n", 4, "", "invalid YAML"},
        BadCase{"TwoDocuments", kM + "---\nsearch: {}\n", 3, "",
                "a second YAML document starts here; expected exactly one"},
        // yaml-cpp 0.7's LoadAll would allocate forever on these.
        BadCase{"StrayCommaFirst", ",\n" + kM, 1, "", "invalid YAML: unexpected ','"},
        BadCase{"StrayCommaAfterList", "- a\n,\n", 2, "", "invalid YAML: unexpected ','"},
        BadCase{"EmptyText", "", 1, "", "no settings found"},
        BadCase{"OnlyComments", "# nothing here\n\n", 1, "", "no settings found"},
        BadCase{"OnlyDocumentMarker", "---\n", 1, "", "no settings found"},
        BadCase{"TopLevelIsList", "- model\n- devices\n", 1, "",
                "the top level must be a mapping of sections, got a list"},
        BadCase{"TopLevelIsScalar", "hello\n", 1, "",
                "the top level must be a mapping of sections, got 'hello'"}),
    [](const testing::TestParamInfo<BadCase>& info) { return info.param.name; });

TEST(LoadConfigTest, NonexistentFile) {
  const fs::path missing = fs::temp_directory_path() / "placer_config_test_missing.yaml";
  try {
    LoadConfig(missing);
    FAIL() << "loaded a missing file";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.file(), missing.string());
    EXPECT_EQ(error.line(), 0);
    EXPECT_EQ(std::string(error.what()),
              missing.string() + ": cannot read: No such file or directory");
  }
}

TEST(LoadConfigTest, DirectoryIsNotAConfig) {
  const fs::path directory = fs::temp_directory_path();
  try {
    LoadConfig(directory);
    FAIL() << "loaded a directory";
  } catch (const ConfigError& error) {
    EXPECT_TRUE(Contains(error.what(), "cannot read: Is a directory")) << error.what();
  }
}

TEST(LoadConfigTest, EmptyFile) {
  const TempFile file("empty.yaml", "");
  try {
    LoadConfig(file.path());
    FAIL() << "loaded an empty file";
  } catch (const ConfigError& error) {
    EXPECT_EQ(error.file(), file.path().string());
    EXPECT_TRUE(Contains(error.what(), file.path().string() + ":1:1: no settings found"))
        << error.what();
  }
}

TEST(LoadConfigTest, ErrorsNameTheFileAndLine) {
  const TempFile file("bad_batch.yaml", std::string(kMinimal) + "  batch_size: 0\n");
  try {
    LoadConfig(file.path());
    FAIL() << "accepted batch_size 0";
  } catch (const ConfigError& error) {
    EXPECT_EQ(std::string(error.what()),
              file.path().string() + ":3:3: model.batch_size: must be >= 1, got 0");
  }
}

TEST(LoadConfigTest, BinaryFilesAreErrors) {
  const std::string png("\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\0\x10", 20);
  const std::string elf(
      "\x7f"
      "ELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0>\0",
      20);
  for (const auto& [name, bytes, line] : {std::tuple{"png", png, 3}, std::tuple{"elf", elf, 1}}) {
    const TempFile file(name, bytes);
    try {
      LoadConfig(file.path());
      ADD_FAILURE() << "accepted " << name;
    } catch (const ConfigError& error) {
      EXPECT_EQ(error.line(), line) << error.what();
      EXPECT_TRUE(Contains(error.what(), file.path().string() + ":" + std::to_string(line) + ":"))
          << error.what();
      EXPECT_TRUE(Contains(error.what(), "invalid YAML: ")) << error.what();
    }
  }
}

TEST(LoadConfigTest, RandomBytesAreAnErrorNotACrash) {
  std::mt19937 random(42);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(1 + random() % 512, '\0');
    for (char& byte : bytes) byte = static_cast<char>(random() % 256);
    const TempFile file("garbage.bin", bytes);
    try {
      LoadConfig(file.path());
      ADD_FAILURE() << "accepted garbage in trial " << trial;
    } catch (const ConfigError& error) {
      EXPECT_TRUE(Contains(error.what(), file.path().string())) << error.what();
    }
  }
}

// Whether configs/SCHEMA.md's block between `begin_marker`'s line and `end_marker` is `generated`
// (PLACER_REGENERATE_SCHEMA=1 rewrites it instead).
void ExpectSchemaBlock(const std::string& begin_marker, const std::string& end_marker,
                       const std::string& generated) {
  const fs::path file = fs::path(PLACER_SOURCE_DIR) / "configs" / "SCHEMA.md";
  std::ifstream in(file);
  std::stringstream buffer;
  buffer << in.rdbuf();
  std::string text = buffer.str();
  const size_t begin = text.find('\n', text.find(begin_marker));
  const size_t end = text.find(end_marker);
  ASSERT_NE(text.find(begin_marker), std::string::npos) << file << " has no " << begin_marker;
  ASSERT_NE(end, std::string::npos) << file << " has no " << end_marker;
  if (std::getenv("PLACER_REGENERATE_SCHEMA")) {
    text.replace(begin + 1, end - begin - 1, generated);
    std::ofstream(file) << text;
    GTEST_SKIP() << "rewrote the generated block of " << file;
  }
  EXPECT_EQ(text.substr(begin + 1, end - begin - 1), generated)
      << file << " is out of date; regenerate it with PLACER_REGENERATE_SCHEMA=1 "
      << "build/tests/config_test --gtest_filter=SchemaTest.*";
}

// configs/SCHEMA.md documents the model section from the same registry the reader reads: its
// generated block is what ModelSchemaMarkdown() makes now, so no model name, default or bound is
// written by hand there.
TEST(SchemaTest, ModelSectionOfTheSchemaIsTheRegistrys) {
  const std::string generated = ModelSchemaMarkdown();
  ExpectSchemaBlock("<!-- generated:", "<!-- end of the generated block -->", generated);
  // Every built-in model has a section, and the reader knows exactly those.
  for (std::string_view name : graph::BuiltinModelNames()) {
    EXPECT_TRUE(Contains(generated, fmt::format("### `model.{}`", name))) << name;
    EXPECT_NO_THROW(ParseConfig(fmt::format("model:\n  builtin: {}\n", name), "c.yaml")) << name;
  }
}

// configs/SCHEMA.md's search table is the search section's declarations (SearchConfig::Fields and
// search::SearchOptions::Fields): every key the reader accepts has its row, none is written by
// hand.
TEST(SchemaTest, SearchTableOfTheSchemaIsTheDeclarations) {
  const std::string generated = SearchSchemaMarkdown();
  ExpectSchemaBlock("<!-- generated search:", "<!-- end of the generated search table -->",
                    generated);
  for (std::string_view key : {"evaluator", "max_wall_seconds", "replicas", "pipeline_replicas",
                               "policy_file", "edit_proposer", "verify_max_rounds", "max_groups"}) {
    EXPECT_TRUE(Contains(generated, fmt::format("| `{}` |", key))) << key;
  }
}

// The keys of a generated table's rows, in order.
std::vector<std::string> RowKeys(const std::string& table) {
  std::vector<std::string> keys;
  std::stringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("| `")) keys.push_back(line.substr(3, line.find('`', 3) - 3));
  }
  return keys;
}

// The keys the reader accepts where `yaml` gives the unknown key `no_such_key`, from its message.
std::vector<std::string> AcceptedKeys(const std::string& yaml) {
  try {
    ParseConfig(yaml, "keys.yaml");
  } catch (const ConfigError& error) {
    const std::string what = error.what();
    const std::string list = "expected one of: ";
    EXPECT_TRUE(Contains(what, "unknown key 'no_such_key'")) << what;
    std::vector<std::string> keys;
    std::stringstream names(what.substr(what.find(list) + list.size()));
    for (std::string name; std::getline(names, name, ',');) {
      keys.push_back(name.substr(name.find_first_not_of(' ')));
    }
    return keys;
  }
  ADD_FAILURE() << "accepted:\n" << yaml;
  return {};
}

// configs/SCHEMA.md's tables of devices, measurement, simulation, cluster and output are their
// structs' declarations (placer/config/sections.cc): each generated block is what
// SectionSchemaMarkdown() makes now, and its rows are exactly the keys the reader accepts, in
// the same order.
TEST(SchemaTest, SectionTablesOfTheSchemaAreTheDeclarations) {
  for (std::string_view section : kGeneratedSections) {
    SCOPED_TRACE(std::string(section));
    const std::string generated = SectionSchemaMarkdown(section);
    ExpectSchemaBlock(fmt::format("<!-- generated {}:", section),
                      fmt::format("<!-- end of the generated {} table -->", section), generated);
    const std::string yaml =
        section == "devices"
            ? std::string(kMinimal) + "devices:\n  - {name: cpu:0, no_such_key: 1}\n"
            : fmt::format("{}{}:\n  no_such_key: 1\n", kMinimal, section);
    EXPECT_EQ(RowKeys(generated), AcceptedKeys(yaml));
  }
  EXPECT_THROW(SectionSchemaMarkdown("search"), std::invalid_argument);
}

// The GPU kinds' table is their registry's (runtime/sim/gpu_kinds.cc): a new kind is a row there.
TEST(SchemaTest, GpuKindsTableOfTheSchemaIsTheRegistrys) {
  const std::string generated = GpuKindSchemaMarkdown();
  ExpectSchemaBlock("<!-- generated gpu kinds:", "<!-- end of the generated gpu kinds -->",
                    generated);
  for (const sim::GpuKind& kind : sim::GpuKinds()) {
    EXPECT_TRUE(Contains(generated, fmt::format("| `{}` |", kind.name))) << kind.name;
  }
}

}  // namespace
}  // namespace placer::config

namespace placer::config {
namespace {

// configs/SCHEMA.md's search table states the defaults the search's options struct gives
// (placer/search_options.h, through SearchConfig): one source, and the documentation follows it.
TEST(ConfigTest, TheSchemaStatesTheSearchOptionsDefaults) {
  const search::SearchOptions d = SearchConfig{}.options;
  const std::map<std::string, double> numbers = {{"policy_steps", d.policy_steps},
                                                 {"samples_per_step", d.learner.samples_per_step},
                                                 {"max_evaluations", d.max_evaluations},
                                                 {"max_wall_seconds", d.max_wall_seconds},
                                                 {"seed", static_cast<double>(d.seed)},
                                                 {"checkpoint_every", d.checkpoint_every},
                                                 {"failing_step_seconds", d.failing_step_seconds},
                                                 {"learning_rate", d.learner.learning_rate},
                                                 {"entropy_weight", d.learner.entropy_weight},
                                                 {"ppo_epochs", d.learner.epochs},
                                                 {"hidden_size", d.policy.hidden_size},
                                                 {"temperature", d.policy.temperature},
                                                 {"tanh_clip", d.policy.tanh_clip},
                                                 {"refinement_rounds", d.final_refine_rounds},
                                                 {"edit_screening", d.edit_screening}};
  const std::map<std::string, std::string> words = {
      {"policy", d.use_policy ? "true" : "false"},
      {"refinement", d.use_refinement ? "true" : "false"},
      {"edit_proposer",
       std::string(search::kEditProposalNames[static_cast<size_t>(d.edit_proposal)])},
      {"budget_split", std::string(search::kBudgetSplitNames[static_cast<size_t>(d.budget_split)])},
      {"policy_network",
       std::string(search::kPolicyKindNames[static_cast<size_t>(d.policy.kind)])}};
  std::ifstream in(fs::path(PLACER_SOURCE_DIR) / "configs" / "SCHEMA.md");
  std::string line;
  bool in_search = false;
  std::set<std::string> seen;
  while (std::getline(in, line)) {
    if (line.starts_with("## ")) in_search = line == "## `search`";
    if (!in_search || !line.starts_with("| `")) continue;
    std::vector<std::string> cells;
    std::stringstream row(line.substr(1));
    for (std::string cell; std::getline(row, cell, '|');) {
      cells.push_back(cell.substr(cell.find_first_not_of(' '),
                                  cell.find_last_not_of(' ') - cell.find_first_not_of(' ') + 1));
    }
    ASSERT_GE(cells.size(), 3u) << line;
    const std::string key = cells[0].substr(1, cells[0].size() - 2);
    std::string value = cells[2];
    if (value.size() >= 2 && value.front() == '`' && value.back() == '`') {
      value = value.substr(1, value.size() - 2);
    }
    if (numbers.count(key) > 0) {
      EXPECT_DOUBLE_EQ(std::stod(value), numbers.at(key)) << "search." << key << ": " << line;
      seen.insert(key);
    } else if (words.count(key) > 0) {
      EXPECT_EQ(value, words.at(key)) << "search." << key;
      seen.insert(key);
    }
  }
  EXPECT_EQ(seen.size(), numbers.size() + words.size()) << "a default the schema does not state";
}

}  // namespace
}  // namespace placer::config
