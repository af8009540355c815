// How many placements the search can judge (issue 30): for each config, the set-up's seconds and
// then, for every step shape of the search, simulations per second of single-group edits (one
// group of the shape's best warm start moved to another allowed option, as the refiner's edits
// do), one at a time through the search's own judge, and the process's peak memory at the end.
// Each rate is the median of 3 runs of at least `seconds` each. The digest of every edit's verdict
// (step time, busy time and peak memory per device) lets two builds show that they judge alike.
// Beside it, the share of a simulation that exact re-simulation from a saved point could skip
// (UnchangedShare): the ceiling of delta simulation by prefix reuse.
//
// Usage: sim_speed_bench [--seconds S] [--shape "R 1"] <config.yaml>...
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench/timing.h"
#include "graph/micro_batches.h"
#include "graph/training_step.h"
#include "placer/config/config.h"
#include "placer/setup/search_setup.h"
#include "runtime/process_memory.h"
#include "runtime/sim/simulator.h"

namespace {

using namespace placer;

constexpr int kRepetitions = 3;

// `count` candidates, each `start` with one random group moved to another option its shape allows.
std::vector<search::Candidate> SingleGroupEdits(const search::ActionSpace& space,
                                                const search::Candidate& start, int count,
                                                std::mt19937& random) {
  std::vector<int> allowed;
  for (int option = 0; option < space.num_options(); ++option) {
    if (space.Allowed(option, start.replicas)) allowed.push_back(option);
  }
  std::vector<search::Candidate> edits;
  std::uniform_int_distribution<size_t> group(0, start.options.size() - 1);
  std::uniform_int_distribution<size_t> option(0, allowed.size() - 1);
  for (int tries = 0; static_cast<int>(edits.size()) < count && tries < 100 * count; ++tries) {
    search::Candidate edit = start;
    int& chosen = edit.options[group(random)];
    const int next = allowed[option(random)];
    if (next == chosen) continue;
    chosen = next;
    try {
      space.Check(edit, static_cast<int>(edit.options.size()));
    } catch (const std::exception&) {
      continue;
    }
    edits.push_back(std::move(edit));
  }
  return edits;
}

// What exact re-simulation from a saved point (issue 30's delta simulation) could skip for `edit`
// at most: the share of ops that finish, in the start's simulation, before the first moment the
// edit can change anything, when a value that a moved op reads exists (at the step's start for
// the minibatch and for parameters pushed to other devices). Ops that issue their own copies end
// with them (the trace's job), which makes the share an overestimate.
double UnchangedShare(const sim::Simulator& simulator, const graph::Placement& start_placement,
                      const sim::SimulationResult& start, const graph::Placement& edit) {
  const graph::Graph& g = simulator.graph();
  const std::vector<std::string>& lanes = simulator.device_names();
  std::vector<double> end(static_cast<size_t>(g.num_ops()), 0);
  for (const graph::TraceEvent& e : start.trace) {
    if (std::find(lanes.begin(), lanes.end(), e.lane) == lanes.end()) continue;  // a copy
    if (const auto id = g.FindOp(e.name)) {
      end[static_cast<size_t>(*id)] = (e.start_us + e.duration_us) * 1e-6;
    }
  }
  const std::vector<int> before = graph::ExpandPlacement(g, start_placement);
  const std::vector<int> after = graph::ExpandPlacement(g, edit);
  double first_change = std::numeric_limits<double>::infinity();
  for (graph::OpId id = 0; id < g.num_ops(); ++id) {
    if (before[static_cast<size_t>(id)] == after[static_cast<size_t>(id)]) continue;
    for (const graph::TensorId t : g.op(id).inputs) {
      const graph::OpId producer = g.tensor(t).producer;
      if (producer != graph::kNoOp) {
        first_change = std::min(first_change, end[static_cast<size_t>(producer)]);
        continue;
      }
      // A parameter read only where it lives, before and after, changes no step-start push
      // (only memory, by the same bytes from the start, which a saved point could add).
      bool pushed = g.tensor(t).kind != graph::TensorKind::kParameter;
      const graph::OpId owner = graph::OwnerOf(g, t);
      for (const graph::OpId reader : g.tensor(t).consumers) {
        const auto r = static_cast<size_t>(reader);
        const auto o = static_cast<size_t>(owner);
        pushed = pushed || before[r] != before[o] || after[r] != after[o];
      }
      if (pushed) first_change = 0;
    }
  }
  const auto unchanged =
      std::count_if(end.begin(), end.end(), [&](double seconds) { return seconds < first_change; });
  return static_cast<double>(unchanged) / static_cast<double>(g.num_ops());
}

std::string ShapeName(const search::Candidate& c) {
  std::string name = fmt::format("R {}", c.replicas);
  if (c.micro_batches > 1)
    name += fmt::format(" x M {} {}", c.micro_batches, graph::ToString(c.schedule));
  if (c.tensor_ways > 1) name += fmt::format(" (TP {})", c.tensor_ways);
  return name;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  std::string only_shape;  // empty: every shape
  std::vector<std::string> configs;
  for (int a = 1; a < argc; ++a) {
    if (std::strcmp(argv[a], "--seconds") == 0 && a + 1 < argc) {
      seconds = std::stod(argv[++a]);
    } else if (std::strcmp(argv[a], "--shape") == 0 && a + 1 < argc) {
      only_shape = argv[++a];
    } else {
      configs.push_back(argv[a]);
    }
  }
  if (configs.empty()) {
    fmt::print(stderr, "usage: sim_speed_bench [--seconds S] [--shape \"R 1\"] <config.yaml>...\n");
    return 2;
  }
  for (const std::string& path : configs) {
    const config::Config config = config::LoadConfig(path);
    const auto start = bench::Clock::now();
    std::ostringstream quiet;
    const std::unique_ptr<setup::SearchSetup> setup = setup::BuildSearchSetup(config, quiet);
    const double setup_seconds = bench::SecondsSince(start);
    const search::CandidateEvaluator& judge = *setup->simulated;
    fmt::print("{}: {} ({} ops at one replica), set-up {:.1f} s\n", path,
               setup::DescribeSetup(*setup), setup->base().num_ops(), setup_seconds);
    // The best warm start of each shape, judged once.
    std::map<std::string, std::pair<double, search::Candidate>> best;
    const std::vector<search::NamedCandidate> starts = setup->WarmStarts();
    std::vector<search::Candidate> candidates;
    for (const auto& s : starts) candidates.push_back(s.candidate);
    const std::vector<graph::EvaluationResult> judged = judge.Evaluate(candidates);
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (!judged[i].valid) continue;
      const std::string shape = ShapeName(candidates[i]);
      auto it = best.find(shape);
      if (it == best.end() || judged[i].step_seconds < it->second.first) {
        best[shape] = {judged[i].step_seconds, candidates[i]};
      }
    }
    fmt::print(
        "| shape | ops | step of the start | single-group edits per second | ops before the "
        "first change (median share) | digest |\n");
    fmt::print("|---|---:|---:|---:|---:|---|\n");
    for (const auto& [shape, start_and_seconds] : best) {
      if (!only_shape.empty() && shape != only_shape) continue;
      const search::Candidate& from = start_and_seconds.second;
      std::mt19937 random(static_cast<uint32_t>(std::hash<std::string>{}(shape)));
      const std::vector<search::Candidate> edits =
          SingleGroupEdits(judge.space(), from, 64, random);
      if (edits.empty()) continue;
      const std::vector<graph::EvaluationResult> verdicts = judge.Evaluate(edits);
      std::string verdict_text;
      for (const graph::EvaluationResult& v : verdicts) {
        verdict_text += fmt::format("{} {:.17g}", v.valid, v.step_seconds);
        for (const graph::DeviceStats& d : v.devices) {
          verdict_text += fmt::format(" {:.17g} {}", d.busy_seconds, d.peak_memory_bytes);
        }
        verdict_text += ";";
      }
      const search::ReplicatedModel& model = judge.model(from);
      const sim::Simulator simulator(model.graph, setup->devices, *setup->costs.front());
      const graph::Placement start_placement = judge.PlacementOf(from);
      const sim::SimulationResult start = simulator.Simulate(start_placement, true);
      std::vector<double> unchanged;
      for (const search::Candidate& edit : edits) {
        unchanged.push_back(
            UnchangedShare(simulator, start_placement, start, judge.PlacementOf(edit)));
      }
      std::vector<double> rates;
      for (int r = 0; r < kRepetitions; ++r) {
        const auto begin = bench::Clock::now();
        int done = 0;
        while (bench::SecondsSince(begin) < seconds || done == 0) {
          judge.Evaluate(std::span(&edits[static_cast<size_t>(done) % edits.size()], 1));
          ++done;
        }
        rates.push_back(done / bench::SecondsSince(begin));
      }
      fmt::print("| {} | {} | {:.3f} ms | {:.1f} | {:.2f} | {:016x} |\n", shape,
                 model.graph.num_ops(), start_and_seconds.first * 1e3, bench::Median(rates),
                 bench::Median(unchanged), std::hash<std::string>{}(verdict_text));
    }
    fmt::print("{}\n\n", runtime::DescribePeakMemory());
    std::cout.flush();
  }
  return 0;
}
