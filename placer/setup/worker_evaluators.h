// What a `placer worker` judges with: the evaluators of a search's config, built on this host as
// the search builds its own (search_setup.h): the training step at each step shape a task asks
// for (StepCache's, each built when first asked for and kept), measured on this host's devices or
// simulated with the config's cost model.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "graph/device.h"
#include "graph/evaluator.h"
#include "graph/ir.h"
#include "placer/config/config.h"
#include "placer/setup/step_cache.h"
#include "proto/evaluation_wire.h"
#include "runtime/sim/cost_model.h"

namespace placer::setup {

class WorkerEvaluators {
 public:
  // Throws config::ConfigError for devices this host lacks.
  explicit WorkerEvaluators(config::Config config);

  // Judges `task`'s placement with its evaluator kind. Throws InputError for a placement of other
  // devices or another model.
  graph::EvaluationResult Evaluate(const proto::EvaluationTask& task);

 private:
  graph::Evaluator& EvaluatorFor(graph::EvaluatorKind kind, StepShape shape);

  config::Config config_;
  graph::DeviceSet devices_;
  std::vector<std::string> names_;
  StepCache steps_;
  std::unique_ptr<sim::CostModel> costs_;
  std::map<std::pair<graph::EvaluatorKind, StepShape>, std::unique_ptr<graph::Evaluator>>
      evaluators_;
};

}  // namespace placer::setup
