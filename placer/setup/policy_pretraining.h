// `placer pretrain --policy`: the graph policy (placer/graph_policy.h) trained across graphs and
// machines, offline, at simulator speed, by expert iteration (issue 27):
//   label     per corpus problem, refinement from the best of its baselines (and, after the
//             first iteration, from the policy's own greedy answer: the policy seeds better
//             labels); the fastest placement known, its devices renumbered in the order its
//             groups use them where that is no slower, is the problem's label;
//   imitate   the one network, bound to each problem in turn, raises the probability of its
//             label, teacher-forced and along its own decoding (DAgger-like), for some epochs;
//   repeat    with the network just trained.
// Every k-th problem is held back from imitation: its greedy answer against its label is the
// report's measure of what the policy learned about graphs it did not train on.
// The directory holds the network after every iteration (graph_policy.pt: what search.policy_file
// reads), the optimiser and the labels: a run stopped anywhere resumes from its last finished
// iteration and ends with the same network as one that never stopped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <iosfwd>
#include <optional>
#include <string>
#include <vector>

#include "graph/data_parallel.h"
#include "placer/action_space.h"
#include "placer/search_options.h"
#include "placer/setup/pretraining.h"

namespace placer::setup {

// One model on one simulated machine of GPUs.
struct PolicyCorpusProblem {
  std::string name;
  graph::ForwardBuilder build_forward;
  int64_t batch = 64;
  int devices = 2;
  bool nvlink = false;
  int hosts = 1;
  // Above 1: one-replica pipelines in its action space, as the search has them by default.
  std::vector<int> micro_batches = {1};
};

struct PolicyPretrainOptions {
  int iterations = 3;
  int refine_rounds = 30;  // per problem and iteration
  int epochs = 30;         // passes over the corpus per iteration
  double learning_rate = 0.003;
  int own_decoding_samples = 2;  // per label and step: its decisions where the policy's lead
  int max_groups = 64;           // the corpus's groups (coarsened), as a search groups a model
  int hold_back_every = 5;       // every k-th problem is not imitated (0: none)
  uint64_t seed = 1;
  search::PolicyOptions policy;  // kind graph
};

// `problems` of the generated families (graph/generated_models.h) drawn as `placer pretrain`'s
// edit corpus draws them from `corpus` (blocks, device counts, batches, seed, groups), each with
// the search's default micro-batch counts (1, 2, 4, 8 that divide its batch) when `pipelines`.
std::vector<PolicyCorpusProblem> GeneratedPolicyCorpus(const PretrainOptions& corpus, int problems,
                                                       bool pipelines = false);

// `c` with its devices renumbered in the order its groups first use them (replica by replica),
// when every option has a renumbered counterpart (none otherwise): devices are interchangeable
// up to their links, and labels that number them arbitrarily teach a policy to spread its
// probability over equivalent devices, which its greedy answer then never picks. Pretraining
// keeps a label renumbered where the simulator finds it no slower.
std::optional<search::Candidate> CanonicalDeviceOrder(const search::ActionSpace& space,
                                                      const search::Candidate& c);

struct PolicyPretrainProgress {
  int iteration = 0;            // just finished
  double label_gain = 0;        // geometric mean of label / best baseline, over the corpus
  double trained_greedy = 0;    // geometric mean of greedy / label on imitated problems
  double held_back_greedy = 0;  // the same on held-back problems (0: none)
  double seconds = 0;           // of this iteration
};

// Runs (or resumes) pretraining of `corpus` into `directory`, reporting on `log`; `stop()` is
// asked between problems and epochs (a stopped iteration is redone on resume).
std::vector<PolicyPretrainProgress> PretrainPolicy(
    const std::vector<PolicyCorpusProblem>& corpus, const PolicyPretrainOptions& options,
    const std::filesystem::path& directory, std::ostream& log,
    const std::function<bool()>& stop = [] { return false; });

inline constexpr const char* kGraphPolicyFile = "graph_policy.pt";

}  // namespace placer::setup
