#include "placer/edit_proposer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>

namespace placer::search {

std::string_view EditProposalName(EditProposal proposal) {
  return kEditProposalNames[static_cast<size_t>(proposal)];
}

EditProposal ParseEditProposal(std::string_view name) {
  const auto& names = kEditProposalNames;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) return static_cast<EditProposal>(i);
  }
  throw std::invalid_argument(
      fmt::format("unknown edit proposer '{}' ({})", name, fmt::join(kEditProposalNames, ", ")));
}

std::vector<double> EstimateScorer::Predict(const std::vector<EditFeatureRow>& rows) {
  std::vector<double> scores;
  scores.reserve(rows.size());
  for (const EditFeatureRow& row : rows) {
    scores.push_back(scheduled_ ? EditEstimator::ScheduledLogChange(row)
                                : EditEstimator::EstimatedLogChange(row));
  }
  return scores;
}

}  // namespace placer::search
