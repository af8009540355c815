#include "graph/step_names.h"

#include <fmt/format.h>

#include <algorithm>

namespace placer::graph {

namespace {

// The number of "<letter><digits>/" at `pos` of `name`, and where it ends (one past the slash).
std::optional<int> ParsePrefix(const std::string& name, char letter, size_t& pos) {
  const size_t slash = name.find('/', pos);
  if (slash == std::string::npos || slash < pos + 2 || name[pos] != letter ||
      !std::all_of(name.begin() + static_cast<std::ptrdiff_t>(pos) + 1,
                   name.begin() + static_cast<std::ptrdiff_t>(slash),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  const int number = std::stoi(name.substr(pos + 1, slash - pos - 1));
  pos = slash + 1;
  return number;
}

}  // namespace

std::string ReplicaName(int replica, const std::string& name) {
  return fmt::format("r{}/{}", replica, name);
}

std::vector<std::string> ReplicaLabels(int replicas) {
  std::vector<std::string> labels;
  for (int r = 0; r < replicas; ++r) labels.push_back(fmt::format("r{}", r));
  return labels;
}

std::string MicroBatchName(int micro_batch, const std::string& name) {
  return fmt::format("m{}/{}", micro_batch, name);
}

std::string InMicroBatch(int micro_batch, const std::string& name) {
  size_t pos = 0;
  if (const std::optional<int> replica = ParsePrefix(name, 'r', pos)) {
    return ReplicaName(*replica, MicroBatchName(micro_batch, name.substr(pos)));
  }
  return MicroBatchName(micro_batch, name);
}

StepName ParseStepName(const std::string& name) {
  StepName parsed;
  size_t pos = 0;
  parsed.replica = ParsePrefix(name, 'r', pos);
  parsed.micro_batch = ParsePrefix(name, 'm', pos);
  parsed.base = name.substr(pos);
  return parsed;
}

std::optional<int> ShardOfName(const std::string& name) {
  const std::string base = ParseStepName(name).base;
  const size_t slash = base.find('/');
  if (!base.starts_with("tp") || slash == std::string::npos || slash < 3 ||
      !std::all_of(base.begin() + 2, base.begin() + static_cast<std::ptrdiff_t>(slash),
                   [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  return std::stoi(base.substr(2, slash - 2));
}

}  // namespace placer::graph
