#include "graph/generated_models.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <stdexcept>

#include "graph/models.h"
#include "graph/ops.h"

namespace placer::graph {

namespace {

class Generator {
 public:
  Generator(const GeneratedModelOptions& o, int64_t batch)
      : o_(o), b_(graph_), rng_(o.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(o.family)) {
    x_ = b_.Input("features", {batch, o.in_features});
    y_ = b_.Input("labels", {batch}, DType::kInt64, TensorKind::kLabel);
  }

  Graph Finish(TensorId h, int64_t normalizer) {
    TensorId logits = b_.Linear("classifier", h, o_.classes, 0.02);
    b_.SoftmaxCrossEntropy("loss", logits, y_, normalizer);
    graph_.Validate();
    return std::move(graph_);
  }

  int64_t Width() {
    const double lo = std::log(static_cast<double>(o_.min_width));
    const double hi = std::log(static_cast<double>(std::max(o_.min_width, o_.max_width)));
    return static_cast<int64_t>(std::exp(std::uniform_real_distribution<double>(lo, hi)(rng_)));
  }
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  TensorId Block(TensorId in, int64_t width) {
    const std::string name = fmt::format("b{}", blocks_++);
    return b_.Relu(name + ".relu", b_.Linear(name, in, width, 0.02));
  }
  TensorId Sum(std::vector<TensorId> parts) {
    TensorId sum = parts.front();
    for (size_t i = 1; i < parts.size(); ++i) {
      sum = b_.Apply(fmt::format("add{}", adds_++), op_types::kAdd, {sum, parts[i]});
    }
    return sum;
  }
  TensorId Concat(std::vector<TensorId> parts) {
    if (parts.size() == 1) return parts.front();
    return b_.Concat(fmt::format("cat{}", adds_++), std::move(parts), 1);
  }

  TensorId Layered() {
    std::vector<TensorId> previous{x_};
    const int per_layer = Uniform(2, 5);
    const int layers = std::max(2, o_.blocks / per_layer);
    for (int l = 0; l < layers; ++l) {
      const int64_t width = Width();
      // Each block reads 1-3 blocks of the layer before; every one of those is read by some
      // block (a block nobody reads would hold parameters that do not reach the loss).
      std::vector<std::vector<TensorId>> inputs(static_cast<size_t>(per_layer));
      std::vector<bool> read(previous.size(), false);
      for (auto& in : inputs) {
        const int reads = std::min<int>(Uniform(1, 3), static_cast<int>(previous.size()));
        std::vector<size_t> pool(previous.size());
        for (size_t i = 0; i < pool.size(); ++i) pool[i] = i;
        std::shuffle(pool.begin(), pool.end(), rng_);
        for (int r = 0; r < reads; ++r) {
          in.push_back(previous[pool[static_cast<size_t>(r)]]);
          read[pool[static_cast<size_t>(r)]] = true;
        }
      }
      for (size_t i = 0; i < previous.size(); ++i) {
        if (!read[i]) inputs[static_cast<size_t>(Uniform(0, per_layer - 1))].push_back(previous[i]);
      }
      std::vector<TensorId> layer;
      for (auto& in : inputs) layer.push_back(Block(Sum(in), width));
      previous = std::move(layer);
    }
    return Sum(previous);
  }

  TensorId Branching() {
    TensorId h = x_;
    while (blocks_ < o_.blocks) {
      const int branches = Uniform(2, 4);
      std::vector<TensorId> outs;
      for (int k = 0; k < branches; ++k) {
        TensorId t = h;
        const int depth = Uniform(1, 3);
        for (int d = 0; d < depth; ++d) t = Block(t, Width());
        outs.push_back(t);
      }
      h = Block(Concat(outs), Width());  // the join: a projection of the concatenation
    }
    return h;
  }

  TensorId Towers() {
    const int towers = Uniform(2, 8);
    const int64_t out = Width();
    std::vector<TensorId> ends;
    for (int t = 0; t < towers; ++t) {
      TensorId h = x_;
      const int depth = std::max(1, o_.blocks / towers + Uniform(-1, 1));
      const int64_t width = Width();
      for (int d = 0; d + 1 < depth; ++d) h = Block(h, width);
      ends.push_back(Block(h, out));
    }
    return Sum(ends);
  }

  TensorId Recurrent() {
    const int layers = Uniform(2, 4);
    const int steps = std::max(2, o_.blocks / layers);
    const int64_t width = Width();
    std::vector<TensorId> below(static_cast<size_t>(steps));
    for (int t = 0; t < steps; ++t) below[static_cast<size_t>(t)] = Block(x_, width);  // inputs
    for (int l = 0; l < layers; ++l) {
      std::vector<TensorId> row;
      for (int t = 0; t < steps; ++t) {
        TensorId in = below[static_cast<size_t>(t)];
        if (t > 0) in = Sum({in, row.back()});
        row.push_back(Block(in, width));
      }
      below = std::move(row);
    }
    return below.back();
  }

  // A series-parallel composition of about `blocks` blocks from `in`, ending at width `width`.
  TensorId SeriesParallel(TensorId in, int blocks, int64_t width) {
    if (blocks <= 1) return Block(in, width);
    const int first = Uniform(1, blocks - 1);
    if (std::bernoulli_distribution(0.5)(rng_)) {
      return SeriesParallel(SeriesParallel(in, first, Width()), blocks - first, width);
    }
    return Sum({SeriesParallel(in, first, width), SeriesParallel(in, blocks - first, width)});
  }

  TensorId Body() {
    switch (o_.family) {
      case GeneratedFamily::kLayered:
        return Layered();
      case GeneratedFamily::kBranching:
        return Branching();
      case GeneratedFamily::kTowers:
        return Towers();
      case GeneratedFamily::kRecurrent:
        return Recurrent();
      case GeneratedFamily::kSeriesParallel:
        return SeriesParallel(x_, o_.blocks, Width());
    }
    throw std::invalid_argument("unknown generated family");
  }

 private:
  const GeneratedModelOptions& o_;
  Graph graph_;
  ModelBuilder b_;
  std::mt19937_64 rng_;
  TensorId x_ = -1, y_ = -1;
  int blocks_ = 0, adds_ = 0;
};

}  // namespace

const std::vector<std::string_view>& GeneratedFamilyNames() {
  static const std::vector<std::string_view> names = {"layered", "branching", "towers", "recurrent",
                                                      "series_parallel"};
  return names;
}

std::string_view GeneratedFamilyName(GeneratedFamily family) {
  return GeneratedFamilyNames()[static_cast<size_t>(family)];
}

std::string GeneratedModelName(const GeneratedModelOptions& o) {
  return fmt::format("{}-{}-b{}", GeneratedFamilyName(o.family), o.seed, o.blocks);
}

Graph BuildGeneratedModel(const GeneratedModelOptions& options, int64_t batch, int64_t normalizer) {
  if (options.blocks < 1 || options.min_width < 1 || options.in_features < 1 ||
      options.classes < 1) {
    throw std::invalid_argument(
        "generated model: blocks, widths, in_features and classes must "
        "be positive");
  }
  Generator generator(options, batch);
  return generator.Finish(generator.Body(), normalizer);
}

}  // namespace placer::graph
