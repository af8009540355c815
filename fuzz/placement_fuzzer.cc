// User placements, YAML or protobuf (binary and text format; the first input byte picks which),
// read against the LeNet training step over three devices: either a complete placement or a
// PlacementError naming the file and the fault. Anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz/fuzz_file.h"
#include "graph/models.h"
#include "graph/placement.h"
#include "proto/writers.h"

namespace {

const placer::graph::Graph& LeNet() {
  static const auto* graph = new placer::graph::Graph(placer::graph::BuildLeNet({.batch_size = 8}));
  return *graph;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::vector<std::string> devices = {"cpu:0", "cpu:1", "cuda:0"};
  const char* extensions[] = {".yaml", ".pb", ".pbtxt"};
  const std::string extension = extensions[data[0] % 3];
  const auto file = placer::fuzz::WriteInput(data + 1, size - 1, extension);
  try {
    placer::graph::Placement placement =
        extension == ".yaml" ? placer::graph::ReadPlacementYaml(file, LeNet(), devices)
                             : placer::proto::ReadPlacementProto(file, LeNet(), devices);
    // An accepted placement puts every forward op on a listed device.
    for (placer::graph::OpId id : LeNet().OpsInPhase(placer::graph::Phase::kForward)) {
      const int device = placement.device_of_op.at(static_cast<size_t>(id));
      if (device < 0 || device >= static_cast<int>(placement.devices.size())) __builtin_trap();
    }
  } catch (const placer::graph::PlacementError&) {
  }
  return 0;
}
