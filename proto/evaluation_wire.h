// The messages between a search and its evaluation workers (proto/evaluation.proto) as plain C++:
// the generated code stays behind this header.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph/evaluator.h"
#include "graph/placement.h"

namespace placer::proto {

struct EvaluationTask {
  int64_t id = 0;
  bool stop = false;
  graph::EvaluatorKind kind = graph::EvaluatorKind::kSimulated;
  int replicas = 1;
  graph::Placement placement;
};

struct TaggedResult {
  int64_t id = 0;  // the task's
  int rank = 0;    // the worker's
  graph::EvaluationResult result;
};

// A message that does not parse (a peer of another version, a corrupted queue).
class WireError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

std::vector<uint8_t> EncodeTask(const EvaluationTask& task);
EvaluationTask DecodeTask(const std::vector<uint8_t>& bytes);
std::vector<uint8_t> EncodeResult(const TaggedResult& result);
TaggedResult DecodeResult(const std::vector<uint8_t>& bytes);

}  // namespace placer::proto
