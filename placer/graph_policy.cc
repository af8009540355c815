#include "placer/graph_policy.h"

#include <ATen/ATen.h>
#include <fmt/format.h>
#include <torch/serialize/archive.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>
#include <stdexcept>

#include "placer/graph_policy_inputs.h"

namespace placer::search {

// What the policy knows of the graph and space it is bound to (the weights know neither).
namespace {

double MeanOf(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

float LogRatio(double value, double scale) {
  return scale > 0 ? static_cast<float>(std::log1p(std::max(0.0, value) / scale)) : 0.0f;
}

}  // namespace
GraphPolicyImpl::GraphPolicyImpl(PolicyOptions options) : options_(options) {
  const int h = options.graph_hidden;
  if (h < 1 || options.message_rounds < 0) {
    throw std::invalid_argument("the graph policy needs graph_hidden >= 1, message_rounds >= 0");
  }
  input_ = register_module("input", torch::nn::Linear(kNodeFeatures, h));
  rounds_ = register_module("rounds", torch::nn::ModuleList());
  norms_ = register_module("norms", torch::nn::ModuleList());
  for (int r = 0; r < options.message_rounds; ++r) {
    rounds_->push_back(torch::nn::Linear(3 * h, h));
    norms_->push_back(torch::nn::LayerNorm(torch::nn::LayerNormOptions({h})));
  }
  shape_hidden_ = register_module("shape_hidden", torch::nn::Linear(2 * h + kShapeFeatures, h));
  shape_out_ = register_module("shape_out", torch::nn::Linear(h, 1));
  option_group_ = register_module("option_group",
                                  torch::nn::Linear(torch::nn::LinearOptions(h, h).bias(false)));
  option_features_ = register_module("option_features", torch::nn::Linear(kOptionFeatures, h));
  option_out_ = register_module("option_out", torch::nn::Linear(h, 1));
  prior_weights_ = register_parameter("prior_weights",
                                      at::tensor({options.locality_prior, options.locality_prior,
                                                  options.incumbent_prior, options.incumbent_prior},
                                                 at::kFloat));
}

GraphPolicyImpl::GraphPolicyImpl(const graph::GroupFeatures& features, const ActionSpace& space,
                                 PolicyOptions options)
    : GraphPolicyImpl(options) {
  Bind(features, space);
}

const GraphPolicyInputs& GraphPolicyImpl::bound() const {
  if (!bound_) throw std::logic_error("the graph policy is bound to no graph");
  return *bound_;
}

const ActionSpace& GraphPolicyImpl::space() const { return bound().space; }

void GraphPolicyImpl::Bind(const graph::GroupFeatures& f, const ActionSpace& space) {
  bound_ = std::make_shared<const GraphPolicyInputs>(f, space);
}

void GraphPolicyImpl::SetMachine(double seconds_per_work, double seconds_per_byte) {
  seconds_per_work_ = std::isfinite(seconds_per_work) ? std::max(0.0, seconds_per_work) : 0;
  seconds_per_byte_ = std::isfinite(seconds_per_byte) ? std::max(0.0, seconds_per_byte) : 0;
}

at::Tensor GraphPolicyImpl::NodeFeatures() const {
  const GraphPolicyInputs& b = bound();
  const auto gs = static_cast<size_t>(b.groups);
  const double mean_work = MeanOf(b.work), mean_out = MeanOf(b.out_bytes),
               mean_param = MeanOf(b.param_bytes);
  // Work units per byte on this machine: what makes traffic cheap or dear against compute.
  const double per_byte = seconds_per_work_ > 0 ? seconds_per_byte_ / seconds_per_work_ : 0;
  const double total_work = std::accumulate(b.work.begin(), b.work.end(), 0.0);
  const double total_out = std::accumulate(b.out_bytes.begin(), b.out_bytes.end(), 0.0);
  std::vector<float> x(gs * kNodeFeatures, 0.0f);
  for (size_t g = 0; g < gs; ++g) {
    float* row = &x[g * kNodeFeatures];
    const double level = (b.top[g] + b.bottom[g]) / b.critical;
    row[0] = LogRatio(b.work[g], mean_work);
    row[1] = LogRatio(b.out_bytes[g], mean_out);
    row[2] = LogRatio(b.param_bytes[g], mean_param);
    row[3] = static_cast<float>(b.top[g] / b.critical);
    row[4] = static_cast<float>(b.bottom[g] / b.critical);
    row[5] = static_cast<float>(level);
    row[6] = level >= 0.999 ? 1.0f : 0.0f;
    row[7] = static_cast<float>(static_cast<double>(g) / static_cast<double>(gs));
    row[8] = LogRatio(b.out_bytes[g] * per_byte, b.work[g]);
    row[9] = LogRatio(b.param_bytes[g] * per_byte, b.work[g]);
    row[10] = LogRatio(b.in_bytes[g] * per_byte, b.work[g]);
    row[11] = static_cast<float>(std::log1p(b.in_degree[g]) / 3);
    row[12] = static_cast<float>(std::log1p(b.out_degree[g]) / 3);
    row[13] = static_cast<float>(std::log(static_cast<double>(gs)) / 7);
    row[14] = static_cast<float>(std::log2(static_cast<double>(b.devices)) / 3);
    row[15] = LogRatio(total_out * per_byte, total_work);
  }
  return at::tensor(x, at::kFloat).reshape({b.groups, kNodeFeatures});
}

at::Tensor GraphPolicyImpl::Encode() {
  const GraphPolicyInputs& b = bound();
  at::Tensor h = at::relu(input_(NodeFeatures()));
  for (size_t r = 0; r < rounds_->size(); ++r) {
    at::Tensor message = at::cat({h, b.in_adjacency.matmul(h), b.out_adjacency.matmul(h)}, -1);
    at::Tensor update = at::relu(rounds_[r]->as<torch::nn::Linear>()->forward(message));
    h = norms_[r]->as<torch::nn::LayerNorm>()->forward(h + update);
  }
  return h;
}

at::Tensor GraphPolicyImpl::Finish(at::Tensor logits) const {
  logits = logits / options_.temperature;
  if (options_.tanh_clip > 0) logits = options_.tanh_clip * at::tanh(logits / options_.tanh_clip);
  return logits;
}

at::Tensor GraphPolicyImpl::ShapeLogits(const at::Tensor& encoded,
                                        const std::optional<Candidate>& incumbent) {
  const GraphPolicyInputs& b = bound();
  const std::vector<StepShape>& shapes = b.space.shapes();
  const auto n = static_cast<int64_t>(shapes.size());
  const int incumbent_shape = incumbent ? b.space.ShapeIndex(*incumbent) : -1;
  const double log_devices = std::max(1.0, std::log2(static_cast<double>(b.devices)));
  std::vector<float> f(static_cast<size_t>(n) * kShapeFeatures, 0.0f);
  std::vector<float> chosen(static_cast<size_t>(n), 0.0f);
  for (int64_t s = 0; s < n; ++s) {
    const StepShape& shape = shapes[static_cast<size_t>(s)];
    float* row = &f[static_cast<size_t>(s) * kShapeFeatures];
    row[0] = static_cast<float>(shape.replicas) / static_cast<float>(b.devices);
    row[1] = static_cast<float>(std::log2(static_cast<double>(shape.replicas)) / log_devices);
    row[2] = shape.replicas == b.devices ? 1.0f : 0.0f;
    row[3] = shape.micro_batches > 1 ? 1.0f : 0.0f;
    row[4] = static_cast<float>(std::log2(static_cast<double>(shape.micro_batches)) / 3);
    row[5] = shape.schedule == graph::PipelineSchedule::kOneFOneB ? 1.0f : 0.0f;
    row[6] = s == incumbent_shape ? 1.0f : 0.0f;
    chosen[static_cast<size_t>(s)] = row[6];
  }
  const at::Tensor pooled = at::cat({encoded.mean(0), std::get<0>(encoded.max(0))});
  const at::Tensor inputs = at::cat(
      {pooled.unsqueeze(0).expand({n, -1}), at::tensor(f, at::kFloat).reshape({n, kShapeFeatures})},
      -1);
  const at::Tensor logits = shape_out_(at::relu(shape_hidden_(inputs))).squeeze(-1);
  return Finish(logits + prior_weights_[3] * at::tensor(chosen, at::kFloat));
}

void GraphPolicyImpl::TimeFeatures(FinishEstimate& estimate, int t, const std::vector<int>& options,
                                   int replicas, float* out) const {
  const GraphPolicyInputs& b = bound();
  std::vector<double> finishes;
  estimate.Finishes(t, options, finishes);
  double earliest = std::numeric_limits<double>::infinity();
  for (int o = 0; o < b.options; ++o) {
    if (b.space.Allowed(o, replicas))
      earliest = std::min(earliest, finishes[static_cast<size_t>(o)]);
  }
  const double work = std::max(1e-9, static_cast<double>(b.work_units.data_ptr<float>()[t]));
  const double makespan = estimate.makespan();
  for (int o = 0; o < b.options; ++o) {
    const double f = finishes[static_cast<size_t>(o)];
    out[2 * o] = static_cast<float>(std::log1p(std::max(0.0, f - earliest) / work));
    out[2 * o + 1] = static_cast<float>(std::log1p(std::max(0.0, f - makespan) / work));
  }
}

double GraphPolicyImpl::UnitsPerByte() const {
  const GraphPolicyInputs& b = bound();
  const double per_byte = seconds_per_work_ > 0 ? seconds_per_byte_ / seconds_per_work_ : 0;
  return b.total_work > 0 ? per_byte / (b.total_work / b.devices) : 0;
}

at::Tensor GraphPolicyImpl::OptionFeatures(const Decisions& d) const {
  const at::Tensor work = d.work.unsqueeze(-1);                                  // [..., 1]
  const at::Tensor after = d.load.unsqueeze(-2) + work.unsqueeze(-1) * d.share;  // [..., O, D]
  const at::Tensor option_peak = after.masked_fill(d.share <= 0, 0).amax(-1);    // [..., O]
  const at::Tensor machine_peak = after.amax(-1);                                // [..., O]
  const at::Tensor peak_before = d.load.amax(-1, /*keepdim=*/true);              // [..., 1]
  const at::Tensor lengthens = (machine_peak - peak_before) / work.clamp_min(1e-6);
  const at::Tensor cut = at::log1p(d.cut_ratio.unsqueeze(-1) * (1 - d.produced));
  const at::Tensor sync = at::log1p(d.sync_ratio.unsqueeze(-1) * d.spread);
  // Devices are interchangeable up to their links: a fresh option (no group on its devices yet)
  // and the lowest unused device are what "open another device" means in any numbering of them
  // (pretraining's labels number devices in the order their groups come).
  const at::Tensor unused = d.load <= 0;  // [..., D]
  const at::Tensor fresh =
      (d.share > 0).logical_and(unused.unsqueeze(-2).logical_not()).any(-1).logical_not();
  const at::Tensor lowest_unused = unused.to(at::kFloat).argmax(-1, /*keepdim=*/true);
  const at::Tensor lowest_fresh =
      fresh.logical_and(bound().first_device.eq(lowest_unused)).to(at::kFloat);
  return at::stack(
      {d.width.select(-1, 0), d.width.select(-1, 1), d.produced, d.consumed, d.incumbent,
       d.previous, at::log1p(option_peak), at::log1p(peak_before).expand_as(option_peak),
       lengthens.clamp(0, 1), cut, sync, d.timing.select(-1, 0), d.timing.select(-1, 1),
       fresh.to(at::kFloat), lowest_fresh},
      -1);
}

at::Tensor GraphPolicyImpl::OptionLogits(const at::Tensor& group_part, const Decisions& d,
                                         const at::Tensor& masks) {
  const at::Tensor hidden = at::relu(group_part + option_features_(OptionFeatures(d)));
  const at::Tensor logits = option_out_(hidden).squeeze(-1) + prior_weights_[0] * d.produced +
                            prior_weights_[1] * d.consumed + prior_weights_[2] * d.incumbent;
  return Finish(logits) + masks;
}

PolicySample GraphPolicyImpl::Sample(int k, const std::optional<Candidate>& incumbent,
                                     at::Generator& generator, bool greedy,
                                     const std::vector<int>* shapes, double exploration) {
  at::NoGradGuard no_grad;
  const GraphPolicyInputs& b = bound();
  const int64_t groups = b.groups;
  const auto o_count = static_cast<size_t>(b.options);
  if (incumbent) b.space.Check(*incumbent, b.groups);
  const at::Tensor encoded = Encode();
  if (greedy) exploration = 0;
  const auto n_shapes = static_cast<int64_t>(b.space.shapes().size());
  const at::Tensor shape_log_p = MixExploration(
      at::log_softmax(ShapeLogits(encoded, incumbent), -1), at::ones({n_shapes}), exploration);
  at::Tensor shape_index;
  if (shapes != nullptr) {
    shape_index = at::tensor(std::vector<int64_t>(shapes->begin(), shapes->end()), at::kLong);
  } else {
    shape_index = ChooseFrom(shape_log_p.expand({k, -1}), greedy, generator).contiguous();
  }
  std::vector<int> r_of(static_cast<size_t>(k));
  std::vector<int64_t> r_index(static_cast<size_t>(k));
  std::vector<Candidate> candidates(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) {
    const auto s = static_cast<size_t>(shape_index[i].item<int64_t>());
    r_of[static_cast<size_t>(i)] = b.shape_replica_index.at(s);
    r_index[static_cast<size_t>(i)] = r_of[static_cast<size_t>(i)];
    const StepShape& shape = b.space.shapes()[s];
    Candidate& c = candidates[static_cast<size_t>(i)];
    c.replicas = shape.replicas;
    c.micro_batches = shape.micro_batches;
    c.schedule = shape.schedule;
    c.tensor_ways = shape.tensor_ways;
    c.options.resize(static_cast<size_t>(groups));
  }
  const at::Tensor replica = at::tensor(r_index, at::kLong);
  at::Tensor log_prob = at::empty({k, 1 + groups});
  log_prob.select(1, 0).copy_(shape_log_p.index_select(0, shape_index));

  const at::Tensor masks = b.locality.option_masks().index_select(0, replica);  // [K, O]
  const at::Tensor allowed = (masks == 0).to(at::kFloat);
  const at::Tensor consumed_all = b.locality.ConsumerShares(incumbent).index_select(0, replica);
  const at::Tensor group_part = option_group_(encoded);  // [G, H]
  Decisions d;
  d.share = b.share.index_select(0, replica);  // [K, O, D]
  d.spread = b.spread.index_select(0, replica);
  d.width = b.width.index_select(0, replica);
  d.load = at::zeros({k, b.devices});
  d.previous = at::zeros({k, b.options});
  const double per_byte = seconds_per_work_ > 0 ? seconds_per_byte_ / seconds_per_work_ : 0;
  std::vector<float> producer_share(static_cast<size_t>(groups * k) * o_count, 0.0f);
  std::vector<FinishEstimate> estimates;
  for (int64_t i = 0; i < k; ++i)
    estimates.emplace_back(b, r_of[static_cast<size_t>(i)], UnitsPerByte());
  std::vector<float> timing(static_cast<size_t>(k) * o_count * 2);
  for (int64_t t = 0; t < groups; ++t) {
    const auto ts = static_cast<size_t>(t);
    for (int64_t i = 0; i < k; ++i) {
      const auto is = static_cast<size_t>(i);
      TimeFeatures(estimates[is], static_cast<int>(t), candidates[is].options,
                   candidates[is].replicas, &timing[is * o_count * 2]);
    }
    d.timing = at::from_blob(timing.data(), {k, b.options, 2}, at::kFloat);
    d.produced = at::from_blob(&producer_share[ts * static_cast<size_t>(k) * o_count],
                               {k, b.options}, at::kFloat);
    d.consumed = consumed_all.select(1, t);
    d.incumbent = at::zeros({k, b.options});
    if (incumbent) d.incumbent.select(1, incumbent->options[ts]).fill_(1);
    d.work = b.work_units[t].expand({k});
    d.cut_ratio = at::full({k}, static_cast<float>(b.in_bytes[ts] * per_byte / b.work[ts]));
    d.sync_ratio = at::full({k}, static_cast<float>(b.param_bytes[ts] * per_byte / b.work[ts]));
    const at::Tensor log_p = MixExploration(
        at::log_softmax(OptionLogits(group_part[t].unsqueeze(0).unsqueeze(0), d, masks), -1),
        allowed, exploration);
    const at::Tensor choice = ChooseFrom(log_p, greedy, generator).contiguous();
    log_prob.select(1, 1 + t).copy_(log_p.gather(-1, choice.unsqueeze(-1)).squeeze(-1));
    d.load =
        d.load + b.work_units[t] *
                     d.share.gather(1, choice.view({k, 1, 1}).expand({k, 1, b.devices})).squeeze(1);
    d.previous = at::one_hot(choice, b.options).to(at::kFloat);
    const int64_t* chosen = choice.data_ptr<int64_t>();
    for (int64_t i = 0; i < k; ++i) {
      const auto option = static_cast<int>(chosen[i]);
      candidates[static_cast<size_t>(i)].options[ts] = option;
      estimates[static_cast<size_t>(i)].Commit(static_cast<int>(t),
                                               candidates[static_cast<size_t>(i)].options, option);
      b.locality.PushForward(producer_share.data(), static_cast<int>(t), static_cast<int>(i),
                             static_cast<int>(k), r_of[static_cast<size_t>(i)], option);
    }
  }
  return {std::move(candidates), log_prob};
}

PolicyScores GraphPolicyImpl::Score(const std::vector<Candidate>& prefixes,
                                    const std::vector<Candidate>& labels,
                                    const std::optional<Candidate>& incumbent) {
  if (prefixes.size() != labels.size() || labels.empty()) {
    throw std::invalid_argument("Score needs one prefix per label, and at least one label");
  }
  const GraphPolicyInputs& b = bound();
  const auto k = static_cast<int64_t>(labels.size());
  const int64_t groups = b.groups;
  const auto gs = static_cast<size_t>(groups);
  const auto o_count = static_cast<size_t>(b.options);
  const auto d_count = static_cast<size_t>(b.devices);
  if (incumbent) b.space.Check(*incumbent, b.groups);
  const at::Tensor encoded = Encode();

  std::vector<int64_t> r_of(static_cast<size_t>(k)), shape_of(static_cast<size_t>(k));
  std::vector<int64_t> chosen(static_cast<size_t>(k) * gs);
  std::vector<float> produced(static_cast<size_t>(k) * gs * o_count, 0.0f);
  std::vector<float> previous(static_cast<size_t>(k) * gs * o_count, 0.0f);
  std::vector<float> load(static_cast<size_t>(k) * gs * d_count, 0.0f);
  std::vector<float> timing(static_cast<size_t>(k) * gs * o_count * 2, 0.0f);
  const float* units = b.work_units.data_ptr<float>();
  for (int64_t i = 0; i < k; ++i) {
    const Candidate& prefix = prefixes[static_cast<size_t>(i)];
    const Candidate& label = labels[static_cast<size_t>(i)];
    b.space.Check(label, b.groups);
    if (prefix.options.size() != label.options.size()) {
      throw std::invalid_argument("a prefix places another number of groups than its label");
    }
    const int r = b.locality.ReplicaIndex(label.replicas);
    r_of[static_cast<size_t>(i)] = r;
    shape_of[static_cast<size_t>(i)] = b.space.ShapeIndex(label);
    std::vector<float> running(d_count, 0.0f);
    std::vector<int> mapped(gs);
    for (size_t t = 0; t < gs; ++t) mapped[t] = b.space.Nearest(prefix.options[t], label.replicas);
    FinishEstimate estimate(b, r, UnitsPerByte());
    for (size_t t = 0; t < gs; ++t) {
      TimeFeatures(estimate, static_cast<int>(t), mapped, label.replicas,
                   &timing[(static_cast<size_t>(i) * gs + t) * o_count * 2]);
      estimate.Commit(static_cast<int>(t), mapped, mapped[t]);
      const size_t row = static_cast<size_t>(i) * gs + t;
      chosen[row] = label.options[t];
      std::copy(running.begin(), running.end(), &load[row * d_count]);
      // A prefix option the label's R cannot use (the policy's own decoding under another R)
      // counts as its nearest allowed one.
      const int mine = b.space.Nearest(prefix.options[t], label.replicas);
      for (int replica = 0; replica < label.replicas; ++replica) {
        running[static_cast<size_t>(b.space.DeviceOf(mine, replica, label.replicas))] +=
            units[t] / static_cast<float>(label.replicas);
      }
      if (t > 0) {
        previous[row * o_count +
                 static_cast<size_t>(b.space.Nearest(prefix.options[t - 1], label.replicas))] = 1;
      }
      for (const auto& [producer, weight] : b.locality.producers(static_cast<int>(t))) {
        b.locality.AddLocalShare(
            &produced[row * o_count], r,
            b.space.Nearest(prefix.options[static_cast<size_t>(producer)], label.replicas), weight);
      }
    }
  }
  const at::Tensor replica = at::tensor(r_of, at::kLong);
  const at::Tensor shape_index = at::tensor(shape_of, at::kLong);
  const at::Tensor shape_log_p = at::log_softmax(ShapeLogits(encoded, incumbent), -1);
  const at::Tensor shape_entropy = -(shape_log_p.exp() * shape_log_p).sum();

  const double per_byte = seconds_per_work_ > 0 ? seconds_per_byte_ / seconds_per_work_ : 0;
  std::vector<float> cut(gs), sync(gs);
  for (size_t t = 0; t < gs; ++t) {
    cut[t] = static_cast<float>(b.in_bytes[t] * per_byte / b.work[t]);
    sync[t] = static_cast<float>(b.param_bytes[t] * per_byte / b.work[t]);
  }
  const std::vector<int64_t> kgo = {k, groups, b.options};
  Decisions d;
  d.load = at::tensor(load, at::kFloat).reshape({k, groups, b.devices});
  d.share = b.share.index_select(0, replica).unsqueeze(1).expand({k, groups, -1, -1});
  d.work = b.work_units.unsqueeze(0).expand({k, groups});
  d.produced = at::tensor(produced, at::kFloat).reshape(kgo);
  d.consumed = b.locality.ConsumerShares(incumbent).index_select(0, replica);
  std::vector<float> incumbent_one_hot(gs * o_count, 0.0f);
  if (incumbent) {
    for (size_t t = 0; t < gs; ++t) {
      incumbent_one_hot[t * o_count + static_cast<size_t>(incumbent->options[t])] = 1;
    }
  }
  d.incumbent = at::tensor(incumbent_one_hot, at::kFloat)
                    .reshape({groups, b.options})
                    .unsqueeze(0)
                    .expand(kgo);
  d.previous = at::tensor(previous, at::kFloat).reshape(kgo);
  d.spread = b.spread.index_select(0, replica).unsqueeze(1).expand(kgo);
  d.width = b.width.index_select(0, replica).unsqueeze(1).expand({k, groups, b.options, 2});
  d.cut_ratio = at::tensor(cut, at::kFloat).unsqueeze(0).expand({k, groups});
  d.timing = at::tensor(timing, at::kFloat).reshape({k, groups, b.options, 2});
  d.sync_ratio = at::tensor(sync, at::kFloat).unsqueeze(0).expand({k, groups});
  const at::Tensor masks =
      b.locality.option_masks().index_select(0, replica).unsqueeze(1).expand(kgo);
  const at::Tensor group_part = option_group_(encoded).unsqueeze(0).unsqueeze(2);    // [1, G, 1, H]
  const at::Tensor log_p = at::log_softmax(OptionLogits(group_part, d, masks), -1);  // [K, G, O]
  const at::Tensor label_t = at::tensor(chosen, at::kLong).reshape({k, groups, 1});
  const at::Tensor option_log_prob = log_p.gather(-1, label_t).squeeze(-1);
  const at::Tensor option_entropy = -(log_p.exp() * log_p).sum(-1);
  return {at::cat({shape_log_p.index_select(0, shape_index).unsqueeze(1), option_log_prob}, 1),
          at::cat({shape_entropy.expand({k, 1}), option_entropy}, 1)};
}

namespace {

std::vector<int64_t> FormatOf(const PolicyOptions& o) {
  return {GraphPolicyImpl::kVersion,
          o.graph_hidden,
          o.message_rounds,
          GraphPolicyImpl::kNodeFeatures,
          GraphPolicyImpl::kOptionFeatures,
          GraphPolicyImpl::kShapeFeatures};
}

std::string Describe(const std::vector<int64_t>& f) {
  if (f.size() != 6) return "an unknown format";
  return fmt::format("version {}, {} hidden, {} rounds, {}/{}/{} features", f[0], f[1], f[2], f[3],
                     f[4], f[5]);
}

}  // namespace

void GraphPolicyImpl::SaveWeights(const std::filesystem::path& file) const {
  torch::serialize::OutputArchive archive, weights;
  archive.write("format", at::tensor(FormatOf(options_), at::kLong));
  save(weights);
  archive.write("weights", weights);
  archive.save_to(file.string());
}

void GraphPolicyImpl::LoadWeights(const std::filesystem::path& file) {
  torch::serialize::InputArchive archive;
  at::Tensor format;
  try {
    archive.load_from(file.string());
    archive.read("format", format);
  } catch (const c10::Error& e) {
    throw std::runtime_error(fmt::format("{}: not a placer graph-policy file ({})", file.string(),
                                         std::string(e.what_without_backtrace())));
  }
  const std::vector<int64_t> found(format.data_ptr<int64_t>(),
                                   format.data_ptr<int64_t>() + format.numel());
  const std::vector<int64_t> expected = FormatOf(options_);
  if (found != expected) {
    throw std::runtime_error(
        fmt::format("{}: a graph policy of {}; this placer reads {} (pretrain it again with "
                    "this placer)",
                    file.string(), Describe(found), Describe(expected)));
  }
  torch::serialize::InputArchive weights;
  archive.read("weights", weights);
  load(weights);
}

}  // namespace placer::search
