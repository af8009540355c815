// ONNX models: the loader either returns a validated training step or throws a GraphError naming
// the file (and node). Anything else (a crash, an allocation the size of a corrupt dimension, an
// uncaught exception) is a finding.
#include <cstddef>
#include <cstdint>

#include "fuzz/fuzz_file.h"
#include "graph/onnx_loader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto file = placer::fuzz::WriteInput(data, size, ".onnx");
  try {
    placer::graph::Graph graph = placer::graph::LoadOnnx(file, {.batch_size = 2});
    graph.Validate();
  } catch (const placer::graph::GraphError&) {
  }
  return 0;
}
