// A search's run directory: everything the search writes, and what it reads back to resume.
//
//   search.csv                 one row per candidate judged (append-only; its `candidate` column
//                              rebuilds the cache of judged candidates on resume)
//   checkpoint.pt              policy, optimiser, random states and the loop's state; written
//                              atomically every few steps and at the end
//   best_placement.yaml/.pb/.pbtxt   the best placement so far (at checkpoints and at the end)
//   events.out.tfevents.*      TensorBoard curves
//   .lock                      while a run uses the directory: its PID (placer/run_lock.h)
// and, when asked, a live progress line on stderr. What is written per candidate does not grow
// with the number of candidates judged before (no whole cache rewritten at every checkpoint).
#pragma once

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "placer/action_space.h"
#include "placer/candidate_evaluator.h"
#include "placer/learner.h"

namespace placer::proto {
class TensorBoardWriter;
}

namespace placer::search {

// A run directory that cannot be used as asked: a fresh run where a search is already
// checkpointed, a resume without a checkpoint, or a checkpoint that is corrupt or of another run.
// (Failures to write, a full disk say, are std::runtime_error.)
class RunDirectoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a checkpoint must match to be resumed: the same groups, devices and replica counts mean
// the same decisions.
struct RunIdentity {
  std::string model;
  std::string grouping_name;  // e.g. "coarsen, max_groups 256"
  std::string grouping_fingerprint;
  int groups = 0;
  std::vector<std::string> devices;
  std::vector<int> replica_counts;
  std::vector<int> micro_batch_counts = {1};  // {1} in runs saved before pipelines were searched
  // "RxM" per replicated pipeline searched; none in runs saved before they were.
  std::vector<std::string> replicated_pipelines;
  // "R/tT" per tensor-parallel shape searched; none in runs saved before they were.
  std::vector<std::string> tensor_parallel;
  nlohmann::json ToJson() const;
  static RunIdentity FromJson(const nlohmann::json& json);
};

// A step time as the log keeps it (kLoggedSecondsDigits decimals: whole nanoseconds). The search
// judges with these values, so that a search resumed from its log compares exactly what an
// uninterrupted one compared: two placements a few ulps apart (a pipeline whose moved group is
// off the critical path) would otherwise tie only after the resume and be ranked differently.
inline constexpr int kLoggedSecondsDigits = 9;  // decimals of the CSV's step_seconds
inline double AsLogged(double seconds) {
  constexpr double kScale = [] {
    double scale = 1;
    for (int digit = 0; digit < kLoggedSecondsDigits; ++digit) scale *= 10;
    return scale;
  }();
  return std::isfinite(seconds) ? std::round(seconds * kScale) / kScale : seconds;
}

// One judged candidate, as the log keeps it.
struct LogRow {
  int step = 0;        // policy step; -1 for warm starts
  std::string phase;   // "warm start", "policy", "refinement", "random"
  int sample = 0;      // index within its batch
  std::string origin;  // the warm start's name, or empty
  Candidate candidate;
  bool valid = false;
  double seconds = 0;  // when valid
  double reward = 0;
  bool cached = false;  // judged before; costs nothing
  std::string reason;   // when invalid
};

struct StepReport {
  int report = 0;  // counts every report (policy steps and refinement chunks): TensorBoard's x
  int step = 0;
  int max_steps = 0;
  int evaluations = 0;
  double wall_seconds = 0;
  double max_wall_seconds = 0;
  double best_seconds = 0;
  double mean_seconds = 0;
  double entropy = 0;
  double clipped_fraction = 0;
  std::string phase;
};

class RunDirectory {
 public:
  // Creates `dir`. A fresh run refuses a directory that holds a checkpoint (resume it, or choose
  // another directory); a resumed one needs one: RunDirectoryError saying which.
  RunDirectory(std::filesystem::path dir, bool resume, RunIdentity identity,
               const CandidateEvaluator* evaluator, bool progress);
  // The constructor's refusals, for callers to check before any costly work.
  static void CheckUsable(const std::filesystem::path& dir, bool resume);
  ~RunDirectory();

  const std::filesystem::path& dir() const { return dir_; }
  bool resuming() const { return resume_; }

  // Restores `learner` and returns the loop's state saved with it, with the log truncated to
  // what the checkpoint had seen and its rows returned (to rebuild the cache). Throws
  // RunDirectoryError naming the file when the checkpoint or the log is corrupt or of another run
  // (the difference named).
  struct Resumed {
    nlohmann::json state;
    std::vector<LogRow> rows;
  };
  Resumed Resume(Learner& learner);

  void Log(const LogRow& row);
  void StepDone(const StepReport& report);
  // Writes the best placement (when `best` changed since the last call) and the checkpoint.
  void Checkpoint(const Learner& learner, nlohmann::json state,
                  const std::optional<RankedCandidate>& best);
  void EndProgress();

 private:
  void CheckLog();
  std::filesystem::path dir_;
  bool resume_;
  RunIdentity identity_;
  const CandidateEvaluator* evaluator_;
  bool progress_;
  std::ofstream csv_;
  std::unique_ptr<proto::TensorBoardWriter> tensorboard_;
  std::string best_written_;  // key of the best placement on disk
};

// best_placement.yaml, .pb and .pbtxt in `dir`, each written atomically, for `candidate` placed
// as `placement` on `graph`: they carry its replica count (`replicas: R`) when the model is
// replicated, and its shards per replica (`tensor_ways: T`) when it is split.
void WriteBestPlacement(const std::filesystem::path& dir, const graph::Graph& graph,
                        const graph::Placement& placement, const Candidate& candidate,
                        const std::string& model, double seconds, const std::string& evaluator);

}  // namespace placer::search
