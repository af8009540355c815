// Writers (and a reader) for the protobuf formats placer exports. The generated code stays behind
// this header: callers see plain C++.
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "graph/placement.h"

namespace placer::proto {

struct PlacementInfo {
  std::string model;
  double step_seconds = 0;
  std::string evaluator;  // "measured" or "simulated"
  int replicas = 1;       // of the model the placement is for
  int tensor_ways = 1;    // its shards per replica
};

// The placement as protobuf (proto/placement.proto): `binary` in the wire format, `text` in the
// text format; each written atomically.
void WritePlacementProto(const std::filesystem::path& binary, const std::filesystem::path& text,
                         const graph::Graph& graph, const graph::Placement& placement,
                         const PlacementInfo& info);
// Reads a binary (.pb) or text (.pbtxt, .txtpb) placement; throws graph::PlacementError naming the
// file and the unknown op or device, or the ops left unplaced.
graph::Placement ReadPlacementProto(const std::filesystem::path& file, const graph::Graph& graph,
                                    const std::vector<std::string>& devices);
// The replica count a placement file records (1 when it records none), so that the caller can
// build the model it places. Throws graph::PlacementError naming the file when it does not parse.
int ReadPlacementProtoReplicas(const std::filesystem::path& file);
// The micro-batch count and schedule it records (1 and GPipe when none), likewise.
graph::PipelineSettings ReadPlacementProtoPipeline(const std::filesystem::path& file);
// The tensor-parallel shards per replica it records (1 when none), likewise.
int ReadPlacementProtoTensorWays(const std::filesystem::path& file);

// CRC32C (Castagnoli) masked as TFRecord framing requires.
uint32_t MaskedCrc32c(const void* data, size_t size);

// Scalar curves in TensorBoard's event-file format (TFRecord framing of Event protos), in a new
// file events.out.tfevents.<unix time>.<host> under `directory`. Each record is flushed, so a
// killed run leaves a readable file.
class TensorBoardWriter {
 public:
  explicit TensorBoardWriter(const std::filesystem::path& directory);
  ~TensorBoardWriter();
  TensorBoardWriter(const TensorBoardWriter&) = delete;
  TensorBoardWriter& operator=(const TensorBoardWriter&) = delete;

  void AddScalar(const std::string& tag, int64_t step, double value);
  const std::filesystem::path& path() const { return path_; }

 private:
  void WriteRecord(const std::string& data);
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

}  // namespace placer::proto
