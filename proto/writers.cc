#include "proto/writers.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <google/protobuf/io/tokenizer.h>
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/text_format.h>
#include <unistd.h>

#include <algorithm>
#include <boost/crc.hpp>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <sstream>

#include "graph/micro_batches.h"
#include "placement.pb.h"
#include "tensorboard.pb.h"

namespace placer::proto {

void WritePlacementProto(const std::filesystem::path& binary, const std::filesystem::path& text,
                         const graph::Graph& graph, const graph::Placement& placement,
                         const PlacementInfo& info) {
  placer::proto::Placement message;
  message.set_model(info.model);
  message.set_step_seconds(info.step_seconds);
  message.set_evaluator(info.evaluator);
  if (info.replicas > 1) message.set_replicas(info.replicas);
  if (info.tensor_ways > 1) message.set_tensor_ways(info.tensor_ways);
  if (placement.micro_batches > 1) {
    message.set_micro_batches(placement.micro_batches);
    message.set_schedule(graph::ToString(placement.schedule));
  }
  for (const std::string& device : placement.devices) message.add_devices(device);
  for (graph::OpId id : graph.TopologicalOrder()) {
    if (graph.op(id).phase != graph::Phase::kForward) continue;
    OpPlacement* op = message.add_ops();
    op->set_op(graph.op(id).name);
    op->set_device(placement.devices.at(
        static_cast<size_t>(placement.device_of_op.at(static_cast<size_t>(id)))));
  }
  std::string wire, readable;
  message.SerializeToString(&wire);
  google::protobuf::TextFormat::PrintToString(message, &readable);
  graph::WriteFileAtomically(binary, wire);
  graph::WriteFileAtomically(text, readable);
}

namespace {

struct FirstTextFormatError : google::protobuf::io::ErrorCollector {
  int line = 0;
  int column = 0;
  std::string message = "does not parse";
  bool seen = false;
  void AddError(int error_line, google::protobuf::io::ColumnNumber error_column,
                const std::string& error_message) override {
    if (seen) return;
    seen = true;
    line = error_line;
    column = error_column;
    message = error_message;
  }
};

placer::proto::Placement ParsePlacement(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    throw graph::PlacementError(
        fmt::format("{}: cannot read: {}", file.string(), std::strerror(errno)));
  }
  std::stringstream contents;
  contents << in.rdbuf();
  placer::proto::Placement message;
  const std::string ext = file.extension().string();
  // Parse errors become our message (file:line:column for the text format) instead of lines that
  // libprotobuf would log on stderr.
  google::protobuf::LogSilencer silence_protobuf_log;
  if (ext == ".pbtxt" || ext == ".txtpb") {
    FirstTextFormatError error;
    google::protobuf::TextFormat::Parser parser;
    parser.RecordErrorsTo(&error);
    if (!parser.ParseFromString(contents.str(), &message)) {
      throw graph::PlacementError(
          fmt::format("{}:{}:{}: not a placement in protobuf text format: {}", file.string(),
                      error.line + 1, error.column + 1, error.message));
    }
  } else if (!message.ParseFromString(contents.str())) {
    throw graph::PlacementError(
        fmt::format("{}: not a placement protobuf (truncated or corrupt)", file.string()));
  }
  return message;
}

// A count of the file (0: unset, read as 1); PlacementError naming `key` when negative.
int CountOf(const std::filesystem::path& file, int count, const char* key, const char* what) {
  if (count < 0) {
    throw graph::PlacementError(
        fmt::format("{}: {}: {} is not {}", file.string(), key, count, what));
  }
  return std::max(1, count);
}

}  // namespace

int ReadPlacementProtoReplicas(const std::filesystem::path& file) {
  return CountOf(file, ParsePlacement(file).replicas(), "replicas", "a replica count");
}

int ReadPlacementProtoTensorWays(const std::filesystem::path& file) {
  return CountOf(file, ParsePlacement(file).tensor_ways(), "tensor_ways", "a count of shards");
}

namespace {

graph::PipelineSettings PipelineOf(const std::filesystem::path& file,
                                   const placer::proto::Placement& message) {
  graph::PipelineSettings settings;
  if (message.micro_batches() < 0) {
    throw graph::PlacementError(fmt::format("{}: micro_batches: {} is not a micro-batch count",
                                            file.string(), message.micro_batches()));
  }
  settings.micro_batches = std::max(1, message.micro_batches());
  if (!message.schedule().empty()) {
    try {
      settings.schedule = graph::ParsePipelineSchedule(message.schedule());
    } catch (const graph::GraphError& error) {
      throw graph::PlacementError(fmt::format("{}: schedule: {}", file.string(), error.what()));
    }
  }
  return settings;
}

}  // namespace

graph::PipelineSettings ReadPlacementProtoPipeline(const std::filesystem::path& file) {
  return PipelineOf(file, ParsePlacement(file));
}

graph::Placement ReadPlacementProto(const std::filesystem::path& file, const graph::Graph& graph,
                                    const std::vector<std::string>& devices) {
  const placer::proto::Placement message = ParsePlacement(file);
  const graph::PipelineSettings pipeline = PipelineOf(file, message);
  graph::Placement placement{
      .devices = devices,
      .device_of_op = std::vector<int>(static_cast<size_t>(graph.num_ops()), -1),
      .micro_batches = pipeline.micro_batches,
      .schedule = pipeline.schedule};
  for (const OpPlacement& op : message.ops()) {
    auto id = graph.FindOp(op.op());
    if (!id || graph.op(*id).phase != graph::Phase::kForward) {
      throw graph::PlacementError(
          fmt::format("{}: the model has no forward op '{}'", file.string(), op.op()));
    }
    auto it = std::find(devices.begin(), devices.end(), op.device());
    if (it == devices.end()) {
      throw graph::PlacementError(
          fmt::format("{}: op '{}': unknown device '{}'", file.string(), op.op(), op.device()));
    }
    placement.device_of_op[static_cast<size_t>(*id)] = static_cast<int>(it - devices.begin());
  }
  std::vector<std::string> unplaced;
  for (graph::OpId id : graph.OpsInPhase(graph::Phase::kForward)) {
    if (placement.device_of_op[static_cast<size_t>(id)] < 0) unplaced.push_back(graph.op(id).name);
  }
  if (!unplaced.empty()) {
    const size_t shown = std::min<size_t>(unplaced.size(), 5);
    throw graph::PlacementError(fmt::format(
        "{}: the placement misses {} forward op{}: {}{}", file.string(), unplaced.size(),
        unplaced.size() == 1 ? "" : "s",
        fmt::join(unplaced.begin(), unplaced.begin() + static_cast<std::ptrdiff_t>(shown), ", "),
        unplaced.size() > shown ? ", ..." : ""));
  }
  return placement;
}

uint32_t MaskedCrc32c(const void* data, size_t size) {
  // CRC-32C: polynomial 0x1EDC6F41, reflected, initial and final XOR 0xFFFFFFFF.
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> crc;
  crc.process_bytes(data, size);
  uint32_t c = crc.checksum();
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& directory) {
  std::filesystem::create_directories(directory);
  char host[256] = "localhost";
  ::gethostname(host, sizeof(host) - 1);
  auto now = std::chrono::system_clock::now().time_since_epoch();
  path_ =
      directory / fmt::format("events.out.tfevents.{}.{}",
                              std::chrono::duration_cast<std::chrono::seconds>(now).count(), host);
  // A resumed run in the same second must not overwrite the earlier file.
  for (int n = 1; std::filesystem::exists(path_); ++n) path_ += fmt::format(".{}", n);
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", path_.string(), std::strerror(errno)));
  }
  tensorboard::Event event;
  event.set_wall_time(std::chrono::duration<double>(now).count());
  event.set_file_version("brain.Event:2");
  WriteRecord(event.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TensorBoardWriter::AddScalar(const std::string& tag, int64_t step, double value) {
  tensorboard::Event event;
  event.set_wall_time(
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  event.set_step(step);
  tensorboard::SummaryValue* summary_value = event.mutable_summary()->add_value();
  summary_value->set_tag(tag);
  summary_value->set_simple_value(static_cast<float>(value));
  WriteRecord(event.SerializeAsString());
}

void TensorBoardWriter::WriteRecord(const std::string& data) {
  // TFRecord: uint64 length, masked CRC of the length, data, masked CRC of the data (little
  // endian, as on every machine this runs on).
  uint64_t length = data.size();
  uint32_t length_crc = MaskedCrc32c(&length, sizeof(length));
  uint32_t data_crc = MaskedCrc32c(data.data(), data.size());
  bool ok = std::fwrite(&length, sizeof(length), 1, file_) == 1 &&
            std::fwrite(&length_crc, sizeof(length_crc), 1, file_) == 1 &&
            std::fwrite(data.data(), 1, data.size(), file_) == data.size() &&
            std::fwrite(&data_crc, sizeof(data_crc), 1, file_) == 1 && std::fflush(file_) == 0;
  if (!ok) {
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", path_.string(), std::strerror(errno)));
  }
}

}  // namespace placer::proto
