#include "graph/zoo.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "graph/models.h"
#include "graph/ops.h"
#include "graph/training_step.h"

namespace placer::graph {

const char* ToString(LstmCellKind kind) {
  switch (kind) {
    case LstmCellKind::kFused:
      return "fused";
    case LstmCellKind::kGates:
      return "gates";
  }
  return "?";
}

namespace {

void CheckAtLeast(int64_t value, int64_t minimum, const char* what) {
  if (value < minimum) {
    throw GraphError(fmt::format("{} must be at least {}, is {}", what, minimum, value));
  }
}

// Ends the forward graph: the training step when asked for, then the checks every builder owes.
Graph Finish(Graph graph, bool training_step, double learning_rate) {
  if (training_step) AppendBackwardAndUpdate(graph, learning_rate);
  graph.Validate();
  return graph;
}

// ------------------------------------------------------------------------------------------------
// Inception-V3

// torchvision's inception.py, block by block; channel counts are torchvision's, scaled by the
// width multiplier.
class InceptionBuilder {
 public:
  InceptionBuilder(ModelBuilder& b, double width) : b_(b), width_(width) {}

  int64_t Channels(int64_t channels) const {
    return std::max<int64_t>(1, std::llround(static_cast<double>(channels) * width_));
  }

  // BasicConv2d: convolution without bias, batch norm (epsilon 0.001), ReLU. Weights are He-normal
  // (std sqrt(2 / fan_in)), which keeps activations in range through 94 convolutions.
  TensorId Conv(const std::string& name, TensorId x, int64_t out, std::vector<int64_t> kernel,
                std::vector<int64_t> stride = {1, 1}, std::vector<int64_t> padding = {0, 0}) {
    const int64_t fan_in = b_.ShapeOf(x).at(1) * kernel.at(0) * kernel.at(1);
    TensorId h = b_.Conv2d(name + "/conv", x,
                           ConvSpec{.out_channels = Channels(out),
                                    .kernel = std::move(kernel),
                                    .stride = std::move(stride),
                                    .padding = std::move(padding),
                                    .bias = false,
                                    .stddev = std::sqrt(2.0 / static_cast<double>(fan_in))});
    h = b_.BatchNorm(name + "/bn", h, 1e-3);
    return b_.Relu(name + "/relu", h);
  }

  TensorId InceptionA(const std::string& n, TensorId x, int64_t pool_features) {
    TensorId b1 = Conv(n + "/branch1x1", x, 64, {1, 1});
    TensorId b5 = Conv(n + "/branch5x5_1", x, 48, {1, 1});
    b5 = Conv(n + "/branch5x5_2", b5, 64, {5, 5}, {1, 1}, {2, 2});
    TensorId b3 = Conv(n + "/branch3x3dbl_1", x, 64, {1, 1});
    b3 = Conv(n + "/branch3x3dbl_2", b3, 96, {3, 3}, {1, 1}, {1, 1});
    b3 = Conv(n + "/branch3x3dbl_3", b3, 96, {3, 3}, {1, 1}, {1, 1});
    TensorId bp = b_.AvgPool2d(n + "/branch_pool/pool", x, 3, 1, 1);
    bp = Conv(n + "/branch_pool", bp, pool_features, {1, 1});
    return b_.Concat(n + "/concat", {b1, b5, b3, bp}, 1);
  }

  TensorId InceptionB(const std::string& n, TensorId x) {
    TensorId b3 = Conv(n + "/branch3x3", x, 384, {3, 3}, {2, 2});
    TensorId bd = Conv(n + "/branch3x3dbl_1", x, 64, {1, 1});
    bd = Conv(n + "/branch3x3dbl_2", bd, 96, {3, 3}, {1, 1}, {1, 1});
    bd = Conv(n + "/branch3x3dbl_3", bd, 96, {3, 3}, {2, 2});
    TensorId bp = b_.MaxPool2d(n + "/branch_pool/pool", x, 3, 2);
    return b_.Concat(n + "/concat", {b3, bd, bp}, 1);
  }

  TensorId InceptionC(const std::string& n, TensorId x, int64_t c7) {
    TensorId b1 = Conv(n + "/branch1x1", x, 192, {1, 1});
    TensorId b7 = Conv(n + "/branch7x7_1", x, c7, {1, 1});
    b7 = Conv(n + "/branch7x7_2", b7, c7, {1, 7}, {1, 1}, {0, 3});
    b7 = Conv(n + "/branch7x7_3", b7, 192, {7, 1}, {1, 1}, {3, 0});
    TensorId bd = Conv(n + "/branch7x7dbl_1", x, c7, {1, 1});
    bd = Conv(n + "/branch7x7dbl_2", bd, c7, {7, 1}, {1, 1}, {3, 0});
    bd = Conv(n + "/branch7x7dbl_3", bd, c7, {1, 7}, {1, 1}, {0, 3});
    bd = Conv(n + "/branch7x7dbl_4", bd, c7, {7, 1}, {1, 1}, {3, 0});
    bd = Conv(n + "/branch7x7dbl_5", bd, 192, {1, 7}, {1, 1}, {0, 3});
    TensorId bp = b_.AvgPool2d(n + "/branch_pool/pool", x, 3, 1, 1);
    bp = Conv(n + "/branch_pool", bp, 192, {1, 1});
    return b_.Concat(n + "/concat", {b1, b7, bd, bp}, 1);
  }

  TensorId InceptionD(const std::string& n, TensorId x) {
    TensorId b3 = Conv(n + "/branch3x3_1", x, 192, {1, 1});
    b3 = Conv(n + "/branch3x3_2", b3, 320, {3, 3}, {2, 2});
    TensorId b7 = Conv(n + "/branch7x7x3_1", x, 192, {1, 1});
    b7 = Conv(n + "/branch7x7x3_2", b7, 192, {1, 7}, {1, 1}, {0, 3});
    b7 = Conv(n + "/branch7x7x3_3", b7, 192, {7, 1}, {1, 1}, {3, 0});
    b7 = Conv(n + "/branch7x7x3_4", b7, 192, {3, 3}, {2, 2});
    TensorId bp = b_.MaxPool2d(n + "/branch_pool/pool", x, 3, 2);
    return b_.Concat(n + "/concat", {b3, b7, bp}, 1);
  }

  TensorId InceptionE(const std::string& n, TensorId x) {
    TensorId b1 = Conv(n + "/branch1x1", x, 320, {1, 1});
    TensorId b3 = Conv(n + "/branch3x3_1", x, 384, {1, 1});
    TensorId b3a = Conv(n + "/branch3x3_2a", b3, 384, {1, 3}, {1, 1}, {0, 1});
    TensorId b3b = Conv(n + "/branch3x3_2b", b3, 384, {3, 1}, {1, 1}, {1, 0});
    b3 = b_.Concat(n + "/branch3x3/concat", {b3a, b3b}, 1);
    TensorId bd = Conv(n + "/branch3x3dbl_1", x, 448, {1, 1});
    bd = Conv(n + "/branch3x3dbl_2", bd, 384, {3, 3}, {1, 1}, {1, 1});
    TensorId bda = Conv(n + "/branch3x3dbl_3a", bd, 384, {1, 3}, {1, 1}, {0, 1});
    TensorId bdb = Conv(n + "/branch3x3dbl_3b", bd, 384, {3, 1}, {1, 1}, {1, 0});
    bd = b_.Concat(n + "/branch3x3dbl/concat", {bda, bdb}, 1);
    TensorId bp = b_.AvgPool2d(n + "/branch_pool/pool", x, 3, 1, 1);
    bp = Conv(n + "/branch_pool", bp, 192, {1, 1});
    return b_.Concat(n + "/concat", {b1, b3, bd, bp}, 1);
  }

 private:
  ModelBuilder& b_;
  double width_;
};

// ------------------------------------------------------------------------------------------------
// LSTM layers, unrolled

// One LSTM layer's weights, shared by all its time steps. Names are "<prefix>/w_ih" etc. for the
// fused cell and "<prefix>/gate_<g>/w_x" etc. for the gate-by-gate cell.
class LstmLayer {
 public:
  // PyTorch draws LSTM weights from U(-1/sqrt(H), 1/sqrt(H)); this is the normal distribution of
  // the same variance.
  LstmLayer(ModelBuilder& b, std::string prefix, int64_t input, int64_t hidden, LstmCellKind kind)
      : b_(b), prefix_(std::move(prefix)), hidden_(hidden), kind_(kind) {
    const Initializer weights{Initializer::Kind::kNormal,
                              1.0 / std::sqrt(3.0 * static_cast<double>(hidden))};
    if (kind == LstmCellKind::kFused) {
      w_ih_ = b.Parameter(prefix_ + "/w_ih", {4 * hidden, input}, weights);
      w_hh_ = b.Parameter(prefix_ + "/w_hh", {4 * hidden, hidden}, weights);
      bias_ = b.Parameter(prefix_ + "/bias", {4 * hidden}, {});
    } else {
      for (size_t g = 0; g < 4; ++g) {
        const std::string gate = fmt::format("{}/gate_{}", prefix_, kGateNames[g]);
        gates_[g].w_x = b.Parameter(gate + "/w_x", {hidden, input}, weights);
        gates_[g].bias = b.Parameter(gate + "/bias", {hidden}, {});
        gates_[g].w_h = b.Parameter(gate + "/w_h", {hidden, hidden}, weights);
      }
    }
  }

  // Time step `t` from state (h, c); returns {h', c'}.
  std::pair<TensorId, TensorId> Step(int64_t t, TensorId x, TensorId h, TensorId c) {
    const std::string step = fmt::format("{}/t{}", prefix_, t);
    if (kind_ == LstmCellKind::kFused) {
      return b_.LstmCell(step + "/lstm", x, h, c, w_ih_, w_hh_, bias_);
    }
    std::array<TensorId, 4> act{};
    for (size_t g = 0; g < 4; ++g) {
      const std::string gate = fmt::format("{}/gate_{}", step, kGateNames[g]);
      TensorId from_x =
          b_.Apply(gate + "/x", op_types::kLinear, {x, gates_[g].w_x, gates_[g].bias});
      TensorId from_h = b_.Apply(gate + "/h", op_types::kLinear, {h, gates_[g].w_h});
      TensorId sum = b_.Apply(gate + "/sum", op_types::kAdd, {from_x, from_h});
      // Gate order i, f, g, o (PyTorch's): the candidate g is tanh, the others sigmoid.
      act[g] = b_.Apply(gate + "/act", g == 2 ? op_types::kTanh : op_types::kSigmoid, {sum});
    }
    TensorId keep = b_.Apply(step + "/cell/forget", op_types::kMul, {act[1], c});
    TensorId write = b_.Apply(step + "/cell/write", op_types::kMul, {act[0], act[2]});
    TensorId c_next = b_.Apply(step + "/cell/c", op_types::kAdd, {keep, write});
    TensorId squashed = b_.Apply(step + "/cell/tanh", op_types::kTanh, {c_next});
    TensorId h_next = b_.Apply(step + "/cell/h", op_types::kMul, {act[3], squashed});
    return {h_next, c_next};
  }

  const std::string& prefix() const { return prefix_; }
  int64_t hidden() const { return hidden_; }

 private:
  static constexpr std::array<const char*, 4> kGateNames = {"i", "f", "g", "o"};
  struct Gate {
    TensorId w_x = -1, bias = -1, w_h = -1;
  };

  ModelBuilder& b_;
  std::string prefix_;
  int64_t hidden_;
  LstmCellKind kind_;
  TensorId w_ih_ = -1, w_hh_ = -1, bias_ = -1;
  std::array<Gate, 4> gates_{};
};

// A stack of LSTM layers stepped through time one step at a time (time-major, as TensorFlow's
// static_rnn over a MultiRNNCell), so that ops appear in the order they can run.
class LstmStack {
 public:
  // `prefix` + "/l<k>" names layer k. Residual connections (output = cell output + layer input)
  // on layers >= `residual_from` (GNMT: from the third layer on); a negative value disables them.
  LstmStack(ModelBuilder& b, const std::string& prefix, int64_t layers, int64_t input,
            int64_t hidden, LstmCellKind kind, int64_t residual_from)
      : b_(b), residual_from_(residual_from) {
    for (int64_t l = 0; l < layers; ++l) {
      std::string name = prefix.empty() ? fmt::format("l{}", l) : fmt::format("{}/l{}", prefix, l);
      layers_.emplace_back(b, std::move(name), l == 0 ? input : hidden, hidden, kind);
    }
  }

  // Every layer starts from a zero state of `batch` rows: one Constant per layer, named
  // "<layer>/zero_state", used for both h and c.
  void StartFromZero(int64_t batch) {
    state_.clear();
    for (LstmLayer& layer : layers_) {
      TensorId zero = b_.Zeros(layer.prefix() + "/zero_state", {batch, layer.hidden()});
      state_.emplace_back(zero, zero);
    }
  }
  void StartFrom(std::vector<std::pair<TensorId, TensorId>> state) { state_ = std::move(state); }
  const std::vector<std::pair<TensorId, TensorId>>& state() const { return state_; }

  // Time step `t` on input x; returns the top layer's output.
  TensorId Step(int64_t t, TensorId x) {
    for (size_t l = 0; l < layers_.size(); ++l) {
      auto [h, c] = layers_[l].Step(t, x, state_[l].first, state_[l].second);
      state_[l] = {h, c};
      if (residual_from_ >= 0 && static_cast<int64_t>(l) >= residual_from_) {
        h = b_.Apply(fmt::format("{}/t{}/residual", layers_[l].prefix(), t), op_types::kAdd,
                     {h, x});
      }
      x = h;
    }
    return x;
  }

 private:
  ModelBuilder& b_;
  int64_t residual_from_;
  std::vector<LstmLayer> layers_;
  std::vector<std::pair<TensorId, TensorId>> state_;
};

// Token ids [steps, batch] (time-major int64 input `prefix`/tokens) -> one embedding lookup for
// all steps (so the table receives one gradient, not one per step), split into per-step [batch,
// embedding] inputs named "<prefix>/t<t>/embed" (or "embed/t<t>" without a prefix).
std::vector<TensorId> EmbedSteps(ModelBuilder& b, const std::string& prefix, int64_t steps,
                                 int64_t batch, int64_t vocab, int64_t embedding) {
  const std::string base = prefix.empty() ? "" : prefix + "/";
  TensorId tokens = b.Input(base + "tokens", {steps, batch}, DType::kInt64);
  TensorId table =
      b.Parameter(base + "embed.table", {vocab, embedding}, {Initializer::Kind::kNormal, 1.0});
  TensorId embedded = b.Apply(base + "embed", op_types::kGather, {table, tokens});
  std::vector<TensorId> pieces =
      b.Split(base + "embed/split", embedded, 0, std::vector<int64_t>(steps, 1));
  std::vector<TensorId> inputs;
  for (int64_t t = 0; t < steps; ++t) {
    const std::string name =
        prefix.empty() ? fmt::format("embed/t{}", t) : fmt::format("{}/t{}/embed", prefix, t);
    inputs.push_back(b.Reshape(name, pieces[static_cast<size_t>(t)], {batch, embedding}));
  }
  return inputs;
}

int64_t Normalizer(int64_t loss_normalizer, int64_t batch) {
  return loss_normalizer > 0 ? loss_normalizer : batch;
}

}  // namespace

void InceptionV3Options::Fields(FieldVisitor& v) {
  v.Int("image_size", image_size, 75,
        "input height and width (3 channels); below 75 the last blocks have nothing left");
  v.Int("classes", classes, 1, "width of the classifier");
  v.Positive("width_multiplier", width_multiplier,
             "scales every layer's channels (rounded, at least 1), for small networks");
}

std::optional<FieldError> InceptionV3Options::Check() const { return std::nullopt; }

std::map<std::string, std::string> InceptionV3Options::ExpertFacts() const { return {}; }

Graph BuildInceptionV3(const InceptionV3Options& options) {
  InceptionV3Options o = options;
  CheckFields(o);
  Graph graph;
  ModelBuilder b(graph);
  InceptionBuilder net(b, o.width_multiplier);
  TensorId x = b.Input("images", {o.batch_size, 3, o.image_size, o.image_size});
  TensorId y = b.Input("labels", {o.batch_size}, DType::kInt64, TensorKind::kLabel);
  TensorId h = net.Conv("stem/conv2d_1a_3x3", x, 32, {3, 3}, {2, 2});
  h = net.Conv("stem/conv2d_2a_3x3", h, 32, {3, 3});
  h = net.Conv("stem/conv2d_2b_3x3", h, 64, {3, 3}, {1, 1}, {1, 1});
  h = b.MaxPool2d("stem/maxpool1", h, 3, 2);
  h = net.Conv("stem/conv2d_3b_1x1", h, 80, {1, 1});
  h = net.Conv("stem/conv2d_4a_3x3", h, 192, {3, 3});
  h = b.MaxPool2d("stem/maxpool2", h, 3, 2);
  h = net.InceptionA("mixed_5b", h, 32);
  h = net.InceptionA("mixed_5c", h, 64);
  h = net.InceptionA("mixed_5d", h, 64);
  h = net.InceptionB("mixed_6a", h);
  h = net.InceptionC("mixed_6b", h, 128);
  h = net.InceptionC("mixed_6c", h, 160);
  h = net.InceptionC("mixed_6d", h, 160);
  h = net.InceptionC("mixed_6e", h, 192);
  h = net.InceptionD("mixed_7a", h);
  h = net.InceptionE("mixed_7b", h);
  h = net.InceptionE("mixed_7c", h);
  h = b.Apply("head/avgpool", op_types::kGlobalAvgPool2d, {h});
  h = b.Apply("head/flatten", op_types::kFlatten, {h});
  h = b.Linear("head/fc", h, o.classes, 0.01);
  b.SoftmaxCrossEntropy("loss", h, y, o.loss_normalizer);
  return Finish(std::move(graph), o.training_step, o.learning_rate);
}

namespace {

// The cell kind as a config names it.
void CellField(FieldVisitor& v, LstmCellKind& cell) {
  std::string name = ToString(cell);
  v.Choice("cell", name, {"gates", "fused"},
           "how an LSTM step appears in the graph: `gates` as 21 ops (per gate a Linear of the "
           "input, a Linear of the state, their sum, the activation; then the cell and output "
           "updates; the op-level graphs the papers placed), `fused` as one `LstmCell` op. Same "
           "weights, same numbers");
  cell = name == "fused" ? LstmCellKind::kFused : LstmCellKind::kGates;
}

std::map<std::string, std::string> Layers(int64_t layers) {
  return {{"layers", std::to_string(layers)}};
}

}  // namespace

void RnnLmOptions::Fields(FieldVisitor& v) {
  v.Int("time_steps", time_steps, 1, "unrolled steps");
  v.Int("layers", layers, 1, "LSTM layers");
  v.Int("hidden", hidden, 1, "LSTM state size");
  v.Int("embedding", embedding, 1, "word embedding size");
  v.Int("vocab", vocab, 2, "vocabulary (embedding rows and softmax width)");
  CellField(v, cell);
}

std::optional<FieldError> RnnLmOptions::Check() const { return std::nullopt; }

std::map<std::string, std::string> RnnLmOptions::ExpertFacts() const { return Layers(layers); }

Graph BuildRnnLm(const RnnLmOptions& options) {
  RnnLmOptions o = options;
  CheckFields(o);
  Graph graph;
  ModelBuilder b(graph);
  std::vector<TensorId> inputs =
      EmbedSteps(b, "", o.time_steps, o.batch_size, o.vocab, o.embedding);
  LstmStack stack(b, "", o.layers, o.embedding, o.hidden, o.cell, /*residual_from=*/-1);
  stack.StartFromZero(o.batch_size);
  const double proj_stddev = 1.0 / std::sqrt(static_cast<double>(o.hidden));
  TensorId w = b.Parameter("softmax/proj.weight", {o.vocab, o.hidden},
                           {Initializer::Kind::kNormal, proj_stddev});
  TensorId bias = b.Parameter("softmax/proj.bias", {o.vocab}, {});
  for (int64_t t = 0; t < o.time_steps; ++t) {
    TensorId top = stack.Step(t, inputs[static_cast<size_t>(t)]);
    const std::string step = fmt::format("softmax/t{}", t);
    TensorId logits = b.Apply(step + "/logits", op_types::kLinear, {top, w, bias});
    TensorId labels = b.Input(step + "/labels", {o.batch_size}, DType::kInt64, TensorKind::kLabel);
    b.SoftmaxCrossEntropy(step + "/loss", logits, labels,
                          Normalizer(o.loss_normalizer, o.batch_size));
  }
  return Finish(std::move(graph), o.training_step, o.learning_rate);
}

void NmtOptions::Fields(FieldVisitor& v) {
  v.Int("layers", layers, 1, "LSTM layers of the encoder and of the decoder (the papers: 2, 4, 8)");
  v.Int("source_steps", source_steps, 1, "unrolled encoder steps");
  v.Int("target_steps", target_steps, 1,
        "unrolled decoder steps. The papers unroll 40 to 50 steps; 72 gives the op count of their "
        "graphs, whose gradients had several ops per forward op where this IR has one");
  v.Int("hidden", hidden, 1, "LSTM state size");
  v.Int("embedding", embedding, 1, "word embedding size");
  v.Int("source_vocab", source_vocab, 2, "source vocabulary");
  v.Int("target_vocab", target_vocab, 2, "target vocabulary (softmax width)");
  CellField(v, cell);
}

std::optional<FieldError> NmtOptions::Check() const { return std::nullopt; }

std::map<std::string, std::string> NmtOptions::ExpertFacts() const { return Layers(layers); }

Graph BuildNmt(const NmtOptions& options) {
  NmtOptions o = options;
  CheckFields(o);
  const int64_t batch = o.batch_size, hidden = o.hidden;
  Graph graph;
  ModelBuilder b(graph);

  // Encoder, its top outputs gathered as the attention memory [batch, source_steps, hidden].
  std::vector<TensorId> source =
      EmbedSteps(b, "enc", o.source_steps, batch, o.source_vocab, o.embedding);
  LstmStack encoder(b, "enc", o.layers, o.embedding, hidden, o.cell, /*residual_from=*/2);
  encoder.StartFromZero(batch);
  std::vector<TensorId> memory_steps;
  for (int64_t t = 0; t < o.source_steps; ++t) {
    TensorId top = encoder.Step(t, source[static_cast<size_t>(t)]);
    memory_steps.push_back(
        b.Reshape(fmt::format("attention/memory/t{}", t), top, {batch, 1, hidden}));
  }
  TensorId memory = b.Concat("attention/memory", memory_steps, 1);

  // Decoder from the encoder's final states; attention and softmax at every step.
  std::vector<TensorId> target =
      EmbedSteps(b, "dec", o.target_steps, batch, o.target_vocab, o.embedding);
  LstmStack decoder(b, "dec", o.layers, o.embedding, hidden, o.cell, /*residual_from=*/2);
  decoder.StartFrom(encoder.state());
  const double stddev = 1.0 / std::sqrt(static_cast<double>(hidden));
  TensorId combine = b.Parameter("attention/combine.weight", {hidden, 2 * hidden},
                                 {Initializer::Kind::kNormal, stddev});
  TensorId proj = b.Parameter("softmax/proj.weight", {o.target_vocab, hidden},
                              {Initializer::Kind::kNormal, stddev});
  TensorId proj_bias = b.Parameter("softmax/proj.bias", {o.target_vocab}, {});
  for (int64_t t = 0; t < o.target_steps; ++t) {
    TensorId top = decoder.Step(t, target[static_cast<size_t>(t)]);
    const std::string att = fmt::format("attention/t{}", t);
    TensorId query = b.Reshape(att + "/query", top, {batch, hidden, 1});
    TensorId scores = b.Apply(att + "/scores", op_types::kMatMul, {memory, query});
    TensorId weights = b.Softmax(att + "/weights", scores, 1);  // over the source steps
    TensorId row = b.Reshape(att + "/weights_row", weights, {batch, 1, o.source_steps});
    TensorId context = b.Apply(att + "/context", op_types::kMatMul, {row, memory});
    context = b.Reshape(att + "/context_2d", context, {batch, hidden});
    TensorId joined = b.Concat(att + "/concat", {context, top}, 1);
    TensorId attentional = b.Apply(att + "/combine", op_types::kLinear, {joined, combine});
    attentional = b.Apply(att + "/tanh", op_types::kTanh, {attentional});
    const std::string step = fmt::format("softmax/t{}", t);
    TensorId logits = b.Apply(step + "/logits", op_types::kLinear, {attentional, proj, proj_bias});
    TensorId labels = b.Input(step + "/labels", {batch}, DType::kInt64, TensorKind::kLabel);
    b.SoftmaxCrossEntropy(step + "/loss", logits, labels, Normalizer(o.loss_normalizer, batch));
  }
  return Finish(std::move(graph), o.training_step, o.learning_rate);
}

void TransformerOptions::Fields(FieldVisitor& v) {
  v.Int("seq_length", seq_length, 1, "tokens per sequence (at most max_positions)");
  v.Int("layers", layers, 1, "encoder layers");
  v.Int("hidden", hidden, 1, "model width (divisible by heads)");
  v.Int("heads", heads, 1, "attention heads");
  v.Int("ffn", ffn, 1, "feed-forward width");
  v.Int("vocab", vocab, 1, "word embedding rows");
  v.Int("max_positions", max_positions, 1, "position embedding rows (at least seq_length)");
  v.Int("classes", classes, 1, "classifier width");
}

std::optional<FieldError> TransformerOptions::Check() const {
  if (hidden % heads != 0) {
    return FieldError{{"heads"}, fmt::format("{} heads do not divide hidden {}", heads, hidden)};
  }
  if (max_positions < seq_length) {
    return FieldError{
        {"max_positions", "seq_length"},
        fmt::format("seq_length {} exceeds max_positions {}", seq_length, max_positions)};
  }
  return std::nullopt;
}

std::map<std::string, std::string> TransformerOptions::ExpertFacts() const {
  return Layers(layers);
}

Graph BuildTransformerEncoder(const TransformerOptions& options) {
  TransformerOptions o = options;
  CheckFields(o);
  CheckAtLeast(o.type_vocab, 1, "type_vocab");
  const int64_t batch = o.batch_size, seq = o.seq_length, d = o.hidden, heads = o.heads;
  const int64_t head_size = d / heads;
  constexpr double kStddev = 0.02;    // BERT's initializer_range
  constexpr double kEpsilon = 1e-12;  // BERT's layer_norm_eps
  const Initializer normal{Initializer::Kind::kNormal, kStddev};
  Graph graph;
  ModelBuilder b(graph);

  TensorId ids = b.Input("embeddings/token_ids", {batch, seq}, DType::kInt64);
  TensorId type_ids = b.Input("embeddings/type_ids", {batch, seq}, DType::kInt64);
  TensorId y = b.Input("labels", {batch}, DType::kInt64, TensorKind::kLabel);
  TensorId word = b.Apply("embeddings/word", op_types::kGather,
                          {b.Parameter("embeddings/word.table", {o.vocab, d}, normal), ids});
  // Positions 0..seq-1 are the same for every sequence: the first rows of the table, broadcast.
  TensorId position =
      b.Slice("embeddings/position",
              b.Parameter("embeddings/position.table", {o.max_positions, d}, normal), 0, 0, seq);
  TensorId type =
      b.Apply("embeddings/type", op_types::kGather,
              {b.Parameter("embeddings/type.table", {o.type_vocab, d}, normal), type_ids});
  TensorId x = b.Apply("embeddings/add_position", op_types::kAdd, {word, position});
  x = b.Apply("embeddings/add_type", op_types::kAdd, {x, type});
  x = b.LayerNorm("embeddings/layer_norm", x, kEpsilon);

  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_size)));
  for (int64_t l = 0; l < o.layers; ++l) {
    const std::string att = fmt::format("l{}/attention", l);
    // [batch, seq, d] -> [batch, heads, seq, head_size] (keys: [batch, heads, head_size, seq]).
    auto project = [&](const char* what, std::vector<int64_t> perm) {
      TensorId p = b.Linear(fmt::format("{}/{}", att, what), x, d, kStddev);
      p = b.Reshape(fmt::format("{}/{}_split", att, what), p, {batch, seq, heads, head_size});
      return b.Transpose(fmt::format("{}/{}_heads", att, what), p, perm);
    };
    TensorId q = project("query", {0, 2, 1, 3});
    TensorId k = project("key", {0, 2, 3, 1});
    TensorId v = project("value", {0, 2, 1, 3});
    TensorId scores = b.Apply(att + "/scores", op_types::kMatMul, {q, k});
    TensorId factor = b.Constant(att + "/scale_factor", {1}, {scale});
    scores = b.Apply(att + "/scale", op_types::kMul, {scores, factor});
    TensorId probs = b.Softmax(att + "/probs", scores, -1);
    TensorId context = b.Apply(att + "/context", op_types::kMatMul, {probs, v});
    context = b.Transpose(att + "/context_heads", context, {0, 2, 1, 3});
    context = b.Reshape(att + "/context_merge", context, {batch, seq, d});
    TensorId out = b.Linear(att + "/output", context, d, kStddev);
    out = b.Apply(att + "/residual", op_types::kAdd, {out, x});
    x = b.LayerNorm(att + "/layer_norm", out, kEpsilon);

    const std::string ffn = fmt::format("l{}/ffn", l);
    TensorId f = b.Linear(ffn + "/intermediate", x, o.ffn, kStddev);
    f = b.Apply(ffn + "/gelu", op_types::kGelu, {f});
    f = b.Linear(ffn + "/output", f, d, kStddev);
    f = b.Apply(ffn + "/residual", op_types::kAdd, {f, x});
    x = b.LayerNorm(ffn + "/layer_norm", f, kEpsilon);
  }

  // BERT's pooler reads the first token ([CLS]); the classifier sits on the pooled output.
  TensorId first = b.Slice("head/first_token", x, 1, 0, 1);
  first = b.Reshape("head/first_token_2d", first, {batch, d});
  TensorId pooled = b.Linear("head/pooler", first, d, kStddev);
  pooled = b.Apply("head/pooler_tanh", op_types::kTanh, {pooled});
  TensorId logits = b.Linear("head/classifier", pooled, o.classes, kStddev);
  b.SoftmaxCrossEntropy("loss", logits, y, o.loss_normalizer);
  return Finish(std::move(graph), o.training_step, o.learning_rate);
}

}  // namespace placer::graph
