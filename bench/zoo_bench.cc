// What a search of a big model costs before its first policy step: building (or loading from
// ONNX) the training step, grouping it (coarsen to 256 groups) and computing the groups' policy
// features, for every model of the zoo at its default size and for ONNX files given on the
// command line (scripts/export_onnx.py writes ResNet-18 and a transformer encoder).
// Usage: zoo_bench [ROUNDS] [FILE.onnx ...]; medians of ROUNDS (default 3) rounds.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "graph/group_features.h"
#include "graph/grouping.h"
#include "graph/models.h"
#include "graph/onnx_loader.h"
#include "graph/zoo.h"

namespace {

using namespace placer::graph;
using placer::bench::Clock;
using placer::bench::Median;

struct Model {
  std::string name;
  std::function<Graph()> build;
};

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  std::vector<Model> models = {
      {"LeNet (d2l), batch 256", [] { return BuildLeNet({}); }},
      {"Inception-V3, batch 32", [] { return BuildInceptionV3({}); }},
      {"RNNLM 2x2048, 40 steps", [] { return BuildRnnLm({}); }},
      {"NMT 2 layers, 72+72 steps", [] { return BuildNmt({.layers = 2}); }},
      {"NMT 4 layers, 72+72 steps", [] { return BuildNmt({.layers = 4}); }},
      {"NMT 8 layers, 72+72 steps", [] { return BuildNmt({.layers = 8}); }},
      {"Transformer (BERT-base), batch 32", [] { return BuildTransformerEncoder({}); }},
  };
  for (int i = 2; i < argc; ++i) {
    const std::string file = argv[i];
    models.push_back({"ONNX " + file.substr(file.find_last_of('/') + 1) + ", batch 32",
                      [file] { return LoadOnnx(file, {.batch_size = 32}); }});
  }
  fmt::print("zoo_bench: build or load, coarsen to 256 groups, features; median of {} rounds\n\n",
             rounds);
  fmt::print(
      "| model | ops (forward) | parameters | groups | build / load (ms) | grouping (ms) | "
      "features (ms) | total (ms) |\n");
  fmt::print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (const Model& model : models) {
    std::vector<double> build_s, group_s, feature_s;
    Graph graph;
    Grouping grouping;
    for (int r = 0; r < rounds; ++r) {
      auto start = Clock::now();
      graph = model.build();
      build_s.push_back(placer::bench::SecondsSince(start));
      start = Clock::now();
      grouping = MakeGrouping(graph, {GroupingMethod::kCoarsen, 256});
      group_s.push_back(placer::bench::SecondsSince(start));
      start = Clock::now();
      GroupFeatures features = ComputeGroupFeatures(graph, grouping);
      feature_s.push_back(placer::bench::SecondsSince(start));
    }
    const double b = Median(build_s) * 1e3, g = Median(group_s) * 1e3, f = Median(feature_s) * 1e3;
    fmt::print("| {} | {} ({}) | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", model.name,
               graph.num_ops(), graph.OpsInPhase(Phase::kForward).size(), graph.ParameterCount(),
               grouping.num_groups(), b, g, f, b + g + f);
  }
  return 0;
}
