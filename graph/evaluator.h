// The seam between search and measurement: an Evaluator turns a placement into a step time, or
// says why the placement is invalid. The measured runtime and the simulator both implement it.
// Torch-free; beside the placement, since every layer speaks it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "graph/placement.h"

namespace placer::graph {

// How placements are judged: search.evaluator in a config, a task's kind on the evaluation wire.
// Each kind is one row of kEvaluatorKinds, which the config reader, the wire, the worker pool and
// the set-up read; what builds its Evaluator is setup::MakeEvaluator.
enum class EvaluatorKind : uint8_t {
  kMeasured,   // the training step run and timed on the devices
  kSimulated,  // the simulator's prediction from a cost model
};

struct EvaluatorKindInfo {
  EvaluatorKind kind;
  std::string_view name;  // as configs, the wire and the run's files spell it
  // Whether a placement always gets the same answer: one round of a side-by-side then says
  // everything, where measured step times need several.
  bool deterministic;
  // Whether judging costs a real run of the step: the search then learns on a simulator
  // profiled on the devices and spends this kind only on its best candidates and the rows.
  bool runs_the_step;
};

inline constexpr std::array<EvaluatorKindInfo, 2> kEvaluatorKinds = {{
    {.kind = EvaluatorKind::kMeasured,
     .name = "measured",
     .deterministic = false,
     .runs_the_step = true},
    {.kind = EvaluatorKind::kSimulated,
     .name = "simulated",
     .deterministic = true,
     .runs_the_step = false},
}};

// The kinds' names in enum order (a config's one-of list).
inline constexpr std::array<std::string_view, kEvaluatorKinds.size()> kEvaluatorKindNames = [] {
  std::array<std::string_view, kEvaluatorKinds.size()> names{};
  for (size_t k = 0; k < kEvaluatorKinds.size(); ++k) names[k] = kEvaluatorKinds[k].name;
  return names;
}();

const EvaluatorKindInfo& Describe(EvaluatorKind kind);
std::string_view ToString(EvaluatorKind kind);
// The kind named `name`, or nullopt.
std::optional<EvaluatorKind> ParseEvaluatorKind(std::string_view name);

struct DeviceStats {
  std::string device;
  double busy_seconds = 0;  // time spent running ops in one step (a GPU's: on its stream)
  int64_t peak_memory_bytes = 0;
};

struct TransferStats {
  std::string from;  // device name, or "host" for the minibatch
  std::string to;
  int64_t bytes = 0;  // per step
  int count = 0;
  double seconds = 0;
};

// One lane per device and per transfer channel, times in microseconds from the step's start.
struct TraceEvent {
  std::string lane;
  std::string name;
  double start_us = 0;
  double duration_us = 0;
};

struct EvaluationResult {
  bool valid = false;
  std::string invalid_reason;  // set when !valid: names the device, op or limit
  double step_seconds = 0;     // median of the timed steps
  double min_seconds = 0, max_seconds = 0;
  std::vector<double> step_samples;  // every timed step
  std::vector<DeviceStats> devices;  // from the median step
  std::vector<TransferStats> transfers;
  std::vector<TraceEvent> trace;  // of the last timed step, when asked for
  double final_loss = 0;
};

// The evaluator itself cannot go on (every worker of a pool is gone): no verdict on any placement,
// so a search must stop rather than count its candidates invalid.
class EvaluatorUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Evaluator {
 public:
  virtual ~Evaluator() = default;
  virtual EvaluationResult Evaluate(const graph::Placement& placement) = 0;
  // Several placements at once, results in their order. One by one here; an evaluator that can
  // judge several at the same time (the simulator, on every core) overrides it. A search hands
  // over all the candidates of a step in one call.
  virtual std::vector<EvaluationResult> EvaluateBatch(
      std::span<const graph::Placement> placements) {
    std::vector<EvaluationResult> results;
    results.reserve(placements.size());
    for (const graph::Placement& placement : placements) results.push_back(Evaluate(placement));
    return results;
  }
  virtual std::string name() const = 0;
  // Whether a placement always gets the same answer (a simulator): one round of a side-by-side
  // then says everything, where measured step times need several.
  virtual bool deterministic() const { return false; }
};

}  // namespace placer::graph
