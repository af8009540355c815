#include "placer/edit_model.h"

#include <fmt/format.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/serialize.h>
#include <torch/utils.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>

namespace placer::search {

namespace {

// Huber: the outcomes of a few edits (an invalid candidate, a replica change) are far from the
// rest; they must not dominate the ordering of the ordinary ones.
at::Tensor Loss(const at::Tensor& predicted, const at::Tensor& targets) {
  return torch::nn::functional::huber_loss(
      predicted, targets, torch::nn::functional::HuberLossFuncOptions().delta(0.1));
}

}  // namespace

at::Tensor RowsToTensor(const std::vector<EditFeatureRow>& rows) {
  at::Tensor t = torch::empty({static_cast<int64_t>(rows.size()), kEditFeatureDims});
  float* data = t.data_ptr<float>();
  for (size_t i = 0; i < rows.size(); ++i) {
    std::copy(rows[i].begin(), rows[i].end(), data + i * kEditFeatureDims);
  }
  return t;
}

double InRoundPairAccuracy(const std::vector<double>& predicted,
                           const std::vector<EditSample>& samples,
                           const std::vector<std::pair<size_t, size_t>>& lists) {
  int64_t agree = 0, pairs = 0;
  for (const auto& [begin, end] : lists) {
    for (size_t a = begin; a < end; ++a) {
      for (size_t b = a + 1; b < end; ++b) {
        if (samples[a].log_change == samples[b].log_change) continue;
        ++pairs;
        agree += (predicted[a] < predicted[b]) == (samples[a].log_change < samples[b].log_change);
      }
    }
  }
  return pairs > 0 ? static_cast<double>(agree) / static_cast<double>(pairs) : 0;
}

EditModel::EditModel(EditModelOptions options, uint64_t seed) : options_(options) {
  torch::manual_seed(seed);
  net_ = torch::nn::Sequential(torch::nn::Linear(kEditFeatureDims, options.hidden),
                               torch::nn::ReLU(), torch::nn::Linear(options.hidden, options.hidden),
                               torch::nn::ReLU(), torch::nn::Linear(options.hidden, 1));
  optimizer_ = std::make_unique<torch::optim::Adam>(
      net_->parameters(), torch::optim::AdamOptions(options.learning_rate));
  online_optimizer_ = std::make_unique<torch::optim::Adam>(
      net_->parameters(), torch::optim::AdamOptions(options.online_learning_rate));
}

at::Tensor EditModel::Forward(const at::Tensor& inputs) { return net_->forward(inputs).squeeze(1); }

std::vector<double> EditModel::Predict(const std::vector<EditFeatureRow>& rows) {
  if (rows.empty()) return {};
  torch::NoGradGuard no_grad;
  const at::Tensor out = Forward(RowsToTensor(rows)).contiguous();
  const float* p = out.data_ptr<float>();
  return std::vector<double>(p, p + rows.size());
}

double EditModel::Step(const at::Tensor& inputs, const at::Tensor& targets,
                       torch::optim::Adam& optimizer) {
  optimizer.zero_grad();
  at::Tensor loss = Loss(Forward(inputs), targets);
  loss.backward();
  optimizer.step();
  return loss.item<double>();
}

void EditModel::Observe(const std::vector<EditFeatureRow>& rows,
                        const std::vector<double>& log_changes) {
  if (!options_.learn_online || rows.empty()) return;
  const at::Tensor targets =
      torch::tensor(std::vector<float>(log_changes.begin(), log_changes.end()));
  Step(RowsToTensor(rows), targets, *online_optimizer_);
}

double EditModel::Train(const std::vector<EditSample>& samples, int epochs, int batch,
                        uint64_t seed) {
  if (samples.empty()) return 0;
  std::vector<EditFeatureRow> rows;
  std::vector<float> targets;
  for (const EditSample& s : samples) {
    rows.push_back(s.features);
    targets.push_back(static_cast<float>(s.log_change));
  }
  const at::Tensor x = RowsToTensor(rows), y = torch::tensor(targets);
  std::mt19937_64 rng(seed);
  std::vector<int64_t> order(samples.size());
  std::iota(order.begin(), order.end(), 0);
  double last = 0;
  for (int epoch = 0; epoch < epochs; ++epoch) {
    std::shuffle(order.begin(), order.end(), rng);
    double sum = 0;
    int steps = 0;
    for (size_t start = 0; start < order.size(); start += static_cast<size_t>(batch)) {
      const size_t end = std::min(order.size(), start + static_cast<size_t>(batch));
      const at::Tensor index =
          torch::tensor(std::vector<int64_t>(order.begin() + static_cast<std::ptrdiff_t>(start),
                                             order.begin() + static_cast<std::ptrdiff_t>(end)));
      sum += Step(x.index_select(0, index), y.index_select(0, index), *optimizer_);
      ++steps;
    }
    last = sum / std::max(1, steps);
  }
  return last;
}

EditModel::Quality EditModel::Assess(const std::vector<EditSample>& samples,
                                     const std::vector<std::pair<size_t, size_t>>& lists) {
  Quality q;
  if (samples.empty()) return q;
  std::vector<EditFeatureRow> rows;
  for (const EditSample& s : samples) rows.push_back(s.features);
  const std::vector<double> predicted = Predict(rows);
  std::vector<float> p(predicted.begin(), predicted.end()), t;
  for (const EditSample& s : samples) t.push_back(static_cast<float>(s.log_change));
  q.loss = Loss(torch::tensor(p), torch::tensor(t)).item<double>();
  q.pair_accuracy = InRoundPairAccuracy(predicted, samples, lists);
  return q;
}

std::string EditModel::SaveState() const {
  torch::serialize::OutputArchive archive, net, optimizer;
  net_->save(net);
  online_optimizer_->save(optimizer);
  archive.write("net", net);
  archive.write("optimizer", optimizer);
  std::ostringstream bytes;
  archive.save_to(bytes);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (unsigned char c : bytes.str()) {
    hex.push_back(kHex[c >> 4]);
    hex.push_back(kHex[c & 15]);
  }
  return hex;
}

void EditModel::LoadState(const std::string& state) {
  if (state.size() % 2 != 0) throw std::invalid_argument("malformed edit scorer state");
  auto nibble = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    throw std::invalid_argument("malformed edit scorer state");
  };
  std::string bytes;
  for (size_t i = 0; i < state.size(); i += 2) {
    bytes.push_back(static_cast<char>(nibble(state[i]) * 16 + nibble(state[i + 1])));
  }
  std::istringstream in(bytes);
  torch::serialize::InputArchive archive, net, optimizer;
  archive.load_from(in);
  archive.read("net", net);
  archive.read("optimizer", optimizer);
  net_->load(net);
  online_optimizer_->load(optimizer);
}

void EditModel::Save(const std::filesystem::path& file) const {
  torch::serialize::OutputArchive archive;
  archive.write("feature_version", torch::tensor(static_cast<int64_t>(kEditFeatureVersion)));
  archive.write("feature_dims", torch::tensor(static_cast<int64_t>(kEditFeatureDims)));
  archive.write("hidden", torch::tensor(static_cast<int64_t>(options_.hidden)));
  torch::serialize::OutputArchive net;
  net_->save(net);
  archive.write("net", net);
  archive.save_to(file.string());
}

std::unique_ptr<EditModel> EditModel::Load(const std::filesystem::path& file,
                                           EditModelOptions options) {
  auto refuse = [&](const std::string& why) {
    return std::runtime_error(fmt::format("edit model '{}': {}", file.string(), why));
  };
  if (!std::filesystem::exists(file)) throw refuse("no such file");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(file.string());
  } catch (const c10::Error& e) {
    throw refuse("not an edit model file (" + std::string(e.what_without_backtrace()) + ")");
  }
  auto read = [&](const char* key) {
    at::Tensor t;
    if (!archive.try_read(key, t)) throw refuse(fmt::format("no '{}' in the file", key));
    return t.item<int64_t>();
  };
  const int64_t version = read("feature_version"), dims = read("feature_dims");
  if (version != kEditFeatureVersion || dims != kEditFeatureDims) {
    throw refuse(fmt::format(
        "made for edit features version {} ({} features); this placer reads version {} ({}): "
        "pretrain it again",
        version, dims, kEditFeatureVersion, static_cast<int>(kEditFeatureDims)));
  }
  options.hidden = static_cast<int>(read("hidden"));
  auto model = std::make_unique<EditModel>(options);
  torch::serialize::InputArchive net;
  if (!archive.try_read("net", net)) throw refuse("no weights in the file");
  try {
    model->net_->load(net);
  } catch (const c10::Error& e) {
    throw refuse("weights of another shape (" + std::string(e.what_without_backtrace()) + ")");
  }
  return model;
}

}  // namespace placer::search
