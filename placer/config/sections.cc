// The keys of the config's sections other than the search (search_section.cc): model, devices,
// measurement, simulation, cluster and output, each declared once here with its bound and
// meaning, its default being the member's initialiser in config.h. The reader (config.cc), its
// key lists and configs/SCHEMA.md's tables (schema_markdown.cc) visit these declarations.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/builtin_models.h"
#include "placer/config/config.h"

namespace placer::config {

std::string_view ToString(GpuLink link) { return kGpuLinkNames.at(static_cast<size_t>(link)); }

void ModelConfig::SourceFields(ConfigVisitor& v) {
  std::vector<std::string> names;
  for (std::string_view name : graph::BuiltinModelNames())
    names.push_back(fmt::format("`{}`", name));
  v.Required("builtin", builtin, "onnx",
             "built-in model whose training step is placed (the registry: "
             "`graph/builtin_models.h`)");
  v.Constraint("builtin", fmt::format("one of: {}", fmt::join(names, ", ")));
  v.Path("onnx", onnx,
         "the model of an ONNX file instead of a built-in one (see [ONNX models](#onnx-models)); a "
         "relative path is relative to the config file's folder");
  v.Constraint("onnx", "an ONNX file; not together with `builtin`");
}

void ModelConfig::Fields(ConfigVisitor& v) {
  v.Int("batch_size", batch_size, 1,
        "examples per training step; for an ONNX file, the extent of axis 0 of every graph input");
  std::map<int64_t, std::vector<std::string>> by_batch;
  for (const graph::ModelEntry& entry : graph::BuiltinModels()) {
    by_batch[entry.defaults()->default_batch_size()].push_back(std::string(entry.name));
  }
  std::vector<std::string> batches;
  for (const auto& [batch, models] : by_batch) {
    batches.push_back(fmt::format("`{}` ({})", batch, fmt::join(models, ", ")));
  }
  v.DefaultText("batch_size", fmt::format("the model's: {}; an ONNX file's own (the batch its "
                                          "inputs fix; required when they leave it dynamic)",
                                          fmt::join(batches, ", ")));
  v.Positive("learning_rate", learning_rate, "SGD step size");
  v.Unsigned("init_seed", init_seed, "seed of the weight initialisation");
  v.Int("replicas", replicas, 1,
        "for `evaluate`, `train`, `profile` and `inspect`: run R replicas of the model, each on "
        "1/R of the minibatch (even shards), gradients all-reduced before the update; replica r's "
        "ops are named `r<r>/<op>`. A placement file's `replicas:` key takes precedence. The "
        "search chooses the replica count itself (`search.replicas`)");
  v.Constraint("replicas", "<= batch_size");
}

std::optional<graph::FieldError> ModelConfig::Check() const {
  // An ONNX model's batch is its file's until LoadConfig reads it (0 here).
  if (batch_size > 0 && replicas > batch_size) {
    return graph::FieldError{
        {"replicas"}, fmt::format("{} replicas cannot share a batch of {}", replicas, batch_size)};
  }
  return std::nullopt;
}

const std::string_view kDevicesShape =
    "Where operations may be placed: either the string `auto` (the default: use what the machine "
    "has) or a non-empty list. Each list entry is either a device name (a plain entry `- cpu:0` "
    "is the same as `- name: cpu:0`) or a mapping of the keys below. Two entries naming the same "
    "device are an error that names both lines.";

void DeviceConfig::Fields(ConfigVisitor& v, GpuLink link) {
  v.Required("name", name, "", "the device");
  v.Constraint("name", "`cpu:N` or `cuda:N` (`^(cpu\\|cuda):[0-9]+$`), unique in the list");
  v.Int("threads", threads, 1, "intra-op threads (CPU workers only)");
  v.ByteSize("memory", memory_bytes, "memory capacity the placer may use on it");
  v.GpuKindName("kind", gpu_kind, {.device = name, .nvlink = link == GpuLink::kNvlink},
                "the GPU's kind for the roofline model (its peaks, memory bandwidth and NVLink) "
                "and, for a simulated GPU this machine does not have, its capacity when `memory` "
                "is not given");
  v.DefaultText("kind", "`simulation.gpu_kind`");
  v.Constraint("kind", "GPUs (`cuda:N`) only; with `simulation.gpu_link: nvlink`, one with NVLink");
}

void MeasurementConfig::Fields(ConfigVisitor& v) {
  v.Int("warmup_steps", warmup_steps, 0, "untimed training steps run first");
  v.Int("timed_steps", timed_steps, 1, "timed training steps per placement");
  v.Positive("time_limit_seconds", time_limit_seconds,
             "give up on a placement whose measurement takes longer");
}

void SimulationConfig::Fields(ConfigVisitor& v) {
  v.Path("profile", profile,
         "per-op times and fitted copy costs measured on the real devices; relative paths are "
         "relative to the config file. Without it, the analytic roofline model (FLOPs / peak, "
         "bytes / bandwidth, per-op overhead) is used: uncalibrated, it is far off on real CPUs "
         "(bench/RESULTS.md, issue 21), and `evaluate --simulate` says so. Ops the profile does "
         "not time (a data-parallel step's `r<r>/<op>` under a profile of the model alone: "
         "profile with `--data-parallel`) fall back to the roofline too");
  v.Constraint("profile", "a file written by `placer profile`");
  v.NamedOneOf("gpu_link", gpu_link, kGpuLinkNames, "link",
               "the link between GPUs in the roofline model: PCIe 4.0 x16 (31.5 GB/s per "
               "direction) or the NVLink of the GPUs' kinds (the default `h200`'s NVLink 4: 450 "
               "GB/s per direction)");
  v.GpuKindName("gpu_kind", gpu_kind, {.nvlink = gpu_link == GpuLink::kNvlink},
                "the kind of every GPU whose `devices` entry gives no `kind`");
  v.Constraint("gpu_kind", "with `gpu_link: nvlink`, one with NVLink");
  v.NamedOneOf(
      "precision", precision, sim::PrecisionNames(), "precision",
      "the arithmetic of the training step in the roofline model: matmul- and convolution-class "
      "ops (`Conv2d`, `ConvTranspose2d`, `Linear`, `MatMul`, `Einsum`, the recurrent cells, and "
      "their backward ops) run at the GPU kind's peak for it, every other op at its FP32 peak. "
      "`fp32`: CUDA cores; `tf32`: tensor cores, fp32 storage; `bf16`/`fp16`: mixed precision as "
      "`torch.autocast`, those ops' activations and gradients at half their fp32 bytes, master "
      "weights and optimizer fp32; the simulator stores and copies what autocast keeps in 16 bits "
      "(those ops' outputs, pointwise and layout ops computed from them alone, and these values' "
      "gradients) at half its bytes, so peak memory and copies between devices follow the "
      "precision (`graph/autocast.h`). The executor itself trains in fp32");
  v.NamedOneOf(
      "gpu_efficiency", gpu_efficiency, sim::GpuEfficiencyNames(), "GPU efficiency",
      "how fast the roofline model runs a GPU's ops. `peak`: every op at its kind's data-sheet "
      "peaks plus 5.7 us (a lower bound). `achieved`: at the fractions of the peaks that an "
      "H200's kernels reached in the GPU check of 2026-12-04 (`bench/fit_gpu_efficiency.py` fits "
      "them; `runtime/sim/gpu_kinds.cc` holds them): a matmul- or convolution-class op takes "
      "max(FLOP / (peak x fraction x shape), bytes / (bandwidth x 0.87)) + fixed, with fp32 0.73 "
      "and 15.6 us (shape 1), tf32 0.869 and 9.5 us, bf16 and fp16 0.839 and 10.1 us, shape "
      "being what the op's GEMMs lose to 128 x 128 tiles in whole waves over the kind's SMs "
      "(split-K where they are fewer than the SMs) and to their inner dimension k (k / (k + 262) "
      "in tf32, k / (k + 205) in bf16); any other op max(FLOP / FP32 peak, bytes / (bandwidth x "
      "0.87)) + 3.2 us; and no op less than the host's 7.1 us of issue. Other kinds take the "
      "H200's fractions of their own peaks (an assumption: only an H200 was measured). Against "
      "measured whole steps, bench/RESULTS.md (\"Achieved GPU efficiency\")");
  v.Int("gpus_per_host", gpus_per_host, 0,
        "hosts in the roofline model: GPU `cuda:i` is on host i / `gpus_per_host` (0: every "
        "device on one host); CPU workers are on host 0, and each GPU reads its minibatch shard "
        "on its own host. Within a host, `gpu_link`; between hosts, the network below, one link "
        "per ordered device pair (a NIC per GPU, as 8-GPU H100/H200 servers have; a NIC shared by "
        "several GPUs is not modelled)");
  v.Positive("host_link_gbps", host_link_gbps,
             "the network between hosts, gigabits per second per direction (400: NDR InfiniBand "
             "or 400 GbE; 100 for 100 GbE)");
  v.Positive("host_link_latency_us", host_link_latency_us,
             "microseconds per transfer between hosts: the 25 us of software the intra-host "
             "links charge, plus the wire and switch");
  v.Integers("process_hosts", process_hosts, 0, 4096, "hosts, one per process, e.g. [0, 0, 1, 1]",
             "the host of each process of a placement across processes: devices `w<k>/...` are "
             "on host `process_hosts[k]`, or on host k when the list is empty (one process per "
             "host, as torchrun starts them); `gpus_per_host` does not apply to them. Copies "
             "between processes of one host take the within-host links");
}

namespace {
constexpr int kMostPort = 65535;
}  // namespace

void ClusterConfig::Fields(ConfigVisitor& v) {
  v.Int("workers", workers, 0, "worker processes; 0: evaluate here");
  v.Text("address", address,
         "the host name or address the workers reach this one at (`MASTER_ADDR`); the store "
         "listens there");
  v.Text("listen_address", listen_address,
         "where the store listens instead of `address` (`0.0.0.0` or `::`: every interface), for "
         "an `address` that does not resolve here to the interface the workers reach");
  v.Path("key_file", key_file,
         "the key every message between the search and its workers is sealed under (HMAC-SHA256; "
         "docs/cluster.md), relative to the config file's folder; created with mode 0600 when "
         "missing; give it to each worker (`placer worker --key-file`, or "
         "`PLACER_CLUSTER_KEY_FILE`). Empty: `PLACER_CLUSTER_KEY` (64 hex digits) when set, else "
         "a new key per run in the output directory's `cluster.key`");
  v.Constraint("key_file", "a file of 64 hex digits, readable by its owner only");
  v.Int("port", port, 0,
        "the store's TCP port (`MASTER_PORT`); 0 takes a free one, printed at start");
  v.Constraint("port", fmt::format("<= {}", kMostPort));
  v.Positive("join_timeout_seconds", join_timeout_seconds,
             "every worker has joined by then, counted from the start of the set-up; otherwise "
             "the run fails (exit code 1) naming the ranks that did not come");
  v.Positive("heartbeat_timeout_seconds", heartbeat_timeout_seconds,
             "a worker silent this long (it beats five times a second) is dropped and the "
             "placement it held goes to another worker; with none left the run fails (exit code "
             "1)");
}

std::optional<graph::FieldError> ClusterConfig::Check() const {
  if (port > kMostPort) {
    return graph::FieldError{{"port"},
                             fmt::format("{} is not a TCP port (0 to {})", port, kMostPort)};
  }
  return std::nullopt;
}

void OutputConfig::Fields(ConfigVisitor& v) {
  v.Path("directory", directory,
         "where results and checkpoints go; a relative path is relative to the config file's "
         "folder, not the working directory");
}

}  // namespace placer::config
