#include "placer/action_space.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "graph/micro_batches.h"

namespace placer::search {

namespace {

// Sorted, each value once: the counts and shapes a caller may give in any order, repeated.
template <typename T>
void SortUnique(std::vector<T>& values) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
}

}  // namespace

ActionSpace::ActionSpace(int num_devices, std::vector<int> replica_counts,
                         std::vector<int> micro_batch_counts,
                         std::vector<ReplicatedPipeline> replicated_pipelines,
                         std::vector<TensorParallelShape> tensor_parallel)
    : num_devices_(num_devices) {
  if (num_devices < 1) throw std::invalid_argument("the action space needs at least one device");
  replica_counts.push_back(1);
  SortUnique(replica_counts);
  for (int r : replica_counts) {
    if (r < 1 || r > num_devices) {
      throw std::invalid_argument(fmt::format(
          "replica count {} is out of range: between 1 and the {} devices", r, num_devices));
    }
  }
  replica_counts_ = std::move(replica_counts);
  micro_batch_counts.push_back(1);
  SortUnique(micro_batch_counts);
  if (micro_batch_counts.front() < 1) {
    throw std::invalid_argument(fmt::format("micro-batch count {} is not a count (at least 1)",
                                            micro_batch_counts.front()));
  }
  micro_batch_counts_ = std::move(micro_batch_counts);
  for (int r : replica_counts_) shapes_.push_back({r, 1, graph::PipelineSchedule::kGPipe});
  for (int m : micro_batch_counts_) {
    if (m == 1) continue;
    for (auto schedule : {graph::PipelineSchedule::kGPipe, graph::PipelineSchedule::kOneFOneB}) {
      shapes_.push_back({1, m, schedule});
    }
  }
  auto is_replica_count = [&](int r) {
    return std::binary_search(replica_counts_.begin(), replica_counts_.end(), r);
  };
  SortUnique(replicated_pipelines);
  for (const ReplicatedPipeline& p : replicated_pipelines) {
    if (p.replicas < 2 || p.micro_batches < 2 || !is_replica_count(p.replicas)) {
      throw std::invalid_argument(fmt::format(
          "replicated pipeline of {} replicas x {} micro-batches: it needs a replica count of the "
          "space ({}) above 1 and at least 2 micro-batches",
          p.replicas, p.micro_batches, fmt::join(replica_counts_, ", ")));
    }
    for (auto schedule : {graph::PipelineSchedule::kGPipe, graph::PipelineSchedule::kOneFOneB}) {
      shapes_.push_back({p.replicas, p.micro_batches, schedule});
    }
  }
  replicated_pipelines_ = std::move(replicated_pipelines);
  SortUnique(tensor_parallel);
  for (const TensorParallelShape& t : tensor_parallel) {
    if (t.tensor_ways < 2 || t.replicas % t.tensor_ways != 0 || !is_replica_count(t.replicas)) {
      throw std::invalid_argument(fmt::format(
          "{} copies in {} tensor-parallel shards: the copies must be a replica count of the "
          "space ({}) that the shards, at least 2, divide",
          t.replicas, t.tensor_ways, fmt::join(replica_counts_, ", ")));
    }
    shapes_.push_back({t.replicas, 1, graph::PipelineSchedule::kGPipe, t.tensor_ways});
  }
  tensor_parallel_ = std::move(tensor_parallel);
  // Widths are the replica counts: a width must divide some R to be usable at all.
  for (int width : replica_counts_) {
    const int stride = num_devices / width;
    for (int first = 0; first + (width - 1) * stride < num_devices; ++first) {
      options_.push_back({width, first, stride});
    }
  }
  if (options_.size() > 255) {
    throw std::invalid_argument(
        fmt::format("{} devices give {} options per group; at most 255 are supported", num_devices,
                    options_.size()));
  }
}

std::vector<int> ActionSpace::DefaultReplicaCounts(int num_devices, int64_t max_replicas) {
  std::vector<int> counts;
  for (int r = 1; r <= num_devices && r <= max_replicas; r *= 2) counts.push_back(r);
  if (num_devices <= max_replicas && counts.back() != num_devices) counts.push_back(num_devices);
  return counts;
}

std::vector<int> ActionSpace::DefaultMicroBatchCounts(int64_t batch, int64_t step_ops,
                                                      int max_count) {
  std::vector<int> counts;
  for (int m = 1; m <= max_count; m *= 2) {
    if (batch % m == 0 && (m == 1 || int64_t{m} * step_ops <= kMaxPipelineOps)) {
      counts.push_back(m);
    }
  }
  return counts;
}

std::vector<ReplicatedPipeline> ActionSpace::DefaultReplicatedPipelines(
    const std::vector<int>& pipeline_replica_counts, const std::vector<int>& micro_batch_counts,
    int64_t batch, int64_t step_ops, int num_devices) {
  std::vector<ReplicatedPipeline> pipelines;
  for (int r : pipeline_replica_counts) {
    for (int m : micro_batch_counts) {
      if (r > 1 && m > 1 && batch % (int64_t{r} * m) == 0 &&
          int64_t{r} * m * step_ops <= kMaxPipelineOps &&
          (num_devices <= 0 || m <= DefaultMaxMicroBatches(num_devices / r))) {
        pipelines.push_back({r, m});
      }
    }
  }
  return pipelines;
}

std::vector<int> ActionSpace::DefaultPipelineReplicaCounts(int num_devices,
                                                           const std::vector<int>& replica_counts) {
  std::vector<int> counts;
  for (int r : replica_counts) {
    if (r > 1 && 2 * r <= num_devices) counts.push_back(r);
  }
  return counts;
}

bool ActionSpace::HasShape(const StepShape& shape) const {
  return std::find(shapes_.begin(), shapes_.end(), shape) != shapes_.end();
}

namespace {

// "; replicated pipelines 2x4, 4x2" (replicas x micro-batches), or nothing.
std::string PipelinesText(const std::vector<ReplicatedPipeline>& pipelines) {
  std::vector<std::string> parts;
  for (const ReplicatedPipeline& p : pipelines) {
    parts.push_back(fmt::format("{}x{}", p.replicas, p.micro_batches));
  }
  return parts.empty() ? "" : fmt::format("; replicated pipelines {}", fmt::join(parts, ", "));
}

// "; tensor-parallel 4/t2, 8/t2" (copies / tensor ways), or nothing.
std::string TensorParallelText(const std::vector<TensorParallelShape>& shapes) {
  std::vector<std::string> parts;
  for (const TensorParallelShape& t : shapes) {
    parts.push_back(fmt::format("{}/t{}", t.replicas, t.tensor_ways));
  }
  return parts.empty() ? "" : fmt::format("; tensor-parallel {}", fmt::join(parts, ", "));
}

}  // namespace

int ActionSpace::ShapeIndex(const Candidate& candidate) const {
  const StepShape want{candidate.replicas, candidate.micro_batches, candidate.schedule,
                       candidate.tensor_ways};
  for (size_t i = 0; i < shapes_.size(); ++i) {
    if (shapes_[i] == want) return static_cast<int>(i);
  }
  throw std::invalid_argument(fmt::format(
      "{} replicas with {} micro-batches ({}){}: not a shape of the search (replica counts {}; "
      "micro-batch counts {}, with one replica; M = 1 runs as gpipe{}{})",
      candidate.replicas, candidate.micro_batches, graph::ToString(candidate.schedule),
      candidate.tensor_ways == 1 ? "" : fmt::format(" in {} shards", candidate.tensor_ways),
      fmt::join(replica_counts_, ", "), fmt::join(micro_batch_counts_, ", "),
      PipelinesText(replicated_pipelines_), TensorParallelText(tensor_parallel_)));
}

Candidate ActionSpace::WithShape(Candidate candidate, const StepShape& shape) const {
  if (shape.replicas != candidate.replicas) {
    for (int& option : candidate.options) option = Nearest(option, shape.replicas);
  }
  candidate.replicas = shape.replicas;
  candidate.micro_batches = shape.micro_batches;
  candidate.schedule = shape.schedule;
  candidate.tensor_ways = shape.tensor_ways;
  return candidate;
}

int ActionSpace::DeviceOf(int option, int replica, int replicas) const {
  const ParallelOption& o = options_[static_cast<size_t>(option)];
  const int block = static_cast<int>(static_cast<int64_t>(replica) * o.width / replicas);
  return o.first_device + block * o.stride;
}

std::vector<int> ActionSpace::DevicesOf(int option, int replicas) const {
  std::vector<int> devices;
  devices.reserve(static_cast<size_t>(replicas));
  for (int r = 0; r < replicas; ++r) devices.push_back(DeviceOf(option, r, replicas));
  return devices;
}

int ActionSpace::SingleDeviceOption(int device) const {
  if (device < 0 || device >= num_devices_) {
    throw std::invalid_argument(fmt::format("device index {} out of range", device));
  }
  return device;  // width 1 comes first, one option per device in order
}

Candidate ActionSpace::FromGroupDevices(const std::vector<int>& group_devices) const {
  Candidate candidate{1, {}};
  for (int device : group_devices) candidate.options.push_back(SingleDeviceOption(device));
  return candidate;
}

int ActionSpace::SpreadOption(int replicas) const {
  int best = 0;
  for (int i = 0; i < num_options(); ++i) {
    const ParallelOption& o = options_[static_cast<size_t>(i)];
    if (Allowed(i, replicas) && o.first_device == 0 &&
        o.width > options_[static_cast<size_t>(best)].width) {
      best = i;
    }
  }
  return best;
}

int ActionSpace::Nearest(int option, int replicas) const {
  if (Allowed(option, replicas)) return option;
  const ParallelOption& want = options_[static_cast<size_t>(option)];
  int best = want.first_device;  // the single device always fits
  for (int i = 0; i < num_options(); ++i) {
    const ParallelOption& o = options_[static_cast<size_t>(i)];
    if (Allowed(i, replicas) && o.first_device == want.first_device && o.width <= want.width &&
        o.width > options_[static_cast<size_t>(best)].width) {
      best = i;
    }
  }
  return best;
}

std::optional<Candidate> ActionSpace::ScaleOut(const Candidate& candidate, int replicas) const {
  if (replicas % candidate.replicas != 0 ||
      !HasShape({replicas, candidate.micro_batches, candidate.schedule, candidate.tensor_ways})) {
    return std::nullopt;
  }
  const int factor = replicas / candidate.replicas;
  Candidate scaled{.replicas = replicas,
                   .options = {},
                   .micro_batches = candidate.micro_batches,
                   .schedule = candidate.schedule,
                   .tensor_ways = candidate.tensor_ways};
  for (int option : candidate.options) {
    const ParallelOption& o = options_[static_cast<size_t>(option)];
    const auto widened =
        std::find_if(options_.begin(), options_.end(), [&](const ParallelOption& w) {
          return w.width == o.width * factor && w.first_device == o.first_device;
        });
    if (widened == options_.end()) return std::nullopt;
    const int index = static_cast<int>(widened - options_.begin());
    if (!Allowed(index, replicas)) return std::nullopt;
    scaled.options.push_back(index);
  }
  return scaled;
}

int ActionSpace::BestMatch(const std::vector<int>& replica_devices) const {
  const int replicas = static_cast<int>(replica_devices.size());
  int best = -1, best_matches = -1;
  for (int i = 0; i < num_options(); ++i) {
    if (!Allowed(i, replicas)) continue;
    int matches = 0;
    for (int r = 0; r < replicas; ++r) {
      matches += DeviceOf(i, r, replicas) == replica_devices[static_cast<size_t>(r)];
    }
    if (matches > best_matches) {  // options are ordered by width: ties keep the narrower
      best = i;
      best_matches = matches;
    }
  }
  return best;
}

void ActionSpace::Check(const Candidate& candidate, int groups) const {
  if (std::find(replica_counts_.begin(), replica_counts_.end(), candidate.replicas) ==
      replica_counts_.end()) {
    throw std::invalid_argument(fmt::format("{} replicas: the replica counts searched are {}",
                                            candidate.replicas, fmt::join(replica_counts_, ", ")));
  }
  ShapeIndex(candidate);
  if (static_cast<int>(candidate.options.size()) != groups) {
    throw std::invalid_argument(fmt::format("the candidate places {} groups, the model has {}",
                                            candidate.options.size(), groups));
  }
  for (size_t g = 0; g < candidate.options.size(); ++g) {
    const int option = candidate.options[g];
    if (option < 0 || option >= num_options()) {
      throw std::invalid_argument(fmt::format("group {}: option {} does not exist", g, option));
    }
    if (!Allowed(option, candidate.replicas)) {
      throw std::invalid_argument(fmt::format("group {}: an option of width {} with {} replicas", g,
                                              options_[static_cast<size_t>(option)].width,
                                              candidate.replicas));
    }
  }
}

std::string ActionSpace::Describe(int option, const std::vector<std::string>& names) const {
  const ParallelOption& o = options_[static_cast<size_t>(option)];
  std::vector<std::string> devices;
  for (int k = 0; k < o.width; ++k) {
    devices.push_back(names.at(static_cast<size_t>(o.first_device + k * o.stride)));
  }
  return fmt::format("{{{}}}", fmt::join(devices, ","));
}

bool IsHybrid(const Candidate& candidate) {
  return candidate.replicas > 1 &&
         std::any_of(candidate.options.begin(), candidate.options.end(),
                     [&](int o) { return o != candidate.options.front(); });
}

std::string Summarise(const ActionSpace& space, const Candidate& candidate,
                      const std::vector<std::string>& device_names) {
  std::map<int, int> uses;
  for (int option : candidate.options) ++uses[option];
  std::vector<std::pair<int, int>> by_count;
  for (const auto& [option, count] : uses) by_count.emplace_back(count, option);
  std::sort(by_count.begin(), by_count.end(), std::greater<>());
  std::vector<std::string> parts;
  for (size_t i = 0; i < by_count.size(); ++i) {
    if (i == 6) {
      parts.push_back(fmt::format("{} more options", by_count.size() - i));
      break;
    }
    parts.push_back(fmt::format("{}{} on {}", by_count[i].first,
                                i == 0 ? (by_count[i].first == 1 ? " group" : " groups") : "",
                                space.Describe(by_count[i].second, device_names)));
  }
  const std::string kind = candidate.replicas == 1 ? (uses.size() == 1 ? "" : ", model parallel")
                           : IsHybrid(candidate)   ? " (hybrid)"
                                                   : " (data parallel)";
  const std::string pipeline = candidate.micro_batches == 1
                                   ? ""
                                   : fmt::format(", {} micro-batches, {}", candidate.micro_batches,
                                                 graph::ToString(candidate.schedule));
  if (candidate.tensor_ways > 1) {
    return fmt::format("{}: {}", DescribeTensorParallel(candidate.replicas, candidate.tensor_ways),
                       fmt::join(parts, ", "));
  }
  return fmt::format("{} replica{}{}{}: {}", candidate.replicas, candidate.replicas == 1 ? "" : "s",
                     kind, pipeline, fmt::join(parts, ", "));
}

std::string DescribeTensorParallel(int copies, int ways) {
  const int replicas = copies / ways;
  return fmt::format("{} replica{} of {} tensor-parallel shards", replicas,
                     replicas == 1 ? "" : "s", ways);
}

namespace {

// "R", "R/M/schedule" with micro-batches, "R/M/schedule/tT" with tensor ways: what precedes the
// options in keys and logs.
std::string ShapeText(const Candidate& candidate) {
  if (candidate.tensor_ways > 1) {
    return fmt::format("{}/{}/{}/t{}", candidate.replicas, candidate.micro_batches,
                       graph::ToString(candidate.schedule), candidate.tensor_ways);
  }
  return candidate.micro_batches == 1 && candidate.schedule == graph::PipelineSchedule::kGPipe
             ? std::to_string(candidate.replicas)
             : fmt::format("{}/{}/{}", candidate.replicas, candidate.micro_batches,
                           graph::ToString(candidate.schedule));
}

}  // namespace

std::string KeyOf(const Candidate& candidate) {
  std::string key = ShapeText(candidate) + "|";
  for (int option : candidate.options) key.push_back(static_cast<char>(option));
  return key;
}

std::string FormatCandidate(const Candidate& candidate) {
  return fmt::format("{}:{}", ShapeText(candidate), fmt::join(candidate.options, ","));
}

Candidate ParseCandidate(const std::string& text) {
  auto bad = [&] { return std::invalid_argument(fmt::format("malformed candidate '{}'", text)); };
  const size_t colon = text.find(':');
  if (colon == std::string::npos || colon == 0) throw bad();
  Candidate candidate;
  try {
    size_t used = 0;
    const std::string shape = text.substr(0, colon);
    const size_t slash = shape.find('/');
    candidate.replicas = std::stoi(shape.substr(0, slash), &used);
    if (used != std::min(slash, shape.size())) throw bad();
    if (slash != std::string::npos) {  // "R/M/schedule", or "R/M/schedule/tT"
      const size_t second = shape.find('/', slash + 1);
      if (second == std::string::npos) throw bad();
      const std::string count = shape.substr(slash + 1, second - slash - 1);
      candidate.micro_batches = std::stoi(count, &used);
      if (used != count.size()) throw bad();
      const size_t third = shape.find('/', second + 1);
      try {
        candidate.schedule =
            graph::ParsePipelineSchedule(shape.substr(second + 1, third - second - 1));
      } catch (const graph::GraphError&) {
        throw bad();
      }
      if (third != std::string::npos) {
        const std::string ways = shape.substr(third + 1);
        if (ways.size() < 2 || ways[0] != 't') throw bad();
        candidate.tensor_ways = std::stoi(ways.substr(1), &used);
        if (used != ways.size() - 1 || candidate.tensor_ways < 2) throw bad();
      }
    }
    size_t begin = colon + 1;
    while (begin < text.size()) {
      size_t end = text.find(',', begin);
      if (end == std::string::npos) end = text.size();
      const std::string field = text.substr(begin, end - begin);
      candidate.options.push_back(std::stoi(field, &used));
      if (used != field.size()) throw bad();
      begin = end + 1;
    }
  } catch (const std::logic_error&) {  // stoi: invalid_argument, out_of_range
    throw bad();
  }
  return candidate;
}

}  // namespace placer::search
