// The learned edit scorer: a small network from an edit's features (edit_features.h) to the
// log(T' / T) it is predicted to cause, trained across graphs and machines on the refiner's
// judged edits (pretraining.h), and, during a search, on the run's own (a few gradient steps
// per round: DOPPLER's last stage, learning on the system it places for).
//
// Its size depends on neither the graph nor the machine: kEditFeatureDims inputs, whatever the
// group or device count. The file holds the feature version, the input and hidden sizes and the
// weights; a file of another version or shape is refused, naming the file and the difference.
#pragma once

#include <torch/nn/modules/container/sequential.h>
#include <torch/optim/adam.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "placer/edit_proposer.h"

namespace placer::search {

struct EditModelOptions {
  int hidden = 64;
  double learning_rate = 1e-3;
  double online_learning_rate = 3e-4;  // steps on a search's own judged edits
  bool learn_online = true;
};

// A labelled edit.
struct EditSample {
  EditFeatureRow features{};
  double log_change = 0;
};

class EditModel final : public EditScorer {
 public:
  explicit EditModel(EditModelOptions options = {}, uint64_t seed = 1);

  std::vector<double> Predict(const std::vector<EditFeatureRow>& rows) override;
  // With learn_online: one gradient step on the judged rows.
  void Observe(const std::vector<EditFeatureRow>& rows,
               const std::vector<double>& log_changes) override;

  // The weights and the online optimizer's moments, hex-encoded (a resumed search learns on as
  // the uninterrupted one would).
  std::string SaveState() const override;
  void LoadState(const std::string& state) override;

  // `epochs` passes over `samples` in shuffled minibatches of `batch`, the order drawn from
  // `seed`; the mean loss of the last epoch.
  double Train(const std::vector<EditSample>& samples, int epochs, int batch, uint64_t seed);
  // Mean loss and the share of pairs of samples within one list (`lists`: [begin, end) ranges of
  // `samples`, the edits of one round) that the model orders as their outcomes are ordered.
  struct Quality {
    double loss = 0;
    double pair_accuracy = 0;
  };
  Quality Assess(const std::vector<EditSample>& samples,
                 const std::vector<std::pair<size_t, size_t>>& lists);

  void Save(const std::filesystem::path& file) const;
  // Throws std::runtime_error naming the file when it is missing, unreadable, or of another
  // feature version or shape.
  static std::unique_ptr<EditModel> Load(const std::filesystem::path& file,
                                         EditModelOptions options = {});

 private:
  at::Tensor Forward(const at::Tensor& inputs);
  double Step(const at::Tensor& inputs, const at::Tensor& targets, torch::optim::Adam& optimizer);

  EditModelOptions options_;
  torch::nn::Sequential net_;
  std::unique_ptr<torch::optim::Adam> optimizer_, online_optimizer_;
};

at::Tensor RowsToTensor(const std::vector<EditFeatureRow>& rows);

// The share of pairs of samples within one list (`lists`: [begin, end) ranges of `samples`, the
// edits of one round) whose `predicted` values are ordered as their outcomes are (pairs of equal
// outcomes left out); 0 without pairs.
double InRoundPairAccuracy(const std::vector<double>& predicted,
                           const std::vector<EditSample>& samples,
                           const std::vector<std::pair<size_t, size_t>>& lists);

}  // namespace placer::search
