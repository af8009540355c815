// Which of the refiner's random edits get judged. The refiner (refiner.h) draws its edits
// uniformly; with a scorer it draws `screening` times as many, scores each by what it is
// predicted to do to the step time (edit_features.h), and judges the most promising, plus a few
// of the rest drawn uniformly so that the scorer keeps seeing what it ranks low. A judged edit's
// outcome goes back to the scorer (a learned one keeps learning from the run's own rewards) and
// to whoever records them (pretraining's labels).
//   - uniform: no scorer, the refiner as it always was (the default);
//   - estimate: the hand-written control, EditEstimator::EstimatedLogChange (the busiest device's
//     load and the traffic's seconds);
//   - learned: a network trained across graphs (edit_model.h);
//   - schedule: the second hand-written control, a group-level list schedule of the step
//     (group_schedule.h), which sees the critical path and the slack.
#pragma once

#include <array>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "placer/edit_features.h"

namespace placer::search {

enum class EditProposal { kUniform, kEstimate, kLearned, kSchedule };
// In enum order (the config's search.edit_proposer values).
inline constexpr std::array<std::string_view, 4> kEditProposalNames = {"uniform", "estimate",
                                                                       "learned", "schedule"};
// ParseEditProposal throws std::invalid_argument naming the text and the choices.
std::string_view EditProposalName(EditProposal proposal);
EditProposal ParseEditProposal(std::string_view name);

class EditScorer {
 public:
  virtual ~EditScorer() = default;
  // Per row, the predicted log(T' / T): the lower, the more promising.
  virtual std::vector<double> Predict(const std::vector<EditFeatureRow>& rows) = 0;
  // What the judged rows did (log(T' / T), clipped; an invalid candidate counts as
  // kInvalidLogChange). Default: nothing.
  virtual void Observe(const std::vector<EditFeatureRow>& /*rows*/,
                       const std::vector<double>& /*log_changes*/) {}
  // What it has learned during a search, as text for the search's checkpoint (empty: nothing).
  virtual std::string SaveState() const { return {}; }
  virtual void LoadState(const std::string& /*state*/) {}
};
inline constexpr double kInvalidLogChange = 1.0;
inline constexpr double kMaxLogChange = 1.0;

// A hand-written control: EditEstimator::EstimatedLogChange, or with `scheduled` its
// ScheduledLogChange.
class EstimateScorer final : public EditScorer {
 public:
  explicit EstimateScorer(bool scheduled = false) : scheduled_(scheduled) {}
  std::vector<double> Predict(const std::vector<EditFeatureRow>& rows) override;

 private:
  bool scheduled_;
};

// How the refiner screens its edits; inactive (the uniform refiner) without a scorer and without
// a recorder.
struct EditGuide {
  EditScorer* scorer = nullptr;
  int screening = 4;             // edits drawn per edit judged
  double explore_share = 0.25;   // of the judged, drawn uniformly from those ranked lower
  double seconds_per_byte = 0;   // a typical link (EditEstimator)
  ScheduleCosts schedule_costs;  // what the group-level schedule prices with (EditEstimator)
  // Every judged edit's features and outcome, in judging order (may be empty).
  std::function<void(const std::vector<EditFeatureRow>&, const std::vector<double>&)> record;
  bool active() const { return scorer != nullptr || static_cast<bool>(record); }
};

}  // namespace placer::search
