#include "placer/setup/warm_starts.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>

#include "graph/micro_batches.h"
#include "placer/baselines/baselines.h"
#include "placer/baselines/pipeline.h"
#include "placer/setup/model_factory.h"

namespace placer::setup {
namespace {

search::Candidate Uniform(int groups, int replicas, int option) {
  return {replicas, std::vector<int>(static_cast<size_t>(groups), option)};
}

// Every single device, data parallelism over every device, the expert, and every algorithm.
void AddBaselines(SearchSetup& s, const search::ActionSpace& space) {
  const int groups = s.grouping.num_groups();
  const auto devices = static_cast<int>(s.names.size());
  for (int d = 0; d < devices; ++d) {
    s.baselines.push_back({"single device " + s.names[static_cast<size_t>(d)],
                           Uniform(groups, 1, space.SingleDeviceOption(d)), "", 0});
  }
  if (devices > 1) {
    auto dp = std::find_if(s.models.begin(), s.models.end(), [&](const auto& m) {
      return m->replicas == devices && m->micro_batches == 1 && m->tensor_ways == 1;
    });
    if (dp != s.models.end()) {
      s.baselines.push_back({fmt::format("data parallel ({})", fmt::join((*dp)->shard_sizes, "/")),
                             Uniform(groups, devices, space.SpreadOption(devices)), "", 0});
    } else {
      s.baselines.push_back(
          {"data parallel", std::nullopt,
           fmt::format("{} replicas are not among the replica counts searched ({}{})", devices,
                       fmt::join(space.replica_counts(), ", "),
                       s.notes.empty() ? "" : "; " + fmt::format("{}", fmt::join(s.notes, "; "))),
           0});
    }
  }
  if (const std::filesystem::path expert = ExpertFile(s.config); !expert.empty()) {
    try {
      const graph::Placement placement =
          graph::ReadPlacementYaml(expert, s.base(), s.names, ExpertFacts(s.config));
      s.baselines.push_back(
          {"expert (" + expert.filename().string() + ")",
           space.FromGroupDevices(graph::GroupDevices(s.base(), s.grouping, placement)), "", 0});
    } catch (const graph::PlacementError& error) {
      s.notes.push_back(
          fmt::format("the expert placement {} is skipped: {}", expert.string(), error.what()));
      s.baselines.push_back({"expert", std::nullopt, error.what(), 0});
    }
  }
  const baselines::PlacementProblem problem{&s.base(), &s.grouping, s.devices,
                                            s.costs.front().get()};
  for (const std::string& name : baselines::BaselineNames()) {
    try {
      baselines::BaselineResult result = baselines::RunBaseline(name, problem);
      s.baselines.push_back({result.algorithm, space.FromGroupDevices(result.group_devices), "",
                             result.seconds_to_place});
    } catch (const baselines::BaselineError& error) {
      s.baselines.push_back({name, std::nullopt, error.what(), 0});
    }
  }
}

// For every R > 1: each one-replica baseline that uses only the first k = D / R devices, and
// each algorithm run on those k devices, copied onto the others (ActionSpace::ScaleOut): R
// replicas of a k-device model-parallel placement.
void AddScaledOut(SearchSetup& s, const search::ActionSpace& space) {
  const auto devices = static_cast<int>(s.names.size());
  for (int replicas : space.replica_counts()) {
    const int k = devices / replicas;
    if (replicas == 1 || k < 1) continue;
    auto add = [&](const std::string& name, const search::Candidate& candidate) {
      if (std::optional<search::Candidate> scaled = space.ScaleOut(candidate, replicas)) {
        s.scaled_out.push_back({fmt::format("{}, x{} replicas", name, replicas), *scaled});
      }
    };
    for (const Baseline& b : s.baselines) {
      if (!b.candidate || b.candidate->replicas != 1) continue;
      const auto& options = b.candidate->options;
      if (*std::max_element(options.begin(), options.end()) < k) add(b.name, *b.candidate);
    }
    if (k < 2) continue;
    const baselines::PlacementProblem problem{
        &s.base(), &s.grouping, graph::DeviceSet(s.devices.begin(), s.devices.begin() + k),
        s.costs.front().get()};
    for (const std::string& name : baselines::BaselineNames()) {
      try {
        const baselines::BaselineResult result = baselines::RunBaseline(name, problem);
        add(fmt::format("{} on {} devices", result.algorithm, k),
            space.FromGroupDevices(result.group_devices));
      } catch (const baselines::BaselineError& error) {
        // A baseline that cannot place the model on k devices gives no warm start there.
        s.notes.push_back(fmt::format("no {}-replica warm start from {} on {} devices: {}",
                                      replicas, name, k, error.what()));
      }
    }
  }
}

// Where the space has pipelines: the pipeline baseline's contiguous stages (its dynamic program,
// placer/baselines/pipeline.h) with every micro-batch count and schedule of the space, each stage
// mapped onto the single-device option of its device, group by group. For R replicated pipelines
// the stages are cut over the first D / R devices and copied onto the others
// (ActionSpace::ScaleOut): pipeline r on devices r D / R and up.
void AddPipelineStarts(SearchSetup& s, const search::ActionSpace& space) {
  if (!space.has_pipelines()) return;
  const auto devices = static_cast<int>(s.devices.size());
  std::map<int, std::optional<search::Candidate>> cut_for;  // per replica count
  for (const search::StepShape& shape : space.shapes()) {
    if (shape.micro_batches == 1) continue;
    if (!cut_for.contains(shape.replicas)) {
      std::optional<search::Candidate>& cut = cut_for[shape.replicas];
      const int stages = devices / shape.replicas;
      try {
        const baselines::StagePartition partition = baselines::PartitionIntoStages(
            s.base(), graph::DeviceSet(s.devices.begin(), s.devices.begin() + stages),
            *s.costs.front());
        graph::Placement over_all = partition.placement;
        over_all.devices = s.names;
        cut = space.FromGroupDevices(graph::GroupDevices(s.base(), s.grouping, over_all));
      } catch (const std::exception& error) {
        s.notes.push_back(
            fmt::format("no pipeline warm start on {} devices: {}", stages, error.what()));
      }
    }
    const std::optional<search::Candidate>& cut = cut_for.at(shape.replicas);
    if (!cut) continue;
    search::Candidate pipelined = *cut;
    pipelined.micro_batches = shape.micro_batches;
    pipelined.schedule = shape.schedule;
    if (shape.replicas == 1) {
      s.pipelined.push_back({fmt::format("pipeline (contiguous stages), M = {}, {}",
                                         shape.micro_batches, graph::ToString(shape.schedule)),
                             pipelined});
      continue;
    }
    pipelined.micro_batches = 1;
    pipelined.schedule = graph::PipelineSchedule::kGPipe;
    std::optional<search::Candidate> scaled = space.ScaleOut(pipelined, shape.replicas);
    if (!scaled) continue;
    s.pipelined.push_back(
        {fmt::format("{} pipelines (contiguous stages), M = {}, {}", shape.replicas,
                     shape.micro_batches, graph::ToString(shape.schedule)),
         space.WithShape(*scaled, shape)});
  }
}

// Every tensor-parallel shape with every group spread over all its copies: each replica split T
// ways with every shard on its own device, what no split reaches on each replica's first device,
// the replicas side by side. That is the Megatron-style baseline's TP x DP placement of the
// same shape (placer/baselines/megatron.h).
void AddTensorParallelStarts(SearchSetup& s, const search::ActionSpace& space) {
  const int groups = s.grouping.num_groups();
  for (const search::TensorParallelShape& t : space.tensor_parallel()) {
    search::Candidate split = Uniform(groups, t.replicas, space.SpreadOption(t.replicas));
    split.tensor_ways = t.tensor_ways;
    s.scaled_out.push_back({fmt::format("tensor parallel {} x data parallel {}", t.tensor_ways,
                                        t.replicas / t.tensor_ways),
                            std::move(split)});
  }
}

}  // namespace

void AddWarmStarts(SearchSetup& s, const search::ActionSpace& space) {
  AddBaselines(s, space);
  AddScaledOut(s, space);
  AddPipelineStarts(s, space);
  AddTensorParallelStarts(s, space);
}

}  // namespace placer::setup
