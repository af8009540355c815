// `placer pretrain`: the learned edit scorer (placer/edit_model.h) trained across graphs and
// machines, offline, at simulator speed, by expert iteration:
//   iteration 0   refinement with uniform edits on a corpus of generated models
//                 (graph/generated_models.h) over simulated machines (2, 4 or 8 GPUs; PCIe or
//                 NVLink; one host or two), from the best of their baselines; every judged edit
//                 is a labelled sample (its features, the log(T' / T) the simulator gave);
//   train         a fresh network on all samples so far (a share held back: loss and in-round
//                 ordering accuracy on it are reported);
//   iteration k   the same corpus size, new problems, refinement screened by the network just
//                 trained (its edits are better, so are the states it visits and labels), then
//                 train again.
// The directory holds the network after every iteration (edit_model.pt), the samples
// (samples.bin) and the progress (state.txt): a run stopped anywhere resumes from its last
// finished iteration and ends with the same network as one that never stopped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "graph/device.h"
#include "graph/generated_models.h"
#include "placer/edit_model.h"
#include "runtime/sim/cost_model.h"

namespace placer::setup {

struct SimulatedProblem;

struct PretrainOptions {
  int iterations = 3;
  int problems_per_iteration = 30;
  int refine_rounds = 12;  // per problem and iteration
  int min_blocks = 10, max_blocks = 120;
  std::vector<int> device_counts = {2, 4, 8};
  int max_groups = 64;  // the corpus's groups (coarsened), as a search groups a model
  std::vector<int64_t> batches = {64};  // minibatch sizes drawn from (traffic against compute)
  int epochs = 30;
  int batch = 256;
  double validation_share = 0.1;
  uint64_t seed = 1;
  search::EditModelOptions model;
};

// One problem of the corpus: what it is, for the log.
struct CorpusProblem {
  graph::GeneratedModelOptions model;
  int devices = 2;
  bool nvlink = false;
  int hosts = 1;
  int64_t batch = 64;
  std::string Describe() const;
};
CorpusProblem CorpusProblemFor(const PretrainOptions& options, int iteration, int index);
// The generated validation problems the benchmarks choose defaults on (never the held-out set):
// a seed no pretraining uses, models coarsened to at most `max_groups` groups (max_groups / 2 to
// 4 max_groups blocks), batches 32, 128 and 512. Problem i is CorpusProblemFor(options, 0, i).
PretrainOptions ValidationProblems(int max_groups);

// A corpus problem built: its machine's cost model and devices, the simulated problem, the
// typical link, and the starts refinement has (one device, data parallelism, m-ETF, METIS).
struct CorpusInstance {
  CorpusInstance(const CorpusProblem& problem, const PretrainOptions& options);
  // Any model: `build_forward` at `batch` on `devices` simulated GPUs (NVLink or PCIe, over
  // `hosts` hosts), coarsened to at most `max_groups` groups.
  // `micro_batch_counts` above 1 add one-replica pipelines to its action space.
  CorpusInstance(const graph::ForwardBuilder& build_forward, int64_t batch, int devices,
                 bool nvlink, int hosts, int max_groups,
                 const std::vector<int>& micro_batch_counts = {1});
  ~CorpusInstance();
  std::unique_ptr<sim::RooflineCostModel> costs;
  graph::DeviceSet devices;
  std::unique_ptr<SimulatedProblem> problem;
  double seconds_per_byte = 0;
  search::ScheduleCosts schedule_costs;
  std::vector<search::Candidate> starts;
};

struct PretrainProgress {
  int iteration = 0;   // just finished
  size_t samples = 0;  // so far
  double train_loss = 0;
  double validation_loss = 0;
  double validation_pair_accuracy = 0;  // in-round ordering of held-back edits
  double estimate_pair_accuracy = 0;    // the hand-written estimate's, on the same edits
  double schedule_pair_accuracy = 0;    // the group-level schedule's, on the same edits
  double seconds = 0;                   // of this iteration
};

// Runs (or resumes) pretraining into `directory`, reporting on `log`; `stop()` is asked between
// problems (a stopped iteration is redone on resume). Returns the progress of each iteration run.
std::vector<PretrainProgress> Pretrain(
    const PretrainOptions& options, const std::filesystem::path& directory, std::ostream& log,
    const std::function<bool()>& stop = [] { return false; });

inline constexpr const char* kEditModelFile = "edit_model.pt";

}  // namespace placer::setup
