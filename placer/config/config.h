// The run configuration: what `placer` reads from a YAML file. Every section's keys are declared
// once, in its struct's Fields() (placer/config/sections.cc, search_section.cc): key, default (the
// member's initialiser), bound and meaning; the reader and configs/SCHEMA.md's tables visit them.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builtin_models.h"
#include "graph/evaluator.h"
#include "graph/grouping.h"
#include "placer/config/config_visitor.h"
#include "placer/search_options.h"
#include "runtime/sim/gpu_kinds.h"

namespace placer::config {

// The closed sets of values a config names, checked when the file is read (each has one table of
// names in config.cc, which ToString and the reader share).
// simulation.gpu_link: the link between GPUs in the roofline model.
enum class GpuLink {
  kPcie,    // "pcie": PCIe 4.0 x16
  kNvlink,  // "nvlink": NVLink 4
};
// In enum order (the config's simulation.gpu_link values).
inline constexpr std::array<std::string_view, 2> kGpuLinkNames = {"pcie", "nvlink"};
std::string_view ToString(GpuLink link);

// Raised for any problem in a config file. what() reads "FILE:LINE:COLUMN: KEY.PATH: message", so a
// user can jump straight to the culprit.
class ConfigError : public std::runtime_error {
 public:
  ConfigError(std::string file, int line, int column, std::string key_path, std::string message);
  const std::string& file() const { return file_; }
  int line() const { return line_; }
  const std::string& key_path() const { return key_path_; }

 private:
  std::string file_;
  int line_;
  std::string key_path_;
};

// model: which network's training step is placed.
struct ModelConfig {
  // model.builtin: name of a built-in model (graph/builtin_models.h).
  std::string builtin = "lenet";
  // model.onnx: an ONNX file instead (exactly one of builtin and onnx is given; builtin is then
  // empty), resolved against the config file's folder. model.batch_size sets its batch axis.
  std::filesystem::path onnx;
  // The model's name in reports: the built-in name, or the ONNX file's name without extension.
  std::string name() const { return onnx.empty() ? builtin : onnx.stem().string(); }
  // The built-in model's options, read from its section model.<builtin> over the defaults of its
  // options struct (the registry's, graph/builtin_models.h); null for an ONNX model.
  std::shared_ptr<const graph::ModelOptions> options = graph::FindBuiltinModel("lenet")->defaults();
  // The options struct of the built-in model, when it is a T; throws std::logic_error otherwise.
  template <typename T>
  const T& options_as() const {
    const T* typed = options ? options->As<T>() : nullptr;
    if (!typed) throw std::logic_error("model.options is not of the type asked for");
    return *typed;
  }
  // model.batch_size; by default the model's own: the built-in options struct's, or the batch an
  // ONNX file fixes (LoadConfig reads it; ParseConfig leaves 0 for an ONNX model without one).
  int64_t batch_size = 256;
  double learning_rate = 0.2;  // model.learning_rate (SGD)
  uint64_t init_seed = 0;      // model.init_seed: seed of the weight initialisation
  // model.replicas: R > 1 places R replicas of the model, each on 1/R of the minibatch, with
  // gradients summed across replicas, so that data parallelism and hybrids of data and model
  // parallelism are placements like any other.
  int replicas = 1;

  // Which model: model.builtin and model.onnx. The reader visits them first, then chooses by
  // hand between the two (exactly one; the choice decides which model.<builtin> section may be
  // given, a mapping read into that model's options struct, and batch_size's default).
  void SourceFields(ConfigVisitor& v);
  // The keys read after that choice (batch_size, learning_rate, init_seed, replicas), and the
  // rule across them.
  void Fields(ConfigVisitor& v);
  std::optional<graph::FieldError> Check() const;
};

// One entry of `devices:`.
struct DeviceConfig {
  std::string name;                     // "cpu:N" or "cuda:N"
  int threads = 1;                      // intra-op threads (CPU workers only)
  std::optional<int64_t> memory_bytes;  // capacity; accepts "4GiB", "512MiB", or a byte count
  // devices[i].kind: a GPU's kind (runtime/sim/gpu_kinds.h, e.g. "h100-sxm") for the roofline
  // model and an absent GPU's capacity; empty: simulation.gpu_kind. GPUs only.
  std::string gpu_kind;
  int line = 0;  // where it was declared, for later error messages

  // The keys of a device given as a mapping; `link` is simulation.gpu_link (kind's NVLink rule).
  // The list itself, a plain entry (`- cpu:0`), the name's form and its uniqueness in the list
  // are read by hand (config.cc's ReadDevices).
  void Fields(ConfigVisitor& v, GpuLink link = GpuLink::kPcie);
};

// devices: either the string "auto" or a list of DeviceConfig (read by hand: a list, or a word).
// What configs/SCHEMA.md says of that shape, above the entries' table.
extern const std::string_view kDevicesShape;
struct DevicesConfig {
  bool automatic = true;
  std::vector<DeviceConfig> devices;  // empty when automatic
};

// measurement: how a placement is timed.
struct MeasurementConfig {
  int warmup_steps = 5;              // measurement.warmup_steps
  int timed_steps = 5;               // measurement.timed_steps
  double time_limit_seconds = 60.0;  // measurement.time_limit_seconds, per placement
  void Fields(ConfigVisitor& v);
};

// search: what the placement search may do, and its budgets (placer/search.h describes the
// search). Each key is declared once, in Fields(): the search's own options' keys in
// search::SearchOptions::Fields() (placer/search_options.h, which also gives their defaults), the
// config's own below; the reader, its key list and configs/SCHEMA.md's search table visit them.
struct SearchConfig {
  // The search's options as the config sets them (the paths as written, relative to the config's
  // directory; setup::SearchOptionsFor resolves them and derives the search's own wall budget).
  search::SearchOptions options;
  // search.evaluator: "measured" (learn on a simulator profiled on these devices, then measure the
  // best candidates and the baselines side by side) or "simulated" (the simulator throughout).
  graph::EvaluatorKind evaluator = graph::EvaluatorKind::kMeasured;
  // search.replicas: the replica counts searched (data parallelism and hybrids); empty: 1, 2, 4,
  // ... up to the number of devices, and that number.
  std::vector<int> replicas;
  // search.micro_batches: the micro-batch counts searched with one replica (pipelines under GPipe
  // and 1F1B); empty: 1, 2, 4, 8 (up to the device count, where more than 8) that divide the batch
  // and keep M copies of the step within 120k ops (search::ActionSpace::kMaxPipelineOps); [1]: no
  // pipelines.
  std::vector<int> micro_batches;
  // search.pipeline_replicas: the replica counts whose replicas may also be pipelines (R replicas
  // x M micro-batches, each M of micro_batches above 1); absent: the replica counts from 2 up to
  // half the devices, within the same 120k ops of R x M copies; [1]: no replicated pipelines.
  std::optional<std::vector<int>> pipeline_replicas;
  // search.tensor_ways: the tensor-parallel ways T searched, each with every replica count that T
  // divides (R / T replicas of T shards); absent: 2, 4, ... within a host
  // (simulation.gpus_per_host), each over all devices only, for a simulated search, where the
  // model has linear pairs that split T ways; [1]: none. Named, a measured search runs them too;
  // a cluster's workers do not.
  std::optional<std::vector<int>> tensor_ways;
  int verify_candidates = 5;  // search.verify_candidates: best candidates re-measured (measured)
  // search.verify_rounds: interleaved rounds of every placement in the closing side-by-side
  // (measured); search.verify_max_rounds: the budget, the rounds of the contenders while the
  // fastest is statistically tied with another (placer/paired_comparison.h).
  int verify_rounds = 3;
  int verify_max_rounds = 10;
  // search.grouping: what the policy places, "op" (every forward op), "colocate" (the 2017
  // co-location rules) or "coarsen" (co-location, then merging by cost down to max_groups).
  graph::GroupingMethod grouping = graph::GroupingMethod::kCoarsen;
  int max_groups = 256;  // search.max_groups: most groups "coarsen" leaves

  // Every key of search: (placer/config/search_section.cc), and the rules across them.
  void Fields(search::OptionVisitor& v);
  std::optional<graph::FieldError> Check() const;
};

// simulation: the cost model of the simulated evaluator.
struct SimulationConfig {
  // simulation.profile: a cost profile written by `placer profile`, relative to the config file;
  // empty: the analytic roofline model.
  std::filesystem::path profile;
  // simulation.gpu_link: "pcie" (PCIe 4.0 x16) or "nvlink" (NVLink 4) between GPUs, for the
  // roofline model.
  GpuLink gpu_link = GpuLink::kPcie;
  // simulation.gpu_kind: the kind of every GPU without devices[i].kind (runtime/sim/gpu_kinds.h).
  std::string gpu_kind = std::string(sim::kDefaultGpuKind);
  // simulation.precision: the arithmetic of matmul- and convolution-class ops in the roofline
  // model (fp32, tf32, or bf16/fp16 mixed precision). The executor itself trains in fp32.
  sim::Precision precision = sim::Precision::kFp32;
  // simulation.gpu_efficiency: GPU ops at the data sheets' peaks ("peak") or at what measured
  // kernels reach of them ("achieved"; runtime/sim/gpu_kinds.h).
  sim::GpuEfficiency gpu_efficiency = sim::GpuEfficiency::kPeak;
  // simulation.gpus_per_host: GPU cuda:i is on host i / gpus_per_host (0: one host), and a copy
  // between hosts crosses a network of simulation.host_link_gbps gigabits per second per
  // direction with simulation.host_link_latency_us microseconds per transfer (roofline model).
  int gpus_per_host = 0;
  double host_link_gbps = 400;
  double host_link_latency_us = 30;
  // simulation.process_hosts: the host of each process of a placement across processes (devices
  // "w<k>/..."): process k is on host process_hosts[k]; empty: process k on host k.
  std::vector<int> process_hosts;
  void Fields(ConfigVisitor& v);
};

// cluster: evaluation workers in other processes (`placer worker`, cluster/worker_pool.h). With
// workers > 0, `search` and `compare` host the rendezvous (a c10d TCPStore at address:port, rank
// 0 of a world of workers + 1) and hand their measured evaluations (and, with search.evaluator:
// simulated, the simulated ones) to the workers, all at once.
struct ClusterConfig {
  int workers = 0;  // cluster.workers: worker processes, ranks 1..workers; 0: none
  // cluster.address: where the workers reach the search (MASTER_ADDR); the store listens there
  std::string address = "127.0.0.1";
  // cluster.listen_address: where the store listens instead ("0.0.0.0": every interface)
  std::string listen_address;
  // cluster.key_file: the key every message is sealed under, shared with the workers (created,
  // mode 0600, when missing); empty: PLACER_CLUSTER_KEY, else a new key per run in the output
  // directory's cluster.key. Relative to the config file's folder.
  std::filesystem::path key_file;
  int port = 29500;  // cluster.port (torchrun's MASTER_PORT default); 0: any free
  double join_timeout_seconds =
      60;  // cluster.join_timeout_seconds: every worker has joined by then
  // cluster.heartbeat_timeout_seconds: a worker silent this long is dropped, its evaluation given
  // to another.
  double heartbeat_timeout_seconds = 10;
  void Fields(ConfigVisitor& v);
  std::optional<graph::FieldError> Check() const;  // the port
};

struct OutputConfig {
  std::filesystem::path directory =
      "runs/default";  // output.directory, relative to the config file
  void Fields(ConfigVisitor& v);
};

struct Config {
  std::filesystem::path source;  // the file it was read from
  ModelConfig model;
  DevicesConfig devices;
  MeasurementConfig measurement;
  SearchConfig search;
  SimulationConfig simulation;
  ClusterConfig cluster;
  OutputConfig output;

  // The kind of the GPU `device`: its devices[i].kind, else simulation.gpu_kind.
  const std::string& GpuKindOf(const DeviceConfig& device) const {
    return device.gpu_kind.empty() ? simulation.gpu_kind : device.gpu_kind;
  }
};

// Reads and checks a config file. Throws ConfigError naming file, key path and line for unknown
// keys, wrong types, missing required fields (model.builtin), out-of-range values, duplicate or
// malformed device names, unreadable, empty or non-YAML files.
Config LoadConfig(const std::filesystem::path& file);

// A config read from `yaml_text` as LoadConfig reads the file `file` (relative paths resolved
// against its folder, an ONNX file's batch read), without reading `file` itself: a worker gets
// its search's config as text.
Config ConfigFromText(const std::string& yaml_text, const std::filesystem::path& file);

// Same, from text (for tests); `file_name` is used in messages. Reads no other file: an ONNX
// model's own batch is left for LoadConfig to read (batch_size 0).
Config ParseConfig(const std::string& yaml_text, const std::string& file_name);

// The model section of configs/SCHEMA.md as the registry and this reader define it: the `model`
// table and one section per built-in model (config_test checks the file against it).
std::string ModelSchemaMarkdown();
// configs/SCHEMA.md's table of the search section, from SearchConfig::Fields().
std::string SearchSchemaMarkdown();
// The sections whose block of configs/SCHEMA.md SectionSchemaMarkdown() makes.
inline constexpr std::array<std::string_view, 5> kGeneratedSections = {
    "devices", "measurement", "simulation", "cluster", "output"};
// configs/SCHEMA.md's block of one of kGeneratedSections, from its struct's Fields() (the devices'
// with kDevicesShape above its table); throws std::invalid_argument for another name.
std::string SectionSchemaMarkdown(std::string_view section);
// configs/SCHEMA.md's table of the GPU kinds (runtime/sim/gpu_kinds.h), one row per kind.
std::string GpuKindSchemaMarkdown();

// Parses "4GiB", "512MiB", "1.5GB", "1000000" into bytes; nullopt when malformed.
std::optional<int64_t> ParseByteSize(const std::string& text);

}  // namespace placer::config
