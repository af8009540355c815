// What one edit of the refiner changes, as numbers that mean the same in any graph and on any
// machine: the edit proposers (edit_proposer.h) rank candidate edits by them before any is judged.
//
// From the current candidate's last judgement (its step time T and how long each device was
// busy) and the groups' FLOPs, bytes and traffic, an EditEstimator estimates for a neighbour:
//   - the devices' compute loads (each replica of a group runs its share of the group's work on
//     its device; the work-to-seconds scale is calibrated on the judged busy times, so that the
//     estimate needs no cost model), and what the edit does to the busiest and the mean load;
//   - the bytes that cross devices (forward values and their gradients between groups on
//     different devices, per replica) and the bytes of the gradient all-reduce (a group whose
//     replicas span k devices all-reduces 2 (k - 1) / k of its parameters), in seconds at the
//     problem's typical link speed;
//   - where the moved groups sit: their share of the work, whether they lie on the critical path
//     of the group DAG (top level + bottom level over the longest path), whether their work
//     leaves the busiest device or lands on the least busy one;
//   - the step shape's change (replicas, micro-batches) and the edit's kind;
//   - what a group-level list schedule of the step (group_schedule.h) predicts it does to the
//     step time, which sees the critical path and the slack the loads do not.
// Every time is divided by T and every byte count by the graph's total, so one model serves
// graphs of 10 or 10,000 groups on 2 or 32 devices. Torch-free.
#pragma once

#include <array>
#include <vector>

#include "graph/group_features.h"
#include "placer/action_space.h"
#include "placer/group_schedule.h"

namespace placer::search {

// The refiner's edits (refiner.h), as the features see them.
enum class EditKind {
  kMoveGroup,
  kSwapSegments,
  kShiftBoundary,
  kMoveBand,
  kMoveSegment,
  kRebalance,
  kChangeReplicas,
  kChangeShape,
  kCount,  // not an edit: how many there are
};
inline constexpr int kEditKinds = static_cast<int>(EditKind::kCount);

// The features' order; kEditFeatureDims in all. Bump kEditFeatureVersion whenever it changes: a
// model file trained on other features is refused.
enum EditFeature {
  kShapeChanged,            // 1 when the replica count, micro-batch count or schedule changes
  kReplicaChange,           // log2(R' / R)
  kMicroBatchChange,        // log2(M' / M)
  kMovedGroups,             // groups whose option changes / groups
  kMovedWork,               // their work / all work
  kMaxLoadChange,           // (busiest device's estimated load after - before) / T
  kMeanLoadChange,          // (mean load after - before) / T
  kImbalanceChange,         // ((max - mean) after - (max - mean) before) / T
  kCutSecondsChange,        // (cross-device bytes after - before) at the typical link / T
  kAllReduceSecondsChange,  // (all-reduce bytes after - before) at the typical link / T
  kCutBytesChange,          // (cross-device bytes after - before) / all forward traffic x 2
  kLeavesBusiest,           // the moved work's share that leaves the busiest (judged) device
  kLandsOnLeastBusy,        // the moved work's share that lands on the least busy (judged) device
  kMeanCriticality,         // mean over moved groups of (t-level + b-level) / critical path
  kMaxCriticality,          // the largest of them
  kComputeBound,            // busiest judged device's busy time / T, before
  kCommunicationShare,      // (cut + all-reduce seconds) / T, before
  kScheduleLogChange,       // log(S' / S): the group-level schedule's step times, after and before
  kFirstKind,               // one-hot EditKind, kEditKinds of them
  kEditFeatureDims = kFirstKind + kEditKinds,
};
inline constexpr int kEditFeatureVersion = 2;
using EditFeatureRow = std::array<float, kEditFeatureDims>;

class EditEstimator {
 public:
  // `seconds_per_byte`: a typical link between two of the devices (0: unknown, traffic then
  // counts in bytes only).
  EditEstimator(const ActionSpace& space, const graph::GroupFeatures& features,
                double seconds_per_byte, ScheduleCosts schedule_costs = {});

  // The candidate the next edits start from, judged `seconds` (finite) with devices busy for
  // `busy` (may be empty).
  void SetCurrent(const Candidate& current, double seconds, const std::vector<double>& busy);
  EditFeatureRow Features(const Candidate& neighbour, EditKind kind) const;

  // The hand-written estimate of log(T' / T) from the features: the change of the busiest
  // device's load plus that of the traffic's seconds (the control the learned scorer must beat).
  static double EstimatedLogChange(const EditFeatureRow& row);
  // The second hand-written control: the group-level schedule's change.
  static double ScheduledLogChange(const EditFeatureRow& row) { return row[kScheduleLogChange]; }

 private:
  struct Estimate {
    std::vector<double> loads;  // per device, in work units
    double cut_bytes = 0;
    double all_reduce_bytes = 0;
  };
  Estimate EstimateOf(const Candidate& candidate) const;

  ActionSpace space_;
  std::vector<graph::GroupEdge> edges_;
  std::vector<double> param_bytes_;  // per group
  double seconds_per_byte_;
  std::vector<double> work_;         // per group
  std::vector<double> criticality_;  // per group: (t-level + b-level) / critical path, in (0, 1]
  double total_work_ = 0;
  double total_traffic_ = 0;  // forward bytes between groups, x 2 for their gradients

  Candidate current_;
  double seconds_ = 1;
  double seconds_per_work_ = 0;  // calibrated on the judged busy times
  Estimate now_;
  int busiest_ = -1, least_busy_ = -1;
  double communication_share_ = 0;
  double compute_bound_ = 0;
  GroupSchedule schedule_;
  double schedule_seconds_per_work_ = 0;  // calibrated on the judged busy times, launches apart
  double scheduled_seconds_ = 0;          // the current candidate's, by schedule_
};

}  // namespace placer::search
